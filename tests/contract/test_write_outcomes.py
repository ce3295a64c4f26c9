"""What the unit of work tells readiness (WriteOutcomes), and what it leaves behind after a failed write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from bridge.domain.commands import TransitionRun
from bridge.domain.errors import RunVersionConflictError, StoreUnavailableError
from bridge.domain.model import RunStatus
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.storage.engine import make_engine
from bridge.storage.errors import sqlite_file
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR, create, sequences
from tests.full_disk import FullDisk
from tests.support.run_commands import transition_run

WINDOW_S = 60.0


@contextmanager
def read_only_sessions(backend: Backend) -> Iterator[None]:
    """Every connection checked out refuses writes: a read-only file on SQLite, a standby on PostgreSQL."""
    assert backend.engine is not None
    statement = "PRAGMA query_only=ON" if backend.has_file_lock else "SET default_transaction_read_only = on"
    undo = "PRAGMA query_only=OFF" if backend.has_file_lock else "SET default_transaction_read_only = off"
    on = [True]

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(statement if on[0] else undo)
        cursor.close()
        if not backend.has_file_lock:
            dbapi_connection.commit()  # psycopg opened a transaction for the SET

    event.listen(backend.engine, "checkout", checkout)
    try:
        yield
    finally:
        on[0] = False


def outcomes(backend: Backend) -> tuple[int, int, str | None]:
    assert isinstance(backend.uow, SqlUnitOfWork)
    summary = backend.uow.outcomes.summary(WINDOW_S)
    return summary.successes, summary.failures, summary.last_error


def test_a_committed_write_is_recorded_and_a_read_is_not(sql_backend: Backend, sql_service: RunService) -> None:
    run = create(sql_service)
    sql_service.get_run(run.id)

    assert outcomes(sql_backend) == (1, 0, None)
    assert sql_backend.uow.outcomes.summary(WINDOW_S).writable is True  # type: ignore[attr-defined]


def test_a_write_the_store_refuses_is_recorded_as_store_unavailable(
        sql_backend: Backend, sql_service: RunService) -> None:
    with read_only_sessions(sql_backend), pytest.raises(StoreUnavailableError):
        create(sql_service)

    assert outcomes(sql_backend) == (0, 1, "STORE_UNAVAILABLE")
    assert sql_backend.uow.outcomes.summary(WINDOW_S).writable is False  # type: ignore[attr-defined]


def test_a_domain_refusal_says_nothing_about_the_store_and_is_not_recorded(
        sql_backend: Backend, sql_service: RunService) -> None:
    run = create(sql_service)
    with pytest.raises(RunVersionConflictError):
        transition_run(sql_service, TransitionRun(run.id, RunStatus.QUEUED, run.version + 5, ACTOR))

    assert outcomes(sql_backend) == (1, 0, None)


def test_the_write_probe_commits_nothing_is_not_recorded_and_fails_on_a_store_that_refuses_writes(
        sql_backend: Backend) -> None:
    assert isinstance(sql_backend.uow, SqlUnitOfWork)
    sql_backend.uow.probe_write()
    with read_only_sessions(sql_backend), pytest.raises(StoreUnavailableError):
        sql_backend.uow.probe_write()

    assert outcomes(sql_backend) == (0, 0, None)


def test_a_write_after_a_failed_commit_runs_on_a_clean_connection(sqlite_backend: Backend) -> None:
    assert sqlite_backend.engine is not None
    service = RunService(sqlite_backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    disk = FullDisk(sqlite_backend.engine)
    with pytest.raises(StoreUnavailableError):
        create(service)

    disk.on = False  # room again: the connection that failed its COMMIT must not still hold that transaction
    run = create(service)

    assert sequences(service, run.id) == [1]
    assert outcomes(sqlite_backend) == (1, 1, "STORE_UNAVAILABLE")


@pytest.mark.parametrize("opened", ["mode=ro", "immutable=1"])
def test_the_write_probe_fails_on_a_sqlite_store_opened_read_only(sqlite_backend: Backend, opened: str) -> None:
    path = sqlite_file(sqlite_backend.url)  # type: ignore[arg-type]
    sqlite_backend.engine.dispose()  # type: ignore[union-attr]
    engine = make_engine(f"sqlite:///file:{path}?{opened}&uri=true")
    try:
        with pytest.raises(StoreUnavailableError):
            SqlUnitOfWork(engine).probe_write()  # BEGIN IMMEDIATE alone succeeded here
    finally:
        engine.dispose()
