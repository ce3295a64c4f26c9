"""One mutation, one transaction: a failure at any step commits nothing (every store); PostgreSQL runs it
SERIALIZABLE with fixed timeouts and absorbs serialization failures, at most three times, never after COMMIT."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import text

from bridge.domain.errors import StorageError, StoreBusyError
from bridge.domain.step_run import StepRunStatus
from bridge.domain.step_run_mutation import MUTATION_STEPS
from bridge.storage.step_runs import (
    IDLE_IN_TRANSACTION_TIMEOUT_MS,
    LOCK_TIMEOUT_MS,
    MAX_SERIALIZATION_RETRIES,
    STATEMENT_TIMEOUT_MS,
    SqlStepRunRepository,
)
from tests.conftest import Backend
from tests.contract.step_run_world import InjectedFailure, World, world_for
from tests.contract.test_transactions import _locked_by_another_writer, failing


@pytest.fixture
def world(backend: Backend) -> World:
    return world_for(backend)


@pytest.fixture
def serializable(sql_backend: Backend) -> World:
    """A world whose store runs mutations SERIALIZABLE (skipped where the store serialises every writer)."""
    world = world_for(sql_backend)
    if not world.repository.serializable:
        pytest.skip("this store serialises every writer; it has no serialization failures to absorb")
    return world


@pytest.mark.parametrize("step", MUTATION_STEPS)
@pytest.mark.parametrize("op", ["create", "transition"])
def test_a_failure_at_any_step_of_the_transaction_commits_nothing(world: World, step: str, op: str) -> None:
    run = world.run()
    existing = world.create(run.id).step_run
    command = world.creation(run.id, "new") if op == "create" else world.transition(existing, StepRunStatus.READY)
    before = world.snapshot(run.id)
    world.faults.fail_at = step
    mutate = world.steps.create_step_run if op == "create" else world.steps.transition_step_run

    with pytest.raises(InjectedFailure):
        mutate(command)  # type: ignore[arg-type]

    assert world.snapshot(run.id) == before
    assert world.repository.get_mutation(command.mutation_id) is None
    world.faults.fail_at = None
    assert mutate(command).applied is True  # nothing half-committed stands in its way  # type: ignore[arg-type]
    assert set(world.faults.passed) == set(MUTATION_STEPS)


@pytest.mark.parametrize("table, operation", [("step_runs", "INSERT"), ("runs", "UPDATE"), ("run_events", "INSERT"),
                                              ("step_run_mutations", "INSERT")])
def test_a_store_failure_in_any_write_of_a_create_rolls_back_the_others(sql_backend: Backend, table: str,
                                                                        operation: str) -> None:
    world = world_for(sql_backend)
    run = world.run()
    before = world.snapshot(run.id)
    with failing(sql_backend, table, operation), pytest.raises(StorageError):
        world.create(run.id)
    assert world.snapshot(run.id) == before


@pytest.mark.parametrize("table", ["step_runs", "runs", "run_events", "step_run_mutations"])
def test_a_store_failure_in_any_write_of_a_transition_rolls_back_the_others(sql_backend: Backend, table: str) -> None:
    world = world_for(sql_backend)
    run = world.run()
    step = world.create(run.id).step_run
    before = world.snapshot(run.id)
    operation = "UPDATE" if table in ("step_runs", "runs") else "INSERT"
    with failing(sql_backend, table, operation), pytest.raises(StorageError):
        world.move(step, StepRunStatus.READY)
    assert world.snapshot(run.id) == before


def test_a_sqlite_store_locked_by_another_process_is_waited_out_within_the_budget(sqlite_backend: Backend) -> None:
    world = world_for(sqlite_backend)
    run = world.run()
    holder = _locked_by_another_writer(sqlite_backend, 0.15)
    result = world.create(run.id)
    holder.join()
    assert result.applied and world.fence(run.id) == (run.version + 1, run.event_sequence + 1)


def test_a_sqlite_store_locked_past_the_budget_is_store_busy_and_nothing_is_written(sqlite_backend: Backend) -> None:
    world = world_for(sqlite_backend)
    run = world.run()
    before = world.snapshot(run.id)
    holder = _locked_by_another_writer(sqlite_backend, 1.5)
    try:
        with pytest.raises(StoreBusyError):
            world.create(run.id)
    finally:
        holder.join()
    assert world.snapshot(run.id) == before


# --- PostgreSQL: SERIALIZABLE, fixed timeouts, bounded retries ------------------------------------------------


@contextmanager
def raising_on_ledger_insert(world: World, sqlstate: str, times: int, *, at_commit: bool = False) -> Iterator[str]:
    """The next ``times`` ledger inserts fail with ``sqlstate`` (counted by a sequence, which no rollback undoes);
    ``at_commit``: from a deferred constraint trigger, so the failure comes with COMMIT. Yields the sequence."""
    deferred = "CONSTRAINT " if at_commit else ""
    when = "AFTER INSERT ON step_run_mutations DEFERRABLE INITIALLY DEFERRED" if at_commit else \
        "BEFORE INSERT ON step_run_mutations"
    world.sql("CREATE SEQUENCE injected_calls")
    world.sql(f"CREATE FUNCTION inject_{sqlstate.lower()}() RETURNS trigger AS $$ BEGIN "
              f"IF nextval('injected_calls') <= {times} THEN "
              f"RAISE EXCEPTION 'injected {sqlstate}' USING ERRCODE = '{sqlstate}'; END IF; RETURN NEW; END $$ "
              "LANGUAGE plpgsql")
    world.sql(f"CREATE {deferred}TRIGGER inject_failure {when} FOR EACH ROW "
              f"EXECUTE FUNCTION inject_{sqlstate.lower()}()")
    try:
        yield "injected_calls"
    finally:
        world.sql("DROP TRIGGER inject_failure ON step_run_mutations")
        world.sql(f"DROP FUNCTION inject_{sqlstate.lower()}()")
        world.sql("DROP SEQUENCE injected_calls")


def calls(world: World) -> int:
    return int(world.sql("SELECT last_value FROM injected_calls")[0][0])


@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
def test_serialization_failures_and_deadlocks_are_retried_and_absorbed(serializable: World, sqlstate: str) -> None:
    world = serializable
    run = world.run()
    with raising_on_ledger_insert(world, sqlstate, times=MAX_SERIALIZATION_RETRIES):
        result = world.create(run.id)
        assert calls(world) == 1 + MAX_SERIALIZATION_RETRIES
    assert result.applied and world.repository.serialization_retries == 3
    assert world.fence(run.id) == (run.version + 1, run.event_sequence + 1)
    assert [e.sequence for e in world.events(run.id)] == [1, 2]


def test_a_fourth_serialization_failure_is_store_busy_and_nothing_is_written(serializable: World) -> None:
    world = serializable
    run = world.run()
    before = world.snapshot(run.id)
    with raising_on_ledger_insert(world, "40001", times=1 + MAX_SERIALIZATION_RETRIES):
        with pytest.raises(StoreBusyError):
            world.create(run.id)
        assert calls(world) == 1 + MAX_SERIALIZATION_RETRIES
    assert world.snapshot(run.id) == before


def test_a_failure_at_commit_is_never_retried_and_commits_nothing(serializable: World) -> None:
    world = serializable
    run = world.run()
    before = world.snapshot(run.id)
    with raising_on_ledger_insert(world, "40001", times=1, at_commit=True):
        with pytest.raises(StoreBusyError):
            world.create(run.id)
        assert calls(world) == 1  # the COMMIT that failed was not sent again
    assert world.repository.serialization_retries == 0
    assert world.snapshot(run.id) == before


def test_a_real_concurrent_update_of_the_run_is_a_serialization_failure_the_retry_absorbs(
        serializable: World) -> None:
    world = serializable
    run = world.run()
    assert world.backend.engine is not None
    outcome: list[object] = []
    with world.backend.engine.connect() as other:
        other.execute(text("UPDATE runs SET priority = priority WHERE id = :r"), {"r": run.id})  # holds the row

        def mutate() -> None:
            try:
                outcome.append(world.create(run.id, fence=(run.version, run.event_sequence)))
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                outcome.append(exc)

        racer = threading.Thread(target=mutate)
        racer.start()
        time.sleep(0.3)  # the mutation's snapshot is taken and it waits on the row lock
        other.commit()  # a concurrent update it cannot serialize after: 40001, then a clean retry
        racer.join(10)
    assert [getattr(r, "applied", r) for r in outcome] == [True]
    assert world.repository.serialization_retries == 1


def test_the_transaction_runs_serializable_with_its_fixed_timeouts(serializable: World) -> None:
    world = serializable
    world.sql("CREATE TABLE seen_settings (isolation text, statement_timeout text, lock_timeout text, idle text)")
    world.sql("CREATE FUNCTION record_settings() RETURNS trigger AS $$ BEGIN INSERT INTO seen_settings VALUES ("
              "current_setting('transaction_isolation'), current_setting('statement_timeout'), "
              "current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')); "
              "RETURN NEW; END $$ LANGUAGE plpgsql")
    world.sql("CREATE TRIGGER record_settings BEFORE INSERT ON step_run_mutations FOR EACH ROW "
              "EXECUTE FUNCTION record_settings()")
    world.create(world.run().id)
    assert [tuple(r) for r in world.sql("SELECT * FROM seen_settings")] == [(
        "serializable", f"{STATEMENT_TIMEOUT_MS // 1000}s", f"{LOCK_TIMEOUT_MS // 1000}s",
        f"{IDLE_IN_TRANSACTION_TIMEOUT_MS // 1000}s")]


def test_a_run_locked_past_the_lock_timeout_fails_in_that_time_without_a_retry(serializable: World) -> None:
    world = serializable
    run = world.run()
    assert world.backend.engine is not None
    with world.backend.engine.connect() as other:
        other.execute(text("SELECT 1 FROM runs WHERE id = :r FOR UPDATE"), {"r": run.id})
        started = time.monotonic()
        with pytest.raises(StoreBusyError):
            world.create(run.id)
        waited = time.monotonic() - started
        other.rollback()
    assert LOCK_TIMEOUT_MS / 1000 * 0.9 <= waited < LOCK_TIMEOUT_MS / 1000 + 1.5
    assert world.repository.serialization_retries == 0
    assert isinstance(world.repository, SqlStepRunRepository)
