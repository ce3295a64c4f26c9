"""The bridge's own endpoints, never forwarded (2.x has none of them): liveness, readiness and metrics.

- `GET /livez`, liveness: 200 `{"status": "ok"}` whenever this process can answer a request. It reads
  nothing and calls nothing, so a down 2.x or a failing store never makes a container restart a bridge
  that restarting would not fix.
- `GET /readyz` (and `GET /healthz`, the same answer, kept for existing probes), readiness: named checks,
  each `{"status": "ok" | "error" | "warn" | "disabled", "reason": <stable code>, ...detail}`. 200 with
  `"status": "ok"`, or 503 with `"status": "degraded"` when `store` or `upstream` is "error":
  - `store`: is the bridge's store writable? Judged on the real writes of the last `WRITE_WINDOW_S`
    seconds (the unit of work's `WriteOutcomes`): STORE_WRITES_OK, or STORE_WRITES_FAILING (with the
    latest error code). With no write in that window, a probe: STORE_PROBE_OK or STORE_PROBE_FAILED. The
    probe opens and commits an empty write transaction: the store is reachable and would let this process
    write, but it cannot see a full disk, which only real writes show. STORE_DISABLED without a store.
  - `upstream`: 2.x's backend within `UPSTREAM_TIMEOUT_S`, with the request its release serves (`path`):
    `/api/health` from v2.19, `/api/system` before, where `/api/health` is not the backend's
    (legacy_adapters.install.backend_probe): UPSTREAM_OK, UPSTREAM_UNHEALTHY (it answered, not 200),
    UPSTREAM_UNREACHABLE (no answer: refused, timed out, reset).
  - `flags`: the origin flags in force. FLAGS_OK; FLAGS_REFRESH_FAILING (a warning: the store could not be
    read lately and the last flags read stay in force); FLAGS_STALE ("error") once they are older than
    `BRIDGE_FLAGS_MAX_STALE_S` and still cannot be re-read (they stay in force: an unreadable store never
    changes an origin's mode); FLAGS_DISABLED without a store.
  - `reconciler` (informational, never "error": a stalled reconciler does not stop the bridge serving):
    RECONCILER_OK, RECONCILER_PASS_RUNNING, RECONCILER_LAST_PASS_FAILED, RECONCILER_STALE (no pass
    started for `STALE_INTERVALS` intervals), RECONCILER_NEVER_RAN, RECONCILER_UNREADABLE,
    RECONCILER_DISABLED (no store, or no 2.x data directory to compare with).
  - `seam` (informational): SEAM_OK, or SEAM_BYPASSED with one finding per origin whose recent 2.x
    executions mostly never reached the bridge ("callbacks are bypassing the bridge", projections/seam.py);
    SEAM_UNKNOWN when it cannot be read, SEAM_DISABLED as for the reconciler. Read at most every
    `SEAM_TTL_S` seconds.
  - `legacy_release` (informational): which 2.x release the bridge fronts, as bootstrap decided it once
    (`name`, e.g. v2.19.2, and the `evidence` that named it): LEGACY_RELEASE_KNOWN, LEGACY_RELEASE_PATCH_UNKNOWN
    (a warning: only the line is known, e.g. from the schema; set BRIDGE_LEGACY_RELEASE), LEGACY_RELEASE_DISABLED
    without a 2.x data directory.

The outcomes are this process's own writes (`bridge serve` is one process); another process writing to
the same store (`bridge import-legacy`, a second replica) is judged by its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
from flask import Blueprint, Response, current_app, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.web import current_container

if TYPE_CHECKING:
    from bridge.bootstrap import Store
    from bridge.config import Settings
    from bridge.service.flags import CachedModes
    from legacy_adapters.releases import ReleaseProfile

UPSTREAM_HEALTH_PATH = "/api/health"  # what 2.x's Docker HEALTHCHECK polls (the backend's from v2.19)
UPSTREAM_TIMEOUT_S = 2.0
WRITE_WINDOW_S = 60.0  # writes older than this say nothing about the store any more
STALE_INTERVALS = 3
GATES = ("store", "upstream", "flags")  # the checks that make the bridge unready
READINESS = "bridge.readiness"  # the app extension holding a serving bridge's ReadinessWatch

health = Blueprint("health", __name__)


@health.get("/livez")
def livez() -> Response:
    """Liveness: the process answers."""
    return _no_store(jsonify(status="ok"))


@health.get("/readyz")
@health.get("/healthz")
def readyz() -> tuple[Response, int]:
    """Readiness: the store takes writes and 2.x answers; the detail of every check. Served by a bridge, the
    checks that wait on the store or on 2.x come from its ReadinessWatch, so this answers at once."""
    container = current_container()
    watch = current_app.extensions.get(READINESS)  # a bridge.web.readiness.ReadinessWatch
    if watch is not None:
        checks = watch.checks()
    else:  # an app without a watch (tests, tools) checks on the request
        checks = {"store": check_store(container.store),
                  "upstream": check_upstream(container.http, container.settings.legacy_url, container.release),
                  "reconciler": check_reconciler(container.store, container.settings),
                  "seam": check_seam(container.store, container.settings)}
    checks["flags"] = check_flags(container.modes)
    checks["legacy_release"] = check_release(container.release)
    ready = all(checks[name]["status"] != "error" for name in GATES)
    return _no_store(jsonify(status="ok" if ready else "degraded", **checks)), 200 if ready else 503


@health.get("/metrics")
def metrics() -> Response:
    """Prometheus text of this one process (`ql_bridge_info`'s help says what that means for counters);
    the store gauges are read at most every few seconds and a store that fails leaves them out, never the page."""
    registry = current_container().metrics.registry
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def check_store(store: Store | None, window_s: float = WRITE_WINDOW_S) -> dict[str, Any]:
    """Writable by the recent real writes; by a write probe when there were none."""
    if store is None:
        return {"status": "disabled", "reason": "STORE_DISABLED"}
    writes = store.writes.summary(window_s)
    if writes.writable is None:
        return _probe_store(store)
    detail = {"successes": writes.successes, "failures": writes.failures, "window_s": window_s,
              "last_write_age_s": writes.last_age_s}
    if writes.writable:
        return {"status": "ok", "reason": "STORE_WRITES_OK", **detail}
    return {"status": "error", "reason": "STORE_WRITES_FAILING", "error": writes.last_error, **detail}


def check_store_now(store: Store | None, window_s: float = WRITE_WINDOW_S) -> dict[str, Any]:
    """``check_store``, after one round trip that shows the store answers now: recent writes that succeeded
    say nothing about a store that has gone silent since."""
    if store is None:
        return check_store(store, window_s)
    try:
        store.uow.probe_read()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"; the code is enough to act on
        judged = check_store(store, window_s)
        if judged["status"] == "error":
            return judged  # the write check says what is wrong, in its own words
        return {"status": "error", "reason": "STORE_UNREACHABLE", "error": getattr(exc, "code", type(exc).__name__)}
    return check_store(store, window_s)


def _probe_store(store: Store) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        store.uow.probe_write()
    except Exception as exc:  # noqa: BLE001 - any failure means "not writable"; the code is enough to act on
        return {"status": "error", "reason": "STORE_PROBE_FAILED", "error": getattr(exc, "code", type(exc).__name__)}
    return {"status": "ok", "reason": "STORE_PROBE_OK", "latency_ms": _ms_since(started)}


def check_flags(modes: CachedModes | None) -> dict[str, Any]:
    """The flags in force: read lately, kept through failed refreshes, or kept past their staleness bound."""
    if modes is None:
        return {"status": "disabled", "reason": "FLAGS_DISABLED"}
    cache = modes.cache
    cache.get()  # a refresh when the last is over a second old, so an idle bridge reports the store as it is now
    age = cache.age_s()
    detail = {"age_s": None if age is None else round(age, 3), "max_stale_s": cache.max_stale_s}
    if cache.stale:
        return {"status": "error", "reason": "FLAGS_STALE", **detail}
    if cache.failing:
        return {"status": "warn", "reason": "FLAGS_REFRESH_FAILING", **detail}
    return {"status": "ok", "reason": "FLAGS_OK", **detail}


def check_reconciler(store: Store | None, settings: Settings) -> dict[str, Any]:
    """The last reconcile pass: when, how it ended, why it stopped; stale when none started lately."""
    if store is None or settings.legacy_database_path is None:
        return {"status": "disabled", "reason": "RECONCILER_DISABLED"}
    try:
        last = store.readers.last_pass()
    except Exception as exc:  # noqa: BLE001 - reported, never raised: health must answer
        return {"status": "warn", "reason": "RECONCILER_UNREADABLE", "error": type(exc).__name__}
    if last is None:
        return {"status": "warn", "reason": "RECONCILER_NEVER_RAN"}
    age_s = (time.time() * 1000 - last["started_at_ms"]) / 1000
    if age_s > STALE_INTERVALS * settings.reconcile_interval_s:
        status, reason = "warn", "RECONCILER_STALE"
    else:
        status, reason = _PASS_RESULTS.get(last["result"], ("warn", "RECONCILER_LAST_PASS_FAILED"))
    return {"status": status, "reason": reason, "last_started_at_ms": last["started_at_ms"],
            "last_result": last["result"], "last_reason": last["reason"]}


_PASS_RESULTS = {"ok": ("ok", "RECONCILER_OK"), "running": ("ok", "RECONCILER_PASS_RUNNING")}
SEAM_TTL_S = 30.0
_seam_cache: dict[int, tuple[float, dict[str, Any]]] = {}


def check_seam(store: Store | None, settings: Settings, now_s: float | None = None) -> dict[str, Any]:
    """Whether recent executions reach the bridge at all, from the reconciler's `missing` findings."""
    if store is None or settings.legacy_database_path is None:
        return {"status": "disabled", "reason": "SEAM_DISABLED"}
    now_s = time.time() if now_s is None else now_s
    cached = _seam_cache.get(id(store.engine))
    if cached is not None and now_s - cached[0] < SEAM_TTL_S:
        return cached[1]
    from projections.seam import SEAM_WINDOW_MS, bypass_findings

    try:
        findings = bypass_findings(store.readers.coverage(int(now_s * 1000) - SEAM_WINDOW_MS))
    except Exception as exc:  # noqa: BLE001 - reported, never raised: health must answer
        return {"status": "warn", "reason": "SEAM_UNKNOWN", "error": type(exc).__name__}
    result: dict[str, Any] = ({"status": "warn", "reason": "SEAM_BYPASSED", "findings": [f.as_dict() for f in findings]}
                              if findings else {"status": "ok", "reason": "SEAM_OK"})
    _seam_cache[id(store.engine)] = (now_s, result)
    return result


def check_upstream(http: httpx.Client, legacy_url: str, release: ReleaseProfile | None = None) -> dict[str, Any]:
    """GET the request ``release``'s backend serves (/api/health; /api/system before v2.19) within a short
    timeout: a hung backend must not hang the probe."""
    from legacy_adapters.install import backend_probe

    path = backend_probe(release).path
    started = time.perf_counter()
    try:
        response = http.get(legacy_url + path, timeout=UPSTREAM_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return {"status": "error", "reason": "UPSTREAM_UNREACHABLE", "error": type(exc).__name__, "path": path}
    ok = response.status_code == 200
    return {"status": "ok" if ok else "error", "reason": "UPSTREAM_OK" if ok else "UPSTREAM_UNHEALTHY",
            "http_status": response.status_code, "latency_ms": _ms_since(started), "path": path}


def check_release(release: ReleaseProfile | None) -> dict[str, Any]:
    """The 2.x release bootstrap decided (informational): its name and the evidence that named it."""
    if release is None:
        return {"status": "disabled", "reason": "LEGACY_RELEASE_DISABLED"}
    known = release.patch is not None
    return {"status": "ok" if known else "warn",
            "reason": "LEGACY_RELEASE_KNOWN" if known else "LEGACY_RELEASE_PATCH_UNKNOWN",
            "name": release.name, "evidence": release.evidence}


def _no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    return response


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
