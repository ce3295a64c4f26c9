"""The seam counts on both stores, and what readiness says with them."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from sqlalchemy import insert

from bridge.bootstrap import Store
from bridge.config import Settings
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.seam import OriginCoverage
from bridge.storage.schema import mismatches_table, runs_table
from bridge.storage.seam_queries import recent_coverage
from bridge.storage.unit_of_work import SqlUnitOfWork
from bridge.web import health
from tests.conftest import Backend

NOW_MS = int(time.time() * 1000)
HOUR_MS = 3_600_000


def _run(origin: str, created_ms: int, mode: str = "shadow") -> dict[str, object]:
    return {"id": str(uuid.uuid4()), "project_id": "default", "task_id": "legacy-cron:1", "task_revision": "r",
            "trigger_type": "legacy", "status": "succeeded", "version": 1, "event_sequence": 9,
            "created_at_ms": created_ms, "origin": origin, "mode": mode, "owner": "legacy"}


def _missing(origin: str, seen_ms: int, resolved: bool = False) -> dict[str, object]:
    return {"kind": "missing", "origin": origin, "legacy_cron_id": 1, "dedupe_key": f"missing:{uuid.uuid4()}",
            "first_seen_ms": seen_ms, "last_seen_ms": seen_ms, "diff": "{}",
            "resolved_at_ms": seen_ms if resolved else None}


def _seed(backend: Backend) -> None:
    assert backend.engine is not None
    with backend.engine.begin() as conn:
        conn.execute(insert(runs_table), [_run("scheduled_system", NOW_MS - HOUR_MS) for _ in range(5)]
                     + [_run("manual", NOW_MS - HOUR_MS)]
                     + [_run("manual", NOW_MS - 3 * 24 * HOUR_MS)]  # outside the window
                     + [_run("manual", NOW_MS - HOUR_MS, mode="legacy_import") for _ in range(4)])
        conn.execute(insert(mismatches_table), [_missing("manual", NOW_MS - HOUR_MS) for _ in range(4)]
                     + [_missing("manual", NOW_MS - HOUR_MS, resolved=True)]
                     + [_missing("scheduled_system", NOW_MS - 3 * 24 * HOUR_MS)])


def test_recent_coverage_counts_open_missing_findings_and_bridge_recorded_runs_per_origin(
        sql_backend: Backend) -> None:
    _seed(sql_backend)
    assert sql_backend.engine is not None

    coverage = recent_coverage(sql_backend.engine, NOW_MS - 24 * HOUR_MS)

    assert coverage == [OriginCoverage("manual", missing=4, recorded=1),
                        OriginCoverage("scheduled_system", missing=0, recorded=5)]


def test_readiness_detail_says_callbacks_are_bypassing_the_bridge_without_failing_readiness(
        sql_backend: Backend, tmp_path: Path) -> None:
    _seed(sql_backend)
    assert sql_backend.engine is not None
    uow = SqlUnitOfWork(sql_backend.engine)
    store = Store(engine=sql_backend.engine, uow=uow, runs=RunService(uow, clock=SystemClock()))
    settings = Settings.from_env({"BRIDGE_LEGACY_DATA_DIR": str(tmp_path)})
    health._seam_cache.clear()

    seam = health.check_seam(store, settings)

    assert seam["status"] == "warn" and seam["reason"] == "SEAM_BYPASSED"
    [finding] = seam["findings"]
    assert finding["origin"] == "manual" and "callbacks are bypassing the bridge" in finding["message"]
