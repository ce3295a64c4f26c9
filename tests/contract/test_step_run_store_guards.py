"""What the SQL stores themselves refuse, checked with raw SQL that bypasses the repository
(docs/run-state.md#stepruns-on-both-stores): an Attempt or Event naming a StepRun of another Run, a change to the
mutation ledger, a mirror column that disagrees with the record's JSON, a deleted or re-homed StepRun."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.domain.step_run import StepRun, StepRunStatus
from bridge.domain.step_run_errors import StepRunIntegrityError
from bridge.service.ids import new_id
from bridge.storage.schema import STEP_RUN_MIRROR
from tests.conftest import Backend
from tests.contract.step_run_world import World, world_for


@pytest.fixture
def world(sql_backend: Backend) -> World:
    return world_for(sql_backend)


def two_runs_with_a_step_each(world: World) -> tuple[StepRun, StepRun]:
    mine, theirs = world.run(), world.run()
    return world.create(mine.id, "mine").step_run, world.create(theirs.id, "theirs").step_run


def insert_attempt(world: World, run_id: str, step_run_id: str | None, attempt: int = 1) -> str:
    attempt_id = new_id()
    world.sql("INSERT INTO run_attempts (id, run_id, step_run_id, attempt, status, executor_type, callback_sequence, "
              "created_at_ms, synthesized) VALUES (:id, :run, :step, :n, 'claimed', 'raw_sql', 0, 1, false)",
              id=attempt_id, run=run_id, step=step_run_id, n=attempt)
    return attempt_id


def insert_event(world: World, run_id: str, step_run_id: str | None, sequence: int) -> str:
    event_id = new_id()
    world.sql("INSERT INTO run_events (id, run_id, sequence, type, actor_type, step_run_id, payload, created_at_ms) "
              "VALUES (:id, :run, :seq, 'compat.raw', 'system', :step, '{}', 1)",
              id=event_id, run=run_id, seq=sequence, step=step_run_id)
    return event_id


def refused(statement: Callable[[], object]) -> str:
    with pytest.raises(IntegrityError) as caught:
        statement()
    return str(caught.value.orig)


def test_an_attempt_naming_a_step_run_of_another_run_is_refused_on_insert_and_on_update(world: World) -> None:
    mine, theirs = two_runs_with_a_step_each(world)
    refused(lambda: insert_attempt(world, mine.run_id, theirs.id))
    attempt = insert_attempt(world, mine.run_id, mine.id)  # its own Run's StepRun is fine
    plain = insert_attempt(world, mine.run_id, None, attempt=2)  # and so is none
    refused(lambda: world.sql("UPDATE run_attempts SET step_run_id = :s WHERE id = :a", s=theirs.id, a=plain))
    refused(lambda: world.sql("UPDATE run_attempts SET run_id = :r WHERE id = :a", r=theirs.run_id, a=attempt))
    refused(lambda: insert_attempt(world, mine.run_id, "0190a000-0000-7000-8000-0000000000ff", attempt=3))
    rows = world.sql("SELECT id, step_run_id FROM run_attempts WHERE run_id = :r ORDER BY attempt", r=mine.run_id)
    assert [tuple(r) for r in rows] == [(attempt, mine.id), (plain, None)]


def test_an_event_naming_a_step_run_of_another_run_is_refused_on_insert_and_on_update(world: World) -> None:
    mine, theirs = two_runs_with_a_step_each(world)
    next_sequence = world.fence(mine.run_id)[1] + 1
    refused(lambda: insert_event(world, mine.run_id, theirs.id, next_sequence))
    own = insert_event(world, mine.run_id, mine.id, next_sequence)
    refused(lambda: world.sql("UPDATE run_events SET step_run_id = :s WHERE id = :e", s=theirs.id, e=own))
    refused(lambda: world.sql("UPDATE run_events SET run_id = :r WHERE id = :e", r=theirs.run_id, e=own))
    assert world.sql("SELECT step_run_id FROM run_events WHERE id = :e", e=own)[0][0] == mine.id


def test_the_mutation_ledger_can_be_neither_updated_nor_deleted(world: World) -> None:
    run = world.run()
    world.create(run.id)
    row = world.sql("SELECT mutation_id, run_version FROM step_run_mutations WHERE run_id = :r", r=run.id)[0]
    assert "append-only" in refused(lambda: world.sql(
        "UPDATE step_run_mutations SET run_version = run_version + 1 WHERE mutation_id = :m", m=row[0]))
    assert "append-only" in refused(lambda: world.sql("DELETE FROM step_run_mutations WHERE mutation_id = :m",
                                                      m=row[0]))
    with pytest.raises(DBAPIError):  # refused where the store has TRUNCATE; not even a statement on SQLite
        world.sql("TRUNCATE step_run_mutations")
    assert [tuple(r) for r in world.sql("SELECT mutation_id, run_version FROM step_run_mutations")] == [tuple(row)]


def test_a_step_run_is_never_deleted_and_keeps_its_id_and_run(world: World) -> None:
    mine, theirs = two_runs_with_a_step_each(world)
    refused(lambda: world.sql("DELETE FROM step_runs WHERE id = :s", s=mine.id))
    refused(lambda: world.sql("UPDATE step_runs SET run_id = :r WHERE id = :s", r=theirs.run_id, s=mine.id))
    assert world.repository.get(mine.id) == mine


@pytest.mark.parametrize("column, key", [pair for pair in STEP_RUN_MIRROR if pair[0] not in ("id", "run_id")])
def test_each_mirror_column_is_bound_to_the_records_json(world: World, column: str, key: str) -> None:
    run = world.run()
    step = world.move(world.create(run.id).step_run, StepRunStatus.READY)
    other = {"attempt_count": 3, "version": 9, "created_at_ms": 5, "updated_at_ms": 5, "started_at_ms": 5,
             "finished_at_ms": 5, "digest": "0" * 64, "error_code": "internal_error", "schema_id": "x/y@v1",
             "input_ref": "artifact:0190a000-0000-4000-8000-000000000001", "kind": "agent", "status": "running",
             "output_ref": "artifact:0190a000-0000-4000-8000-000000000002", "step_key": "renamed"}[column]
    refused(lambda: world.sql(f"UPDATE step_runs SET {column} = :v WHERE id = :s", v=other, s=step.id))
    record = json.loads(step.to_json())
    record[key] = "x/y@v1" if key == "schema" else other
    edited = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    refused(lambda: world.sql("UPDATE step_runs SET record = :v WHERE id = :s", v=edited, s=step.id))
    assert world.repository.get(step.id) == step


def test_a_hand_edit_that_keeps_the_mirrors_bound_is_caught_by_the_digest_on_read(world: World) -> None:
    run = world.run()
    step = world.create(run.id, "original name").step_run
    record = json.loads(step.to_json())
    record["step_key"] = "forged name"
    edited = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    world.sql("UPDATE step_runs SET step_key = 'forged name', record = :v WHERE id = :s", v=edited, s=step.id)
    with pytest.raises(StepRunIntegrityError):
        world.repository.get(step.id)
    with pytest.raises(StepRunIntegrityError):
        world.repository.page(run.id, None, 10)


def test_a_ledger_row_whose_columns_disagree_with_its_result_record_is_refused(world: World) -> None:
    run = world.run()
    result = world.create(run.id, mutation="m-ledger")
    event_sequence = world.fence(run.id)[1] + 1
    insert_event(world, run.id, result.step_run.id, event_sequence)
    row = {"m": "m-forged", "r": run.id, "s": result.step_run.id, "rec": result.step_run.to_json(), "e": new_id(),
           "q": event_sequence}
    insert = ("INSERT INTO step_run_mutations (mutation_id, op, run_id, step_run_id, request_digest, result_record, "
              "step_run_version, run_version, event_sequence, event_id, created_at_ms) "
              "VALUES (:m, 'create', :r, :s, 'x', :rec, :version, 1, :q, :e, 1)")
    refused(lambda: world.sql(insert, **row, version=7))
    world.sql(insert, **row, version=0)  # bound to its record: the store takes it
