"""Atomicity on the SQL stores: failure injection (scenarios 3 and 4 of docs/run-state.md#verification-scenarios) and
bounded SQLite busy retry (scenario 11)."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from bridge.domain.aggregate import AttemptWrite, ChangeSet
from bridge.domain.commands import TransitionRun
from bridge.domain.errors import AttemptConflictError, StorageError, StoreBusyError, StoreUnavailableError
from bridge.domain.events import ActorType, EventType, RunEvent
from bridge.domain.model import AttemptStatus, RunStatus
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.storage.engine import make_engine
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR, attempt_to, create, running, sequences
from tests.pool_probe import PoolProbe
from tests.support.run_commands import transition_run


@contextmanager
def failing(backend: Backend, table: str, operation: str) -> Iterator[None]:
    """Install a database trigger that makes every ``operation`` on ``table`` fail inside the transaction."""
    assert backend.engine is not None
    with backend.engine.begin() as conn:
        if backend.has_file_lock:
            conn.execute(text(f"CREATE TRIGGER inject_failure BEFORE {operation} ON {table} "
                              "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"))
        else:
            conn.execute(text("CREATE FUNCTION inject_failure() RETURNS trigger AS $$ BEGIN "
                              "RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql"))
            conn.execute(text(f"CREATE TRIGGER inject_failure BEFORE {operation} ON {table} "
                              "FOR EACH ROW EXECUTE FUNCTION inject_failure()"))
    try:
        yield
    finally:
        with backend.engine.begin() as conn:
            if backend.has_file_lock:
                conn.execute(text("DROP TRIGGER inject_failure"))
            else:
                conn.execute(text(f"DROP TRIGGER inject_failure ON {table}"))
                conn.execute(text("DROP FUNCTION inject_failure()"))


# Scenario 3: the Run update fails, so no event may be left behind.
def test_a_failing_run_update_leaves_no_orphan_event(sql_backend: Backend, sql_service: RunService) -> None:
    run = create(sql_service)
    with failing(sql_backend, "runs", "UPDATE"), pytest.raises(StorageError):
        transition_run(sql_service, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR))
    assert sql_service.get_run(run.id) == run
    assert sequences(sql_service, run.id) == [1]


# Scenario 4: the event insert fails, so the Run and Attempt changes made earlier in the transaction vanish.
def test_a_failing_event_insert_rolls_back_the_run_and_attempt_changes(sql_backend: Backend,
                                                                       sql_service: RunService) -> None:
    run, attempt = running(sql_service)
    events_before = sequences(sql_service, run.id)
    with failing(sql_backend, "run_events", "INSERT"), pytest.raises(StorageError):
        attempt_to(sql_service, run, attempt, AttemptStatus.SUCCEEDED, run_to=RunStatus.SUCCEEDED, exit_code=0)
    assert sql_service.get_run(run.id) == run
    assert sql_service.get_attempts(run.id) == [attempt]
    assert sequences(sql_service, run.id) == events_before


# The Run, Attempt and event writes of one change travel together (one round trip on PostgreSQL); an
# Attempt compare-and-set that misses after the Run's hit must still leave nothing of the change behind.
def test_an_attempt_compare_and_set_miss_discards_the_run_write_and_the_events(sql_backend: Backend,
                                                                                sql_service: RunService) -> None:
    run, attempt = running(sql_service)
    events_before = sequences(sql_service, run.id)
    sequence = run.event_sequence + 1
    change = ChangeSet(
        run=replace(run, status=RunStatus.SUCCEEDED, version=run.version + 1, event_sequence=sequence),
        expected_version=run.version,
        attempt_writes=(AttemptWrite(replace(attempt, status=AttemptStatus.SUCCEEDED,
                                             callback_sequence=attempt.callback_sequence + 1),
                                     expected_status=AttemptStatus.STARTING,  # stale: it is running
                                     expected_callback_sequence=attempt.callback_sequence),),
        events=(RunEvent(id=str(uuid.uuid4()), run_id=run.id, sequence=sequence, type=EventType.RUN_SUCCEEDED,
                         actor_type=ActorType.SYSTEM, created_at_ms=run.created_at_ms),),
    )
    assert sql_backend.engine is not None
    with pytest.raises(AttemptConflictError):
        SqlUnitOfWork(sql_backend.engine).write(lambda store: store.apply(change))
    assert sql_service.get_run(run.id) == run
    assert sql_service.get_attempts(run.id) == [attempt]
    assert sequences(sql_service, run.id) == events_before


# Scenario 11: SQLite busy retry is bounded and never duplicates an event.
def hold_write_lock(path: str, seconds: float, ready: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    ready.set()
    time.sleep(seconds)
    conn.execute("ROLLBACK")
    conn.close()


def _locked_by_another_writer(backend: Backend, seconds: float) -> threading.Thread:
    assert backend.url is not None
    ready = threading.Event()
    holder = threading.Thread(target=hold_write_lock, args=(backend.url.removeprefix("sqlite:///"), seconds, ready))
    holder.start()
    ready.wait(5)
    return holder


def test_a_store_locked_past_the_budget_raises_store_busy_quickly_and_writes_nothing(sqlite_backend: Backend) -> None:
    service = RunService(SqlUnitOfWork(sqlite_backend.engine, busy_budget_ms=300), clock=SystemClock())
    run = create(service)
    holder = _locked_by_another_writer(sqlite_backend, 2.0)
    started = time.monotonic()
    with pytest.raises(StoreBusyError) as err:
        transition_run(service, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR))
    elapsed = time.monotonic() - started
    holder.join()
    assert err.value.code == "STORE_BUSY"
    assert elapsed < 1.5, f"the busy retry took {elapsed:.2f}s; its bound is well under a second"
    assert sequences(service, run.id) == [1]


def test_a_short_lock_is_waited_out_and_the_command_applies_once(sqlite_backend: Backend) -> None:
    service = RunService(SqlUnitOfWork(sqlite_backend.engine, busy_budget_ms=800, busy_attempts=6),
                         clock=SystemClock())
    run = create(service)
    holder = _locked_by_another_writer(sqlite_backend, 0.15)
    result = transition_run(service, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR))
    holder.join()
    assert result.run.status is RunStatus.QUEUED
    assert sequences(service, run.id) == [1, 2]


def test_sqlite_writers_of_one_process_take_turns_on_one_connection(sqlite_backend: Backend) -> None:
    engine = sqlite_backend.engine
    assert engine is not None
    probe = PoolProbe(engine)
    service = RunService(SqlUnitOfWork(engine, busy_budget_ms=5000), clock=SystemClock())
    runs = [create(service) for _ in range(6)]
    probe.reset()

    def move(run_id: str, version: int) -> None:
        transition_run(service, TransitionRun(run_id, RunStatus.QUEUED, version, ACTOR))

    threads = [threading.Thread(target=move, args=(r.id, r.version)) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [service.get_run(r.id).status for r in runs] == [RunStatus.QUEUED] * 6
    assert probe.peak == 1, "each waiting writer held a pooled connection of its own"


def test_a_sqlite_writer_queued_past_the_budget_raises_store_busy(sqlite_backend: Backend) -> None:
    engine = sqlite_backend.engine
    assert engine is not None
    holding, release = threading.Event(), threading.Event()

    def slow(store: object) -> None:
        holding.set()
        release.wait(5)

    uow = SqlUnitOfWork(engine, busy_budget_ms=200)
    holder = threading.Thread(target=uow.write, args=(slow,))
    holder.start()
    holding.wait(5)
    started = time.monotonic()
    with pytest.raises(StoreBusyError):
        SqlUnitOfWork(engine, busy_budget_ms=200).write(lambda store: None)
    waited = time.monotonic() - started
    release.set()
    holder.join()
    assert 0.15 < waited < 1.0
    assert SqlUnitOfWork(engine).write(lambda store: "free again") == "free again"


def test_an_unreachable_store_raises_a_typed_error_without_hanging() -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    service = RunService(SqlUnitOfWork(engine), clock=SystemClock())
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        service.get_run("x")
    assert time.monotonic() - started < 10
    engine.dispose()


POOLED_APP = "bridge-stale-connection-test"


def _terminate_pooled_backends(url: str) -> int:
    """What a PostgreSQL restart does to the bridge's idle pooled connections: the server closes them."""
    killer = create_engine(url, poolclass=NullPool)
    with killer.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND application_name = :name"), {"name": POOLED_APP}).scalar()
    killer.dispose()
    return int(killed or 0)


@pytest.mark.postgres
def test_a_connection_the_server_dropped_is_replaced_and_the_command_applies_once(
        postgres_backend: Backend, postgres_url: str, postgres_schema: str) -> None:
    named = make_url(postgres_url).update_query_dict({"application_name": POOLED_APP})
    engine = make_engine(named.render_as_string(hide_password=False), pg_search_path=postgres_schema)
    service = RunService(SqlUnitOfWork(engine), clock=SystemClock())
    run = create(service)  # leaves one idle connection in the pool
    assert _terminate_pooled_backends(postgres_url) == 1
    result = transition_run(service, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR))
    assert result.run.status is RunStatus.QUEUED
    assert sequences(service, run.id) == [1, 2]
    engine.dispose()
