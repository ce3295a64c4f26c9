"""The error table: every BridgeError subclass has an explicit HTTP status, and one JSON shape renders them."""

from __future__ import annotations

import importlib
import logging
import pkgutil

import pytest
from flask import Flask

from bridge.domain.errors import BridgeError, RunVersionConflictError, StorageError, StoreBusyError
from bridge.web.app import create_app
from bridge.web.errors import ERROR_STATUS, status_for
from tests.web.conftest import FakeUpstream, make_container

OUR_PACKAGES = ("bridge", "legacy_adapters", "projections")


def all_bridge_errors() -> list[type[BridgeError]]:
    """Every BridgeError subclass defined in the project, after importing every module of each package.

    Errors live beside the code that raises them (flags, importer, projector), not only in errors.py.
    """
    for name in OUR_PACKAGES:
        try:
            package = importlib.import_module(name)
        except ImportError:
            continue
        for module in pkgutil.walk_packages(package.__path__, f"{name}.", onerror=lambda _name: None):
            importlib.import_module(module.name)
    found: list[type[BridgeError]] = []
    pending = [BridgeError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.split(".")[0] in OUR_PACKAGES]


def test_every_bridge_error_subclass_has_its_code_explicitly_in_the_status_table() -> None:
    errors = all_bridge_errors()

    unmapped = sorted(f"{cls.__module__}.{cls.__qualname__} ({cls.code})" for cls in errors
                      if cls.code not in ERROR_STATUS)
    assert unmapped == []
    assert len(errors) >= 15  # the domain's and the legacy adapters' errors were really found


def test_the_status_table_keeps_the_style_guides_mapping() -> None:
    style_guide = {"RUN_NOT_FOUND": 404, "RUN_VERSION_CONFLICT": 409, "INVALID_RUN_TRANSITION": 409,
                   "IDEMPOTENCY_KEY_CONFLICT": 409, "INVALID_LEGACY_CALLBACK": 400}
    assert {code: ERROR_STATUS[code] for code in style_guide} == style_guide
    assert all(400 <= status < 600 for status in ERROR_STATUS.values())


def test_a_subclass_without_a_mapped_code_of_its_own_inherits_its_nearest_ancestors_status() -> None:
    class SlowDisk(StoreBusyError):
        pass

    class NewStorageProblem(StorageError):
        code = "NEW_STORAGE_PROBLEM"

    assert status_for(SlowDisk) == 503
    assert status_for(NewStorageProblem) == 500


def app_raising(exc: Exception, upstream: FakeUpstream) -> Flask:
    app = create_app(make_container(upstream))

    def boom() -> str:
        raise exc
    app.add_url_rule("/bridge/boom", "boom", boom)
    return app


def test_a_bridge_error_on_a_bridge_endpoint_renders_code_message_and_details(upstream: FakeUpstream) -> None:
    app = app_raising(RunVersionConflictError("run-1", 3, 4), upstream)

    response = app.test_client().get("/bridge/boom")

    assert response.status_code == 409 and response.content_type == "application/json"
    assert response.get_json() == {"error": {
        "code": "RUN_VERSION_CONFLICT", "message": "run run-1 is at version 4, not 3",
        "details": {"run_id": "run-1", "expected_version": 3, "current_version": 4}}}
    assert upstream.requests == []


def test_an_unexpected_exception_is_a_500_internal_error_with_its_traceback_logged(
        upstream: FakeUpstream, caplog: pytest.LogCaptureFixture) -> None:
    app = app_raising(RuntimeError("kaput"), upstream)

    with caplog.at_level(logging.ERROR, logger="bridge"):
        response = app.test_client().get("/bridge/boom")

    assert response.status_code == 500
    assert response.get_json()["error"] == {"code": "INTERNAL_ERROR", "message": "internal error", "details": {}}
    assert "Traceback" in caplog.text and "kaput" in caplog.text


def test_an_http_error_has_the_same_json_shape_and_keeps_its_headers(upstream: FakeUpstream) -> None:
    app = create_app(make_container(upstream))

    response = app.test_client().open("/bridge/flags/manual", method="DELETE")

    assert response.status_code == 405 and "PUT" in response.headers["Allow"]
    assert response.get_json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert upstream.requests == []
