"""`ql-bridge status` counts without counting rows: kept counts (SQLite), or estimates labelled as such
(PostgreSQL's planner), and open Runs read from their partial index; never a walk of runs or run_events."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, text

from bridge.domain.model import RunStatus
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import CallbackFacts, ExecutionContext, ShadowRecorder
from bridge.storage.schema import run_events_table, runs_table
from bridge.storage.summary import Estimate, StoreSummary, estimate, summarize
from tests.conftest import Backend
from tests.contract.lifecycle import create, move, running

T0 = 1_796_216_400_000
# The partial index of open Runs, or any index that starts with the column counted.
_COLUMN_INDEXES = ("ix_runs_active_by_cron", "ix_runs_status_", "ix_runs_origin_created")
_READS_RUNS = re.compile(r"\b(FROM|JOIN)\s+(runs|run_events)\b", re.IGNORECASE)


def _execution(recorder: ShadowRecorder, pid: int, origin: str, exit_code: int | None) -> None:
    context = ExecutionContext(origin=origin, evidence="test", task_revision="rev")
    start = CallbackFacts(cron_id=1 + pid % 3, pid=pid, log_ref=f"log-{pid}", started_at_ms=T0 + pid,
                          duration_ms=None, exit_code=None, received_at_ms=T0 + pid)
    recorder.record_start(start, context)
    if exit_code is not None:
        end = CallbackFacts(cron_id=start.cron_id, pid=pid, log_ref=start.log_ref, started_at_ms=start.started_at_ms,
                            duration_ms=1000, exit_code=exit_code, received_at_ms=T0 + pid + 1000)
        recorder.record_end(end, lambda: context)


def _write_history(backend: Backend, executions: int = 60) -> None:
    """Runs of every kind of write: shadow starts and ends (succeeded, failed, still running), RunService
    commands on Runs without an origin (created, cancelled, running)."""
    service = RunService(backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    recorder = ShadowRecorder(service)
    for pid in range(executions):
        origin = "manual" if pid % 10 == 0 else "scheduled_system"
        _execution(recorder, pid, origin, exit_code=None if pid % 15 == 0 else (pid % 4 == 0) * 2)
    create(service)
    move(service, create(service), RunStatus.CANCELLED)
    running(service)


def _exact(engine: Engine) -> tuple[dict[str, int], dict[str, int], int]:
    r = runs_table
    with engine.connect() as conn:
        by_status = {s: int(n) for s, n in conn.execute(select(r.c.status, func.count()).group_by(r.c.status))}
        origin = func.coalesce(r.c.origin, "unknown")
        by_origin = {o: int(n) for o, n in conn.execute(select(origin, func.count()).group_by(origin))}
        events = int(conn.execute(select(func.count()).select_from(run_events_table)).scalar_one())
    return by_status, by_origin, events


def _analyzed(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()


@contextmanager
def _statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


def _close_to(shown: int, exact: int) -> bool:
    return abs(shown - exact) <= max(3, exact // 4)


def _assert_exact_or_labelled(shown: int, exact: int) -> None:
    if isinstance(shown, Estimate):
        assert "estimate" in str(shown) and _close_to(shown, exact), (shown, exact)
    else:
        assert shown == exact and str(shown) == str(exact), (shown, exact)


def test_status_reads_no_run_rows_but_open_and_rare_ones_from_an_index(sql_backend: Backend) -> None:
    """What it reads of runs are the open Runs, and values the statistics call rare, each from an index on
    that column; it never walks runs or run_events."""
    assert sql_backend.engine is not None
    _write_history(sql_backend)
    _analyzed(sql_backend.engine)  # PostgreSQL answers from statistics once it has some, as autovacuum keeps them

    with _statements(sql_backend.engine) as seen:
        summary = summarize(sql_backend.engine)

    assert summary.counted in ("kept", "estimated"), summary
    reading_runs = [(sql, args) for sql, args in seen if _READS_RUNS.search(sql)]
    for sql, args in reading_runs:
        plan = sql_backend.query_plan(sql, args)
        assert any(index in plan for index in _COLUMN_INDEXES), plan
        assert "Seq Scan" not in plan and "SCAN runs" not in plan, plan  # a walk of the table or of an index
        assert "run_events" not in sql, sql


def test_counts_are_exact_or_labelled_estimates_after_every_kind_of_write(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    _write_history(sql_backend)
    _analyzed(sql_backend.engine)

    summary = summarize(sql_backend.engine)

    by_status, by_origin, events = _exact(sql_backend.engine)
    assert set(summary.runs_by_status) <= set(by_status), summary
    for status, exact in by_status.items():
        _assert_exact_or_labelled(summary.runs_by_status.get(status, 0), exact)
    for origin, exact in by_origin.items():
        _assert_exact_or_labelled(summary.runs_by_origin.get(origin, 0), exact)
    _assert_exact_or_labelled(summary.events, events)
    for open_status in ("running",):  # open Runs are always counted exactly
        assert type(summary.runs_by_status[open_status]) is int, summary


def test_counts_of_a_store_never_analyzed_are_exact(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    _write_history(sql_backend, executions=20)

    summary = summarize(sql_backend.engine)

    assert (summary.runs_by_status, summary.runs_by_origin, summary.events) == _exact(sql_backend.engine)
    assert summary.counted in ("kept", "counted"), summary


def test_kept_counts_follow_rows_written_and_deleted_outside_run_service(sql_backend: Backend) -> None:
    """Whatever writes a Run (the importer's bulk insert, a hand-run DELETE), the counts follow it."""
    assert sql_backend.engine is not None
    _write_history(sql_backend, executions=10)
    row = {"id": "run-by-hand", "project_id": "default", "task_id": "legacy-cron:9", "task_revision": "rev",
           "trigger_type": "legacy", "status": "failed", "version": 3, "event_sequence": 0, "origin": "boot",
           "created_at_ms": T0}
    with sql_backend.engine.begin() as conn:
        conn.execute(runs_table.insert(), [row, {**row, "id": "run-by-hand-2", "origin": None}])
        conn.execute(runs_table.update().where(runs_table.c.id == "run-by-hand").values(status="lost"))
        conn.execute(runs_table.delete().where(runs_table.c.id == "run-by-hand-2"))

    summary = summarize(sql_backend.engine)

    assert (summary.runs_by_status, summary.runs_by_origin, summary.events) == _exact(sql_backend.engine)


def test_a_summary_of_no_store_yet_shows_nothing(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    summary = summarize(sql_backend.engine)
    assert isinstance(summary, StoreSummary) and summary.runs_by_status == {} and summary.events == 0


@pytest.mark.parametrize(("value", "shown"), [(0.4, 0), (7.6, 8), (987.4, 987), (98_765.0, 98_800),
                                              (1_234_567.0, 1_230_000)])
def test_an_estimate_keeps_three_significant_digits_and_says_what_it_is(value: float, shown: int) -> None:
    counted = estimate(value)
    assert counted == shown and str(counted) == f"≈ {shown} (estimate)"
