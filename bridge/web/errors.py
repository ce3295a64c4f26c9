"""Error → HTTP for the bridge's own endpoints: one status table keyed by ``BridgeError.code``, one JSON shape.

Proxied 2.x traffic never reaches these handlers with a 2.x error: 2.x's own answer is relayed as it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flask import Flask, Response
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as WerkzeugResponse

from bridge.domain.errors import BridgeError

log = logging.getLogger("bridge.web")

# Keyed by code, not class, so the web layer needs no import of legacy_adapters or storage internals.
ERROR_STATUS: Mapping[str, int] = MappingProxyType({
    "RUN_NOT_FOUND": 404,
    "RUN_VERSION_CONFLICT": 409,
    "INVALID_RUN_TRANSITION": 409,
    "INVALID_ATTEMPT_TRANSITION": 409,
    "ATTEMPT_CONFLICT": 409,
    "IDEMPOTENCY_KEY_CONFLICT": 409,
    "PAYLOAD_INVALID": 422,
    "RETRY_NOT_ALLOWED": 409,
    "INVALID_LEGACY_CALLBACK": 400,
    "INVALID_LEGACY_TIME": 400,
    "INVALID_QUERY": 400,
    "LEGACY_UNAUTHORIZED": 401,
    "INVALID_FLAG_CHANGE": 400,
    "LEGACY_IMPORT_REFUSED": 409,  # the configured file is not (or no longer) an importable 2.x database
    "PROMOTION_REFUSED": 409,  # a gate is failing; the refusal names it
    "ADMIN_UNAUTHORIZED": 401,
    "ADMIN_DISABLED": 403,  # no admin token has been created yet
    "LEGACY_DATABASE": 503,
    "LEGACY_BUSY": 503,  # transient: 2.x's database is locked right now
    "PROJECTION_HALTED": 503,  # 2.x's database cannot take the projection; nothing was applied
    "STORE_BUSY": 503,  # transient: the caller may retry
    "STORE_UNAVAILABLE": 503,
    "SCHEMA_MISMATCH": 503,  # the store needs `bridge db upgrade`; nothing the caller did wrong
    "STORAGE_ERROR": 500,
    "BRIDGE_ERROR": 500,
    # StepRuns (docs/stepruns.md). The web layer only lists them (v3); the mutation codes are mapped for the guard test
    # and for any later endpoint, as the Run's are.
    "STEP_RUN_NOT_FOUND": 404,
    "STEP_RUN_INVALID": 422,
    "INVALID_STEP_RUN_TRANSITION": 409,
    "STEP_RUN_VERSION_CONFLICT": 409,
    "STEP_MUTATION_CONFLICT": 409,
    "STEP_RUN_LIMIT_REACHED": 409,
    "STEP_ATTEMPT_LIMIT_REACHED": 409,
    "RUN_TERMINAL": 409,
    "STEP_RUN_INTEGRITY": 500,  # a stored record fails its digest: the store was edited by hand
})
INTERNAL_ERROR = "INTERNAL_ERROR"


def status_for(error: type[BridgeError]) -> int:
    """The HTTP status of an error class: its own code's, else the nearest mapped ancestor's."""
    for cls in error.__mro__:
        code = cls.__dict__.get("code")
        if isinstance(code, str) and code in ERROR_STATUS:
            return ERROR_STATUS[code]
    return 500


def error_response(status: int, code: str, message: str, details: Mapping[str, Any] | None = None) -> Response:
    """``{"error": {"code", "message", "details"}}``; details that JSON cannot hold are shown as text."""
    payload = {"error": {"code": code, "message": message, "details": dict(details or {})}}
    body = json.dumps(payload, ensure_ascii=False, default=str)
    return Response(body, status=status, content_type="application/json")


def handle_bridge_error(exc: BridgeError) -> Response:
    return error_response(status_for(type(exc)), exc.code, exc.message, exc.details)


def handle_http_exception(exc: HTTPException) -> WerkzeugResponse | HTTPException:
    if exc.code is None or exc.code < 400:
        return exc  # a redirect or similar is an answer, not an error
    response = exc.get_response()  # keeps headers such as Allow on a 405
    rendered = error_response(exc.code, _code_name(exc), exc.description or exc.name)
    response.set_data(rendered.get_data())
    response.content_type = rendered.content_type
    return response


def handle_unexpected(exc: Exception) -> Response:
    log.error("unhandled %s", type(exc).__name__, exc_info=exc)
    return error_response(500, INTERNAL_ERROR, "internal error")


def register_error_handlers(app: Flask) -> None:
    # Flask picks the most specific handler by MRO, so HTTPException and BridgeError win over Exception.
    app.register_error_handler(BridgeError, handle_bridge_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)


def _code_name(exc: HTTPException) -> str:
    return exc.name.upper().replace(" ", "_").replace("-", "_").replace("'", "")
