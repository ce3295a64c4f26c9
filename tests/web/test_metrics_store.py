"""The store-backed gauges on both stores: what they count, that a scrape storm reads the store once, that a
store failure never fails a scrape, that labels stay bounded, and that each statement stays on an index."""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, insert, text

from bridge.bootstrap import build_container
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.metrics.store_gauges import StoreGauges
from bridge.storage.gauge_queries import (
    MISMATCH_KINDS,
    ROW_CAP,
    last_ok_pass_ms,
    open_mismatches,
    outbox_depth,
    read_gauges,
)
from bridge.storage.schema import mismatches_table, projection_outbox_table, reconcile_passes_table, runs_table
from tests.conftest import Backend
from tests.web.asgi_client import bridge_client
from tests.web.conftest import FakeUpstream, make_container

NOW_S = 1_800_000_000.0
NOW_MS = int(NOW_S * 1000)
HOUR_MS = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now = NOW_S

    def __call__(self) -> float:
        return self.now


def gauges(backend: Backend, clock: Clock | None = None, interval_s: int | None = 60) -> tuple[StoreGauges, Any]:
    assert backend.engine is not None
    collector = StoreGauges(partial(read_gauges, backend.engine), reconcile_interval_s=interval_s,
                            clock=clock or Clock())
    metrics = BridgeMetrics()
    metrics.registry.register(collector)
    return collector, metrics


def outbox_row(state: str, created_ms: int, due_ms: int | None = None) -> dict[str, object]:
    return {"legacy_cron_id": 1, "run_id": str(uuid.uuid4()), "event": "start", "created_at_ms": created_ms,
            "state": state, "attempts": 0, "next_attempt_at_ms": due_ms or created_ms}


def mismatch(kind: str, origin: str | None, resolved: bool = False,
             seen_ms: int = NOW_MS - HOUR_MS) -> dict[str, object]:
    return {"kind": kind, "origin": origin, "legacy_cron_id": 1, "dedupe_key": f"{kind}:{uuid.uuid4()}",
            "first_seen_ms": seen_ms, "last_seen_ms": seen_ms, "diff": "{}",
            "resolved_at_ms": seen_ms if resolved else None}


def run(origin: str, created_ms: int = NOW_MS - HOUR_MS) -> dict[str, object]:
    return {"id": str(uuid.uuid4()), "project_id": "default", "task_id": "legacy-cron:1", "task_revision": "r",
            "trigger_type": "legacy", "status": "succeeded", "version": 1, "event_sequence": 9,
            "created_at_ms": created_ms, "origin": origin, "mode": "shadow", "owner": "legacy"}


def seed(backend: Backend, table: Any, rows: list[dict[str, object]]) -> None:
    assert backend.engine is not None
    with backend.engine.begin() as conn:
        conn.execute(insert(table), rows)


def test_outbox_depth_oldest_age_and_parked_rows(sql_backend: Backend) -> None:
    seed(sql_backend, projection_outbox_table, [
        outbox_row("pending", NOW_MS - 90_000, due_ms=NOW_MS + 5_000),  # the oldest, in backoff
        outbox_row("pending", NOW_MS - 2_000), outbox_row("parked", NOW_MS - HOUR_MS),
        outbox_row("applied", NOW_MS - 3 * HOUR_MS)])
    _, metrics = gauges(sql_backend)

    assert metrics.value("ql_bridge_outbox_pending_rows") == 2
    assert metrics.value("ql_bridge_outbox_oldest_pending_age_seconds") == 90
    assert metrics.value("ql_bridge_outbox_parked_rows") == 1


def test_an_empty_outbox_reads_zero_and_an_age_of_zero(sql_backend: Backend) -> None:
    _, metrics = gauges(sql_backend)

    assert metrics.registry.get_sample_value("ql_bridge_outbox_pending_rows") == 0
    assert metrics.registry.get_sample_value("ql_bridge_outbox_oldest_pending_age_seconds") == 0


def test_open_mismatches_by_kind_and_origin_with_bounded_labels(sql_backend: Backend) -> None:
    seed(sql_backend, mismatches_table, [
        mismatch("missing", "manual"), mismatch("missing", "manual"), mismatch("missing", "manual", resolved=True),
        mismatch("terminal_status", "scheduled_system"), mismatch("compat.unmatched_callback", None),
        mismatch("exit_code", "cron-4711 rm -rf /tmp/x"),  # never a label value
        mismatch("some.future_kind", "manual")])  # not a known kind: not read
    _, metrics = gauges(sql_backend)

    found = {(s.labels["kind"], s.labels["origin"]): s.value for m in metrics.registry.collect()
             for s in m.samples if s.name == "ql_bridge_open_mismatches"}
    assert found == {("missing", "manual"): 2, ("terminal_status", "scheduled_system"): 1,
                     ("compat.unmatched_callback", "unknown"): 1, ("exit_code", "other"): 1}


