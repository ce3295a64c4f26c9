"""The bridge's own endpoints, never forwarded (2.x has neither): GET /healthz and GET /metrics."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from bridge.web import current_container

if TYPE_CHECKING:
    from bridge.bootstrap import Store

UPSTREAM_HEALTH_PATH = "/api/health"  # what 2.x's Docker HEALTHCHECK polls
UPSTREAM_TIMEOUT_S = 2.0

health = Blueprint("health", __name__)


@health.get("/healthz")
def healthz() -> tuple[Response, int]:
    container = current_container()
    store = check_store(container.store)
    upstream = check_upstream(container.http, container.settings.legacy_url)
    reconciler = check_reconciler(container.store, container.settings.reconcile_interval_s)
    ok = store["status"] in ("ok", "disabled") and upstream["status"] == "ok"
    response = jsonify(status="ok" if ok else "degraded", store=store, upstream=upstream, reconciler=reconciler)
    response.headers["Cache-Control"] = "no-store"
    return response, 200 if ok else 503


@health.get("/metrics")
def metrics() -> Response:
    registry = current_container().metrics.registry
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def check_store(store: Store | None) -> dict[str, Any]:
    """A trivial query through the store's engine; "disabled" for a pure pass-through without a store."""
    if store is None:
        return {"status": "disabled"}
    started = time.perf_counter()
    try:
        with store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure means "not healthy"; the type is enough to act on
        return {"status": "error", "error": type(exc).__name__}  # a driver message can carry the DSN
    return {"status": "ok", "latency_ms": _ms_since(started)}


def check_reconciler(store: Store | None, interval_s: int) -> dict[str, Any]:
    """The last reconcile pass: when, how it ended, why it stopped; "stale" when none ran for 3 intervals.

    Informational: a failing reconciler does not make the pass-through unhealthy.
    """
    if store is None:
        return {"status": "disabled"}
    from bridge.storage.reconcile_queries import ReconcileStore

    try:
        last = ReconcileStore(store.engine).last_pass()
    except Exception as exc:  # noqa: BLE001 - reported, never raised: health must answer
        return {"status": "error", "error": type(exc).__name__}
    if last is None:
        return {"status": "never_run"}
    age_s = (time.time() * 1000 - last["started_at_ms"]) / 1000
    state = last["result"] if age_s <= 3 * interval_s else "stale"
    return {"status": state, "last_started_at_ms": last["started_at_ms"], "last_result": last["result"],
            "reason": last["reason"]}


def check_upstream(http: httpx.Client, legacy_url: str) -> dict[str, Any]:
    """GET 2.x's /api/health within a short timeout: a hung backend must not hang the probe."""
    started = time.perf_counter()
    try:
        response = http.get(legacy_url + UPSTREAM_HEALTH_PATH, timeout=UPSTREAM_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return {"status": "error", "error": type(exc).__name__}
    ok = response.status_code == 200
    return {"status": "ok" if ok else "error", "http_status": response.status_code, "latency_ms": _ms_since(started)}


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
