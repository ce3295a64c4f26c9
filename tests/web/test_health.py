"""/healthz and /metrics: the bridge's own endpoints, answered by the bridge and never forwarded."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import create_engine
from werkzeug.test import TestResponse

from bridge.web.app import create_app
from tests.web.conftest import FakeUpstream, make_container


def healthz(upstream: FakeUpstream, store: object = None) -> TestResponse:
    container = make_container(upstream, store=store)
    try:
        return create_app(container).test_client().get("/healthz")
    finally:
        container.http.close()


def test_healthz_is_ok_when_2x_answers_its_health_check_and_there_is_no_store(upstream: FakeUpstream) -> None:
    response = healthz(upstream)

    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "ok" and body["store"] == {"status": "disabled"}
    assert body["upstream"]["status"] == "ok" and body["upstream"]["http_status"] == 200
    assert [(r.method, r.url.path) for r in upstream.requests] == [("GET", "/api/health")]
    assert upstream.last.extensions["timeout"]["read"] == 2.0


def test_healthz_is_503_degraded_when_2x_is_unreachable(upstream: FakeUpstream) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)
    upstream.reply = fail

    response = healthz(upstream)

    assert response.status_code == 503
    body = response.get_json()
    assert body["status"] == "degraded" and body["upstream"] == {"status": "error", "error": "ConnectError"}


def test_healthz_is_503_when_2x_answers_its_health_check_with_an_error(upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(500, content=b"{}")

    response = healthz(upstream)

    assert response.status_code == 503 and response.get_json()["upstream"]["http_status"] == 500


def test_healthz_queries_the_store_and_is_503_when_it_cannot(upstream: FakeUpstream, tmp_path: Path) -> None:
    good = create_engine(f"sqlite:///{tmp_path / 'bridge.sqlite'}")
    bad = create_engine(f"sqlite:///{tmp_path / 'missing' / 'dir' / 'bridge.sqlite'}")
    try:
        ok = healthz(upstream, SimpleNamespace(engine=good))
        broken = healthz(upstream, SimpleNamespace(engine=bad))
    finally:
        good.dispose()
        bad.dispose()

    assert ok.status_code == 200 and ok.get_json()["store"]["status"] == "ok"
    assert broken.status_code == 503 and broken.get_json()["store"] == {"status": "error", "error": "OperationalError"}


def test_metrics_is_prometheus_text_with_the_forward_histogram_and_is_not_forwarded(upstream: FakeUpstream) -> None:
    container = make_container(upstream)
    client = create_app(container).test_client()
    client.get("/api/crons")

    response = client.get("/metrics")
    container.http.close()

    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = response.get_data(as_text=True)
    assert "bridge_forward_seconds_bucket" in text and "bridge_forward_seconds_count 1.0" in text
    assert [r.url.path for r in upstream.requests] == ["/api/crons"]