def test_seconds_since_the_last_successful_reconcile_pass(sql_backend: Backend) -> None:
    seed(sql_backend, reconcile_passes_table, [
        {"started_at_ms": NOW_MS - 300_000, "finished_at_ms": NOW_MS - 290_000, "result": "ok"},
        {"started_at_ms": NOW_MS - 120_000, "finished_at_ms": NOW_MS - 110_000, "result": "failed"},
        {"started_at_ms": NOW_MS - 10_000, "finished_at_ms": None, "result": "running"}])
    _, metrics = gauges(sql_backend, interval_s=60)

    assert metrics.value("ql_bridge_reconcile_last_success_age_seconds") == 290
    assert metrics.value("ql_bridge_reconcile_interval_seconds") == 60


def test_no_successful_pass_reads_as_infinitely_old(sql_backend: Backend) -> None:
    seed(sql_backend, reconcile_passes_table, [{"started_at_ms": NOW_MS - 1000, "result": "failed"}])
    _, metrics = gauges(sql_backend)

    assert math.isinf(metrics.value("ql_bridge_reconcile_last_success_age_seconds"))


def test_shadow_coverage_is_recorded_over_executions_2x_ran_per_origin(sql_backend: Backend) -> None:
    now_ms = int(time.time() * 1000)  # the seam window is read against the wall clock's day
    seed(sql_backend, runs_table, [run("manual", now_ms - HOUR_MS)]
         + [run("scheduled_system", now_ms - HOUR_MS) for _ in range(4)])
    seed(sql_backend, mismatches_table, [mismatch("missing", "manual", seen_ms=now_ms - HOUR_MS) for _ in range(3)])
    metrics = _with_wall_clock(sql_backend)

    assert metrics.value("ql_bridge_shadow_coverage_ratio", origin="manual") == 0.25
    assert metrics.value("ql_bridge_shadow_coverage_executions", origin="manual") == 4
    assert metrics.value("ql_bridge_shadow_coverage_ratio", origin="scheduled_system") == 1.0


def _with_wall_clock(backend: Backend) -> BridgeMetrics:
    assert backend.engine is not None
    metrics = BridgeMetrics()
    metrics.registry.register(StoreGauges(partial(read_gauges, backend.engine), reconcile_interval_s=60))
    return metrics


def test_without_a_2x_to_reconcile_with_there_are_no_reconcile_or_coverage_gauges(sql_backend: Backend) -> None:
    _, metrics = gauges(sql_backend, interval_s=None)
    names = {m.name for m in metrics.registry.collect()}

    assert "ql_bridge_outbox_pending_rows" in names
    assert not names & {"ql_bridge_reconcile_last_success_age_seconds", "ql_bridge_shadow_coverage_ratio"}


# -- cost -------------------------------------------------------------------------------------------------

def count_statements(engine: Engine) -> list[str]:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


