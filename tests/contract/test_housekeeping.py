"""Housekeeping prunes the store's bookkeeping rows past their retention, in bounded batches, on both stores."""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine, insert, select

from bridge.bootstrap import bookkeeping_prunes
from bridge.jobs.housekeeping import prune_bookkeeping, run_housekeeping
from bridge.jobs.schedule import start_reconcile_schedule
from bridge.storage.engine import make_engine
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import projection_outbox_table, reconcile_passes_table, reconcile_seen_table
from tests.conftest import Backend

NOW_MS = 1_796_216_497_123
DAY_MS = 86_400_000
RETENTION_MS = 7 * DAY_MS
OLD_MS = NOW_MS - 8 * DAY_MS
RECENT_MS = NOW_MS - DAY_MS


def _outbox_row(engine: Engine, state: str, at_ms: int) -> int:
    with engine.begin() as conn:
        result = conn.execute(insert(projection_outbox_table).values(
            legacy_cron_id=1, run_id="run", event="end", created_at_ms=at_ms, state=state, attempts=0,
            next_attempt_at_ms=at_ms, applied_at_ms=at_ms + 5 if state == "applied" else None))
        return int(result.inserted_primary_key[0])


def _pass(engine: Engine, started_ms: int, result: str = "ok", seen: tuple[str, ...] = ()) -> int:
    with engine.begin() as conn:
        pass_id = int(conn.execute(insert(reconcile_passes_table).values(
            started_at_ms=started_ms, result=result)).inserted_primary_key[0])
        for run_id in seen:
            conn.execute(insert(reconcile_seen_table).values(pass_id=pass_id, run_id=run_id))
        return pass_id


def _ids(engine: Engine, table: Any) -> set[int]:
    with engine.connect() as conn:
        return {row[0] for row in conn.execute(select(table.c.id))}


def test_only_applied_outbox_rows_past_retention_are_deleted(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    old_applied = {_outbox_row(engine, "applied", OLD_MS - i) for i in range(3)}
    kept = {_outbox_row(engine, "applied", RECENT_MS), _outbox_row(engine, "pending", OLD_MS),
            _outbox_row(engine, "parked", OLD_MS)}

    removed = prune_bookkeeping(bookkeeping_prunes(engine), NOW_MS, retention_ms=RETENTION_MS, batch=2)

    assert removed["projection_outbox"] == len(old_applied)  # two batches: 2, then 1
    assert _ids(engine, projection_outbox_table) == kept


def test_each_run_deletes_at_most_its_batches(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    for i in range(5):
        _outbox_row(engine, "applied", OLD_MS - i)

    first = prune_bookkeeping(bookkeeping_prunes(engine), NOW_MS, retention_ms=RETENTION_MS, batch=2, max_batches=2)
    second = prune_bookkeeping(bookkeeping_prunes(engine), NOW_MS, retention_ms=RETENTION_MS, batch=2, max_batches=2)

    assert (first["projection_outbox"], second["projection_outbox"]) == (4, 1)
    assert _ids(engine, projection_outbox_table) == set()


def test_old_reconcile_passes_go_with_their_scratch_rows_and_the_latest_pass_stays(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    died = _pass(engine, OLD_MS - 2, result="running", seen=("run-a", "run-b"))  # a pass that died midway
    _pass(engine, OLD_MS - 1)
    latest_old = _pass(engine, OLD_MS)  # the reconciler has been off for over a week

    removed = prune_bookkeeping(bookkeeping_prunes(engine), NOW_MS, retention_ms=RETENTION_MS)

    assert removed["reconcile_passes"] == 2
    assert _ids(engine, reconcile_passes_table) == {latest_old}
    with engine.connect() as conn:
        assert conn.execute(select(reconcile_seen_table).where(reconcile_seen_table.c.pass_id == died)).all() == []
    last = SqlReconcileStore(engine).last_pass()
    assert last is not None and last["id"] == latest_old

    recent = _pass(engine, RECENT_MS)
    assert prune_bookkeeping(bookkeeping_prunes(engine), NOW_MS, retention_ms=RETENTION_MS)["reconcile_passes"] == 1
    assert _ids(engine, reconcile_passes_table) == {recent}


def test_the_schedule_runs_housekeeping_beside_the_reconcile_pass() -> None:
    ran = threading.Event()
    scheduler = start_reconcile_schedule(lambda: None, 3600, housekeeping=ran.set, housekeeping_interval_s=1)
    try:
        job = scheduler.get_job("housekeeping")
        assert job is not None and job.trigger.interval.total_seconds() == 1
        assert ran.wait(5), "the housekeeping job did not run"
    finally:
        scheduler.shutdown(wait=True)


def test_a_failing_run_is_logged_by_its_kind_and_never_raised(tmp_path: Any, caplog: Any) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/missing-dir/bridge.sqlite")  # cannot be opened
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.jobs.housekeeping"):
            run_housekeeping(bookkeeping_prunes(engine), NOW_MS)
    finally:
        engine.dispose()
    assert [r.getMessage() for r in caplog.records] == ["housekeeping failed: OperationalError (will retry)"]
