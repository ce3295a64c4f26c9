"""Fixtures for the web layer: a Container whose httpx client talks to a recording MockTransport, bare or with the
real shadow interceptor on a store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask

from bridge.bootstrap import Container
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.ports import ModeSource
from bridge.web.app import create_app
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.conftest import Backend
from tests.support import wiring
from tests.web.asgi_client import AsgiTestClient, bridge_client

LEGACY_URL = "http://legacy.test:5700"
OK_2X = b'{"code":200}'
JSON_2X = "application/json; charset=utf-8"

Reply = Callable[[httpx.Request], httpx.Response]


class FakeUpstream:
    """Stands in for 2.x: records every request and answers with ``reply`` (200 {"code":200} by default)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.reply: Reply = lambda _request: httpx.Response(200, headers={"Content-Type": JSON_2X}, content=OK_2X)
        self.on_request: Callable[[httpx.Request], None] = lambda _request: None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.on_request(request)
        return self.reply(request)

    @property
    def last(self) -> httpx.Request:
        assert self.requests, "nothing reached the upstream"
        return self.requests[-1]


def make_container(upstream: FakeUpstream, *, interceptor: Any = None, store: Any = None) -> Container:
    settings = Settings.from_env({"BRIDGE_LEGACY_URL": LEGACY_URL})
    http = httpx.Client(transport=httpx.MockTransport(upstream))
    return Container(settings=settings, metrics=BridgeMetrics(), http=http, store=store, interceptor=interceptor)


@contextmanager
def shadow_container(backend: Backend, tmp_path: Path, upstream: FakeUpstream,
                     modes: ModeSource) -> Iterator[tuple[Container, LegacyDataDir]]:
    """A Container wired as bootstrap wires it for the callback path: the real interceptor and a RunService that
    counts into the same metrics, on ``backend``'s store, in front of a fresh 2.x data dir (system scheduler, UTC)
    whose HTTP side is ``upstream``; closed afterwards."""
    legacy = create_legacy_data_dir(tmp_path / "ql-data")
    settings = wiring.legacy_settings(legacy.root, BRIDGE_DATA_DIR=str(tmp_path), BRIDGE_LEGACY_URL=LEGACY_URL,
                                      BRIDGE_SHADOW_BUDGET_MS="10000")
    assert backend.engine is not None
    metrics = BridgeMetrics()
    store = wiring.store_on(backend.engine, backend.uow, metrics=metrics)
    interceptor = wiring.interceptor(settings, store, modes, metrics=metrics)
    container = Container(settings=settings, metrics=metrics, store=store, interceptor=interceptor,
                          http=httpx.Client(transport=httpx.MockTransport(upstream)))
    try:
        yield container, legacy
    finally:
        interceptor.close()
        container.http.close()


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
def container(upstream: FakeUpstream) -> Iterator[Container]:
    container = make_container(upstream)
    yield container
    container.http.close()


@pytest.fixture
def app(container: Container) -> Flask:
    return create_app(container)


@pytest.fixture
def client(container: Container) -> Iterator[AsgiTestClient]:
    """The bridge's front door (bridge.web.asgi) over ``container``, as uvicorn would drive it."""
    client = bridge_client(container)
    yield client
    client.close()
