"""Fixtures for the web layer: a Container whose httpx client talks to a recording MockTransport."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient

from bridge.bootstrap import Container
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.web.app import create_app

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
def client(app: Flask) -> FlaskClient:
    return app.test_client(use_cookies=False)  # its cookie jar would replace a sent Cookie header
