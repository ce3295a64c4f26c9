"""`ql-bridge status` counts without walking the tables: a small store is counted; a large one is estimated
(PostgreSQL's planner statistics, a sample of Runs by row id on SQLite) and every estimate says so, while open
Runs and rare values are counted from their index."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, text

from bridge.domain.model import RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage import summary as summary_module
from bridge.storage.schema import run_events_table, runs_table
from bridge.storage.summary import Estimate, StoreSummary, estimate, summarize
from tests.conftest import Backend
from tests.contract.lifecycle import create, move, running

T0 = 1_796_216_400_000
_READS_RUNS = re.compile(r"\b(FROM|JOIN)\s+(runs|run_events)\b", re.IGNORECASE)


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's few dozen Runs stand for a large store: estimated, from a sample of 40 Runs on SQLite."""
    monkeypatch.setattr(summary_module, "COUNT_EVERY_ROW_UP_TO", 10)
    monkeypatch.setattr(summary_module, "SAMPLE_SIZE", 40)


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
    """Runs of every kind of write: shadow starts and ends (mostly succeeded, some failed, a few still running,
    a few manual), and RunService commands on Runs without an origin (created, cancelled, running)."""
    service = RunService(backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    recorder = ShadowRecorder(service)
    for pid in range(executions):
        origin = "manual" if pid % 20 == 0 else "scheduled_system"
        _execution(recorder, pid, origin, exit_code=None if pid % 30 == 0 else (pid % 6 == 0) * 2)
    create(service)
    move(service, create(service), RunStatus.CANCELLED)
    running(service)
    assert backend.engine is not None
    with backend.engine.connect() as conn:  # what autovacuum does on PostgreSQL once a table has grown
        conn.execute(text("ANALYZE"))
        conn.commit()


def _exact(engine: Engine) -> tuple[dict[str, int], dict[str, int], int]:
    r = runs_table
    with engine.connect() as conn:
        by_status = {s: int(n) for s, n in conn.execute(select(r.c.status, func.count()).group_by(r.c.status))}
        origin = func.coalesce(r.c.origin, "unknown")
        by_origin = {o: int(n) for o, n in conn.execute(select(origin, func.count()).group_by(origin))}
        events = int(conn.execute(select(func.count()).select_from(run_events_table)).scalar_one())
    return by_status, by_origin, events


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


@contextmanager
def _sqlite_statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement SQLite itself runs on the engine's connections, BEGIN included (the store opens its
    transactions on the driver's connection, below SQLAlchemy's cursor events)."""
    seen: list[str] = []
    traced: list[Any] = []

    def on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        dbapi_connection.set_trace_callback(seen.append)
        traced.append(dbapi_connection)

    event.listen(engine, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(engine, "checkout", on_checkout)
        for dbapi_connection in traced:
            dbapi_connection.set_trace_callback(None)


def _assert_exact_or_labelled(shown: int, exact: int) -> None:
    if isinstance(shown, Estimate):
        assert "estimate" in str(shown), shown
        assert abs(shown - exact) <= max(5, exact // 2), (shown, exact)
    else:
        assert shown == exact and str(shown) == str(exact), (shown, exact)


@pytest.mark.usefixtures("large")
def test_status_of_a_large_store_reads_runs_only_through_indexes_and_row_ids(sql_backend: Backend) -> None:
    """What it reads of runs and run_events: single rows by row id, the highest row id, and open or rare
    values from an index on their column; never a walk of either table or of a whole index."""
    assert sql_backend.engine is not None
    _write_history(sql_backend)

    with _statements(sql_backend.engine) as seen:
        summary = summarize(sql_backend.engine)

    assert summary.counted == "estimated", summary
    reading = [(sql, args) for sql, args in seen if _READS_RUNS.search(sql)]
    assert reading, seen
    for sql, args in reading:
        plan = sql_backend.query_plan(sql, args)
        assert "SCAN" not in plan and "Seq Scan" not in plan, (sql, plan)  # SQLite's and PostgreSQL's walks
        assert "SEARCH" in plan or "Index Cond" in plan, (sql, plan)


@pytest.mark.usefixtures("large")
def test_counts_of_a_large_store_are_exact_or_labelled_estimates(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    _write_history(sql_backend)

    summary = summarize(sql_backend.engine)

    by_status, by_origin, events = _exact(sql_backend.engine)
    assert set(summary.runs_by_status) <= set(by_status), summary
    for status, exact in by_status.items():
        _assert_exact_or_labelled(summary.runs_by_status.get(status, 0), exact)
    for origin, exact in by_origin.items():
        _assert_exact_or_labelled(summary.runs_by_origin.get(origin, 0), exact)
    _assert_exact_or_labelled(summary.events, events)
    assert any(isinstance(n, Estimate) for n in summary.runs_by_status.values()), summary
    for counted in ("running", "cancelled", "created"):  # open, or too rare to estimate: counted
        assert type(summary.runs_by_status[counted]) is int, summary


def test_counts_of_a_small_store_are_exact(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    _write_history(sql_backend, executions=20)

    summary = summarize(sql_backend.engine)

    assert (summary.runs_by_status, summary.runs_by_origin, summary.events) == _exact(sql_backend.engine)
    assert summary.counted == "counted", summary


@pytest.mark.parametrize("size", ["small", "large"])
def test_status_counts_in_a_read_only_transaction(sql_backend: Backend, monkeypatch: pytest.MonkeyPatch,
                                                 size: str) -> None:
    """Beside a serving bridge: the counting never takes (or waits for) the lock the bridge's writes need."""
    if not sql_backend.has_file_lock:
        pytest.skip("this store has no write lock for a whole file")
    if size == "large":
        monkeypatch.setattr(summary_module, "COUNT_EVERY_ROW_UP_TO", 10)
    assert sql_backend.engine is not None
    _write_history(sql_backend, executions=20)

    with _sqlite_statements(sql_backend.engine) as seen:
        summarize(sql_backend.engine)

    assert any(_READS_RUNS.search(sql) for sql in seen), seen
    opened_by = None
    for sql in seen:
        if sql.startswith("BEGIN"):
            opened_by = sql
        elif _READS_RUNS.search(sql):
            assert opened_by == "BEGIN", (opened_by, sql)  # SQLite's deferred BEGIN, not BEGIN IMMEDIATE


def test_a_summary_of_a_store_without_runs_shows_nothing(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    summary = summarize(sql_backend.engine)
    assert isinstance(summary, StoreSummary) and summary.runs_by_status == {} and summary.events == 0


@pytest.mark.parametrize(("value", "shown"), [(0.4, 0), (7.6, 8), (987.4, 987), (98_765.0, 98_800),
                                              (1_234_567.0, 1_230_000)])
def test_an_estimate_keeps_three_significant_digits_and_says_what_it_is(value: float, shown: int) -> None:
    counted = estimate(value)
    assert counted == shown and str(counted) == f"≈ {shown} (estimate)"
