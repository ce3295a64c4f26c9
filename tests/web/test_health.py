"""/livez, /readyz (and /healthz) and /metrics: the bridge's own endpoints, answered and never forwarded."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from werkzeug.test import TestResponse

from bridge.bootstrap import Container, Store
from bridge.domain.errors import StoreUnavailableError
from bridge.storage.engine import make_engine
from bridge.storage.reconcile_queries import SqlReconcileStore
from tests.conftest import Backend
from tests.contract.lifecycle import create
from tests.full_disk import FullDisk
from tests.support.wiring import store_on
from tests.web.asgi_client import bridge_client
from tests.web.conftest import FakeUpstream, make_container


def get(container: Container, path: str) -> TestResponse:
    try:
        return bridge_client(container).get(path)
    finally:
        container.http.close()


def healthz(upstream: FakeUpstream, store: Store | None = None, path: str = "/healthz") -> TestResponse:
    return get(make_container(upstream, store=store), path)


@pytest.fixture
def store(sqlite_backend: Backend) -> Store:
    assert sqlite_backend.engine is not None
    return store_on(sqlite_backend.engine)


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


# -- liveness --------------------------------------------------------------------------------------------

def test_livez_is_200_and_calls_neither_2x_nor_the_store_even_when_both_are_down(
        upstream: FakeUpstream, store: Store) -> None:
    upstream.reply = unreachable
    FullDisk(store.engine)
    with pytest.raises(StoreUnavailableError):
        create(store.runs)

    response = healthz(upstream, store, "/livez")

    assert response.status_code == 200 and response.get_json() == {"status": "ok"}
    assert response.headers["Cache-Control"] == "no-store"
    assert upstream.requests == []  # not forwarded, and 2.x's health was not asked either


# -- readiness: the store ----------------------------------------------------------------------------------

def test_readiness_is_503_naming_the_store_while_a_full_disk_fails_every_write_though_select_1_answers(
        upstream: FakeUpstream, store: Store) -> None:
    FullDisk(store.engine)
    for _ in range(2):
        with pytest.raises(StoreUnavailableError):
            create(store.runs)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1  # what /healthz used to ask, and called "ok"
    store.uow.probe_write()  # an empty write transaction passes too: only real writes show a full disk

    for path in ("/readyz", "/healthz"):
        response = healthz(upstream, store, path)
        assert response.status_code == 503, path
        body = response.get_json()
        assert body["status"] == "degraded"
        assert body["store"] == {"status": "error", "reason": "STORE_WRITES_FAILING", "error": "STORE_UNAVAILABLE",
                                 "successes": 0, "failures": 2, "window_s": 60.0,
                                 "last_write_age_s": body["store"]["last_write_age_s"]}
        assert body["upstream"]["status"] == "ok"
    assert healthz(upstream, store, "/livez").status_code == 200


def test_readiness_is_ok_again_once_writes_commit_again(upstream: FakeUpstream, store: Store) -> None:
    disk = FullDisk(store.engine)
    with pytest.raises(StoreUnavailableError):
        create(store.runs)
    assert healthz(upstream, store, "/readyz").status_code == 503

    disk.on = False
    create(store.runs)

    response = healthz(upstream, store, "/readyz")
    assert response.status_code == 200
    assert response.get_json()["store"]["reason"] == "STORE_WRITES_OK"
    assert (response.get_json()["store"]["successes"], response.get_json()["store"]["failures"]) == (1, 1)


def test_readiness_probes_the_store_when_nothing_was_written_lately(
        upstream: FakeUpstream, store: Store, tmp_path: Path) -> None:
    broken = store_on(make_engine(f"sqlite:///{tmp_path / 'missing' / 'dir' / 'bridge.sqlite'}"))
    try:
        ok = healthz(upstream, store, "/readyz")
        failed = healthz(upstream, broken, "/readyz")
    finally:
        broken.close()

    assert ok.status_code == 200
    assert ok.get_json()["store"]["status"] == "ok" and ok.get_json()["store"]["reason"] == "STORE_PROBE_OK"
    assert failed.status_code == 503
    assert failed.get_json()["store"] == {"status": "error", "reason": "STORE_PROBE_FAILED",
                                          "error": "STORE_UNAVAILABLE"}


def test_readiness_is_ok_without_a_store_when_2x_answers_its_health_check(upstream: FakeUpstream) -> None:
    response = healthz(upstream, path="/readyz")

    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "ok" and body["store"] == {"status": "disabled", "reason": "STORE_DISABLED"}
    assert body["upstream"]["status"] == "ok" and body["upstream"]["reason"] == "UPSTREAM_OK"
    assert body["upstream"]["http_status"] == 200
    assert [(r.method, r.url.path) for r in upstream.requests] == [("GET", "/api/health")]
    assert upstream.last.extensions["timeout"]["read"] == 2.0


# -- readiness: 2.x ---------------------------------------------------------------------------------------

def test_readiness_is_503_naming_2x_when_it_is_unreachable_while_liveness_stays_200(
        upstream: FakeUpstream, store: Store) -> None:
    upstream.reply = unreachable
    create(store.runs)

    ready = healthz(upstream, store, "/readyz")
    live = healthz(upstream, store, "/livez")

    assert ready.status_code == 503
    body = ready.get_json()
    assert body["status"] == "degraded"
    assert body["upstream"] == {"status": "error", "reason": "UPSTREAM_UNREACHABLE", "error": "ConnectError",
                                "path": "/api/health"}
    assert body["store"]["reason"] == "STORE_WRITES_OK"
    assert live.status_code == 200 and live.get_json() == {"status": "ok"}


def test_healthz_is_503_when_2x_answers_its_health_check_with_an_error(upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(500, content=b"{}")

    response = healthz(upstream)

    assert response.status_code == 503
    assert response.get_json()["upstream"]["http_status"] == 500
    assert response.get_json()["upstream"]["reason"] == "UPSTREAM_UNHEALTHY"


# -- readiness: the reconciler (informational) ------------------------------------------------------------

@pytest.fixture
def reconciling(upstream: FakeUpstream, store: Store, tmp_path: Path) -> Iterator[Container]:
    bare = make_container(upstream, store=store)
    # A 2.x data directory is what makes `bridge serve` schedule the reconciler.
    container = dataclasses.replace(bare, settings=dataclasses.replace(bare.settings,
                                                                       legacy_data_dir=tmp_path / "ql-data"))
    yield container
    container.http.close()


def test_a_stale_reconciler_is_a_warning_that_leaves_the_bridge_ready(reconciling: Container, store: Store) -> None:
    passes = SqlReconcileStore(store.engine)
    long_ago_ms = int(time.time() * 1000) - 4 * reconciling.settings.reconcile_interval_s * 1000
    passes.close_pass(passes.open_pass(long_ago_ms), long_ago_ms + 10, "ok", None, {})

    response = get(reconciling, "/readyz")

    assert response.status_code == 200
    assert response.get_json()["reconciler"] == {"status": "warn", "reason": "RECONCILER_STALE",
                                                 "last_started_at_ms": long_ago_ms, "last_result": "ok",
                                                 "last_reason": None}


def test_a_recent_failed_reconcile_pass_is_named_with_its_reason(reconciling: Container, store: Store) -> None:
    passes = SqlReconcileStore(store.engine)
    now_ms = int(time.time() * 1000)
    passes.close_pass(passes.open_pass(now_ms), now_ms + 10, "failed", "LEGACY_DATABASE", {})

    reconciler = get(reconciling, "/readyz").get_json()["reconciler"]

    assert (reconciler["status"], reconciler["reason"]) == ("warn", "RECONCILER_LAST_PASS_FAILED")
    assert reconciler["last_reason"] == "LEGACY_DATABASE"


def test_the_reconciler_is_disabled_without_a_2x_data_directory(upstream: FakeUpstream, store: Store) -> None:
    reconciler = healthz(upstream, store, "/readyz").get_json()["reconciler"]

    assert reconciler == {"status": "disabled", "reason": "RECONCILER_DISABLED"}


# -- metrics ----------------------------------------------------------------------------------------------

def test_metrics_is_prometheus_text_with_the_forward_histogram_and_is_not_forwarded(upstream: FakeUpstream) -> None:
    container = make_container(upstream)
    client = bridge_client(container)
    client.get("/api/crons")

    response = client.get("/metrics")
    container.http.close()

    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = response.get_data(as_text=True)
    assert "ql_bridge_forward_seconds_bucket" in text and "ql_bridge_forward_seconds_count 1.0" in text
    assert [r.url.path for r in upstream.requests] == ["/api/crons"]