def test_a_scrape_storm_reads_the_store_once_per_ttl(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    clock = Clock()
    collector, metrics = gauges(sql_backend, clock)
    statements = count_statements(sql_backend.engine)

    for _ in range(50):
        list(metrics.registry.collect())
    first = len([s for s in statements if not s.startswith("BEGIN")])
    clock.now += 11
    list(metrics.registry.collect())

    assert first == 6  # outbox (two statements), mismatches, last pass, coverage (two)
    assert len([s for s in statements if not s.startswith("BEGIN")]) > first


def test_registering_the_collector_reads_nothing(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    statements = count_statements(sql_backend.engine)

    gauges(sql_backend)

    assert statements == []


@pytest.mark.parametrize("statement", ["outbox", "mismatches", "last_ok"])
def test_each_gauge_statement_stays_on_an_index(sql_backend: Backend, statement: str) -> None:
    # A store in use: applied outbox rows and resolved mismatches of every kind (kept forever) dominate.
    seed(sql_backend, projection_outbox_table, [outbox_row("applied", NOW_MS - i) for i in range(1, 400)])
    seed(sql_backend, mismatches_table, [mismatch(MISMATCH_KINDS[i % len(MISMATCH_KINDS)], "manual", resolved=True,
                                                  seen_ms=NOW_MS - i) for i in range(400)])
    seed(sql_backend, reconcile_passes_table, [{"started_at_ms": NOW_MS - i, "finished_at_ms": NOW_MS - i,
                                                "result": "ok"} for i in range(50)])
    assert sql_backend.engine is not None
    query = {"outbox": outbox_depth, "mismatches": open_mismatches, "last_ok": last_ok_pass_ms}[statement]

    for sql, params in _captured_statements(sql_backend.engine, query):
        plan = sql_backend.query_plan(sql, params)
        assert not re.search(r"SCAN (projection_outbox|mismatches)\b|Seq Scan", plan), plan
        assert "TEMP B-TREE FOR ORDER BY" not in plan and "Sort Key: reconcile_passes" not in plan, plan


def _captured_statements(engine: Engine, query: Any) -> list[tuple[str, Any]]:
    captured: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        if not sql.startswith("BEGIN"):
            captured.append((sql, params))

    event.listen(engine, "before_cursor_execute", keep)
    with engine.connect() as conn, conn.begin():
        query(conn)
    event.remove(engine, "before_cursor_execute", keep)
    return captured


def test_counts_stop_at_the_cap(sql_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bridge.storage.gauge_queries.ROW_CAP", 3)
    seed(sql_backend, projection_outbox_table, [outbox_row("pending", NOW_MS - 1000) for _ in range(5)])
    seed(sql_backend, mismatches_table, [mismatch("missing", "manual") for _ in range(5)])
    _, metrics = gauges(sql_backend)

    assert metrics.value("ql_bridge_outbox_pending_rows") == 3
    assert metrics.value("ql_bridge_open_mismatches", kind="missing", origin="manual") == 3
    assert ROW_CAP == 10_000


# -- failure ----------------------------------------------------------------------------------------------

def test_a_store_that_cannot_be_read_never_fails_the_scrape(tmp_path: Path, upstream: FakeUpstream) -> None:
    broken = create_engine(f"sqlite:///{tmp_path}/no-such-dir/bridge.sqlite")
    container = make_container(upstream)
    container.metrics.registry.register(StoreGauges(partial(read_gauges, broken), reconcile_interval_s=60))

    response = bridge_client(container).get("/metrics")
    container.http.close()

    body = response.get_data(as_text=True)
    assert response.status_code == 200
    assert "ql_bridge_store_scrape_success 0.0" in body
    for query in ("outbox", "mismatches", "reconcile", "coverage"):
        assert f'ql_bridge_store_scrape_errors_total{{query="{query}"}} 1.0' in body
    assert "\nql_bridge_outbox_pending_rows " not in body  # left out, never a made-up 0
    assert "ql_bridge_forward_seconds_count" in body


def test_a_failing_statement_leaves_out_only_its_own_gauges(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    with sql_backend.engine.begin() as conn:
        conn.execute(text("DROP TABLE reconcile_passes"))
    _, metrics = gauges(sql_backend)

    assert metrics.registry.get_sample_value("ql_bridge_store_scrape_success") == 0
    assert metrics.value("ql_bridge_store_scrape_errors_total", query="reconcile") == 1
    assert metrics.value("ql_bridge_store_scrape_errors_total", query="outbox") == 0
    assert metrics.registry.get_sample_value("ql_bridge_outbox_pending_rows") == 0
    assert metrics.registry.get_sample_value("ql_bridge_reconcile_last_success_age_seconds") is None


def test_coverage_reads_while_another_writer_holds_the_sqlite_write_lock(sqlite_backend: Backend) -> None:
    # A scrape must not queue behind the callback path's writes: every gauge read is a plain read.
    assert sqlite_backend.engine is not None
    seed(sqlite_backend, runs_table, [run("manual", int(time.time() * 1000) - HOUR_MS)])
    writer = sqlite_backend.engine.connect()
    writer.begin()  # BEGIN IMMEDIATE: the write lock, as a callback's write holds it
    try:
        metrics = _with_wall_clock(sqlite_backend)
        assert metrics.registry.get_sample_value("ql_bridge_store_scrape_success") == 1
        assert metrics.value("ql_bridge_shadow_coverage_ratio", origin="manual") == 1.0
    finally:
        writer.rollback()
        writer.close()


# -- wiring -----------------------------------------------------------------------------------------------

@pytest.fixture
def served(tmp_path: Path) -> Iterator[Settings]:
    yield Settings.from_env({"BRIDGE_DATA_DIR": str(tmp_path)})


def test_bootstrap_registers_the_store_gauges_on_the_apps_registry(served: Settings) -> None:
    from bridge.storage.migrate import upgrade

    container = build_container(served)
    try:
        assert container.store is not None
        upgrade(container.store.engine)
        body = bridge_client(container).get("/metrics").get_data(as_text=True)
    finally:
        container.close()

    assert "ql_bridge_outbox_pending_rows 0.0" in body and "ql_bridge_store_scrape_success 1.0" in body
    assert "ql_bridge_reconcile_last_success_age_seconds" not in body  # no 2.x data directory configured

