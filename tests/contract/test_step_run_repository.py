"""StepRunRepository contract (docs/stepruns.md), on every store (sqlite, postgres, memory): create, transition, exact
and historical replay, conflicting replay, fences, terminal Runs, limits, keyset pages, racing threads."""

from __future__ import annotations

import inspect

import pytest

from bridge.domain.commands import TransitionRun
from bridge.domain.errors import RunNotFoundError, RunVersionConflictError
from bridge.domain.events import EventType
from bridge.domain.model import RunStatus
from bridge.domain.step_run import STEP_ATTEMPT_LIMIT, STEP_RUN_LIMIT, StepRun, StepRunKind, StepRunStatus
from bridge.domain.step_run_errors import (
    InvalidStepRunTransitionError,
    RunFenceConflictError,
    RunTerminalError,
    StepAttemptLimitError,
    StepMutationConflictError,
    StepRunLimitError,
    StepRunNotFoundError,
    StepRunVersionConflictError,
)
from bridge.domain.step_run_mutation import MutationResult
from bridge.storage.step_run_queries import SqlStepRunReader
from bridge.storage.step_runs import SqlStepRunRepository
from bridge.storage.step_runs_memory import InMemoryStepRunRepository
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR
from tests.contract.step_run_world import World, world_for
from tests.contract.test_run_service import race
from tests.support.run_commands import transition_run

S = StepRunStatus


@pytest.fixture
def world(backend: Backend) -> World:
    return world_for(backend)


def test_a_create_adds_a_pending_step_run_and_advances_the_run_by_one_event(world: World) -> None:
    run = world.run()
    result = world.create(run.id, "fetch/page one", kind=StepRunKind.TOOL)

    step = result.step_run
    assert result.applied is True
    assert (step.status, step.version, step.attempt_count, step.kind) == (S.PENDING, 0, 0, StepRunKind.TOOL)
    assert (result.run_version, result.event_sequence) == (run.version + 1, run.event_sequence + 1)
    after = world.runs.get_run(run.id)
    assert (after.version, after.event_sequence, after.status) == (result.run_version, result.event_sequence,
                                                                    run.status)
    event = world.events(run.id)[-1]
    assert (event.type, event.sequence, event.step_run_id) == (EventType.STEP_RUN_CREATED, result.event_sequence,
                                                               step.id)
    assert event.payload == {"mutation_id": world.issued[-1], "kind": "tool", "to": "pending", "version": 0,
                             "digest": step.digest}
    assert world.repository.get(step.id) == step
    ledger = world.repository.get_mutation(world.issued[-1])
    assert (ledger.op, ledger.step_run, ledger.run_version, ledger.event_sequence, ledger.event_id) == (
        "create", step, result.run_version, result.event_sequence, event.id)


def test_transitions_compare_and_set_and_each_takes_the_runs_next_event(world: World) -> None:
    run = world.run()
    step = world.create(run.id).step_run
    for to in (S.READY, S.RUNNING, S.SUCCEEDED):
        step = world.move(step, to, **({"output_ref": "artifact:0190a000-0000-4000-8000-00000000000a"}
                                       if to is S.SUCCEEDED else {}))
    assert (step.status, step.version, step.attempt_count) == (S.SUCCEEDED, 3, 1)
    assert step.output_ref == "artifact:0190a000-0000-4000-8000-00000000000a"
    assert step.started_at_ms is not None and step.finished_at_ms is not None
    events = world.events(run.id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events[-3:]] == [EventType.STEP_RUN_TRANSITIONED] * 3
    assert [(e.payload["from"], e.payload["to"]) for e in events[-3:]] == [
        ("pending", "ready"), ("ready", "running"), ("running", "succeeded")]
    assert world.runs.get_run(run.id).version == run.version + 4
    assert world.repository.get(step.id) == step


def test_an_exact_replay_returns_what_was_committed_then_even_after_the_step_run_moved_on(world: World) -> None:
    run = world.run()
    creation = world.creation(run.id)
    first = world.steps.create_step_run(creation)
    step = first.step_run
    ready = world.transition(step, S.READY)
    moved = world.steps.transition_step_run(ready)
    step = moved.step_run
    for to in (S.RUNNING, S.LOST):
        step = world.move(step, to)
    before = world.snapshot(run.id)

    again = world.steps.create_step_run(creation)
    again_ready = world.steps.transition_step_run(ready)

    assert again == MutationResult(first.mutation_id, first.step_run, first.run_version, first.event_sequence,
                                   applied=False)
    assert again.step_run.status is S.PENDING and world.repository.get(step.id).status is S.LOST
    assert (again_ready.step_run, again_ready.run_version, again_ready.event_sequence) == (
        moved.step_run, moved.run_version, moved.event_sequence)
    assert world.snapshot(run.id) == before  # a replay writes nothing


def test_the_same_mutation_id_with_another_request_fails_closed_and_writes_nothing(world: World) -> None:
    run = world.run()
    first = world.create(run.id, "original", mutation="m-twice")
    before = world.snapshot(run.id)
    with pytest.raises(StepMutationConflictError) as refused:
        world.create(run.id, "another step", mutation="m-twice")
    with pytest.raises(StepMutationConflictError):
        world.steps.transition_step_run(world.transition(first.step_run, S.READY, mutation="m-twice"))
    assert refused.value.code == "STEP_MUTATION_CONFLICT"
    assert world.snapshot(run.id) == before


def test_a_stale_run_fence_is_a_run_version_conflict_with_expected_and_current(world: World) -> None:
    run = world.run()
    step = world.create(run.id).step_run
    stale = (run.version, run.event_sequence)
    before = world.snapshot(run.id)
    with pytest.raises(RunFenceConflictError) as refused:
        world.create(run.id, "late", fence=stale)
    with pytest.raises(RunVersionConflictError):
        world.steps.transition_step_run(world.transition(step, S.READY, fence=stale))
    assert refused.value.code == "RUN_VERSION_CONFLICT"
    assert refused.value.details == {
        "run_id": run.id, "expected_version": stale[0], "current_version": stale[0] + 1,
        "expected_event_sequence": stale[1], "current_event_sequence": stale[1] + 1}
    assert world.snapshot(run.id) == before


def test_a_stale_step_run_is_a_step_run_version_conflict_with_expected_and_current(world: World) -> None:
    run = world.run()
    old = world.create(run.id).step_run
    new = world.move(old, S.READY)
    before = world.snapshot(run.id)
    with pytest.raises(StepRunVersionConflictError) as refused:
        world.steps.transition_step_run(world.transition(old, S.CANCELLED))
    assert refused.value.details["expected"] == {"version": 0, "digest": old.digest, "status": "pending"}
    assert refused.value.details["current"] == {"version": 1, "digest": new.digest, "status": "ready"}
    assert world.snapshot(run.id) == before


def test_step_run_mutations_and_run_commands_fence_each_other(world: World) -> None:
    run = world.run()
    world.create(run.id)  # bumps the Run's version: a command that read the Run before is stale
    with pytest.raises(RunVersionConflictError):
        transition_run(world.runs, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR))
    queued = transition_run(world.runs, TransitionRun(run.id, RunStatus.QUEUED, run.version + 1, ACTOR)).run
    with pytest.raises(RunFenceConflictError):
        world.create(run.id, fence=(run.version + 1, run.event_sequence + 1))
    assert world.create(run.id, fence=(queued.version, queued.event_sequence)).applied


def test_a_terminal_run_takes_no_step_run_mutation(world: World) -> None:
    run = world.run()
    step = world.create(run.id).step_run
    transition_run(world.runs, TransitionRun(run.id, RunStatus.CANCELLED, run.version + 1, ACTOR))
    before = world.snapshot(run.id)
    with pytest.raises(RunTerminalError) as refused:
        world.create(run.id)
    with pytest.raises(RunTerminalError):
        world.move(step, S.CANCELLED)
    assert refused.value.code == "RUN_TERMINAL"
    assert world.snapshot(run.id) == before


def test_an_illegal_move_and_an_unknown_or_foreign_step_run_are_refused(world: World) -> None:
    run, other = world.run(), world.run()
    step = world.create(run.id).step_run
    before = world.snapshot(run.id)
    with pytest.raises(InvalidStepRunTransitionError):
        world.move(step, S.RUNNING)  # pending must become ready first
    foreign = world.transition(step, S.READY)
    foreign = type(foreign)(**{**{f: getattr(foreign, f) for f in foreign.__dataclass_fields__},
                               "run_id": other.id, "expected_run_version": other.version,
                               "expected_event_sequence": other.event_sequence})
    with pytest.raises(StepRunNotFoundError):
        world.steps.transition_step_run(foreign)
    with pytest.raises(RunNotFoundError):
        world.create("0190a000-0000-7000-8000-00000000dead", fence=(0, 1))
    assert world.snapshot(run.id) == before


def test_a_run_holds_at_most_128_step_runs(world: World) -> None:
    run = world.run()
    for n in range(STEP_RUN_LIMIT):
        world.create(run.id, f"step {n}")
    before = world.snapshot(run.id)
    with pytest.raises(StepRunLimitError):
        world.create(run.id, "one too many")
    assert world.snapshot(run.id) == before
    assert len(world.repository.page(run.id, None, 200).step_runs) == 128


def test_a_step_run_runs_at_most_64_attempts(world: World) -> None:
    run = world.run()
    step = world.move(world.create(run.id).step_run, S.READY)
    for _ in range(STEP_ATTEMPT_LIMIT):
        step = world.move(world.move(world.move(step, S.RUNNING), S.LOST, error_code="worker_lost"), S.READY)
    before = world.snapshot(run.id)
    with pytest.raises(StepAttemptLimitError):
        world.move(step, S.RUNNING)
    assert world.snapshot(run.id) == before
    assert world.move(step, S.CANCELLED).attempt_count == 64


def test_pages_walk_a_runs_step_runs_in_creation_order_without_gap_or_repeat(world: World) -> None:
    run, other = world.run(), world.run()
    made = [world.create(run.id, f"s{n}").step_run for n in range(7)]
    world.create(other.id, "not mine")
    seen: list[StepRun] = []
    after = None
    for _ in range(10):
        page = world.repository.page(run.id, after, 3)
        seen += page.step_runs
        after = page.next_after
        if after is None:
            break
    assert [s.id for s in seen] == [s.id for s in sorted(made, key=lambda s: (s.created_at_ms, s.id))]
    assert world.repository.page(other.id, None, 3).next_after is None
    with pytest.raises(RunNotFoundError):
        world.repository.page("0190a000-0000-7000-8000-00000000dead", None, 3)


def test_the_run_events_listing_reads_step_run_events_like_any_other(world: World) -> None:
    run = world.run()
    world.move(world.create(run.id).step_run, S.READY)
    assert [e.type.value for e in world.events(run.id)] == ["run.created", "step_run.created",
                                                            "step_run.transitioned"]


def test_racing_mutations_on_one_fence_apply_exactly_one_and_keep_the_sequence_contiguous(world: World) -> None:
    run = world.run()
    step = world.create(run.id).step_run
    for round_ in range(6):
        fence = world.fence(run.id)
        results = race(*[lambda n=n: world.create(run.id, f"r{round_}-{n}", fence=fence) for n in range(3)])
        applied = [r for r in results if isinstance(r, MutationResult)]
        assert len(applied) == 1, results
        assert all(isinstance(r, RunVersionConflictError) for r in results if r not in applied), results
    fence = world.fence(run.id)
    moves = race(*[lambda to=to: world.steps.transition_step_run(world.transition(step, to, fence=fence))
                   for to in (S.READY, S.CANCELLED, S.SKIPPED)])
    assert sum(isinstance(r, MutationResult) for r in moves) == 1, moves
    events = world.events(run.id)
    # run.created, the create, one create per round, one move: no gap, no duplicate
    assert [e.sequence for e in events] == list(range(1, 1 + 1 + 6 + 1 + 1))
    assert world.runs.get_run(run.id).event_sequence == len(events)


def test_racing_deliveries_of_one_mutation_apply_it_once_and_replay_it_to_the_rest(world: World) -> None:
    run = world.run()
    creation = world.creation(run.id, "delivered thrice")
    results = race(*[lambda: world.steps.create_step_run(creation)] * 3)
    assert all(isinstance(r, MutationResult) for r in results), results
    assert sorted(r.applied for r in results) == [False, False, True]
    assert len({(r.step_run, r.run_version, r.event_sequence) for r in results}) == 1
    assert len(world.repository.page(run.id, None, 10).step_runs) == 1


def test_the_repository_offers_only_mutate_get_get_mutation_and_pages(backend: Backend) -> None:
    implementation = type(world_for(backend).repository)
    public = {name for name, _ in inspect.getmembers(implementation, inspect.isfunction) if not name.startswith("_")}
    assert public == {"mutate", "get", "get_mutation", "page"}
    assert {name for name, _ in inspect.getmembers(SqlStepRunReader, inspect.isfunction)
            if not name.startswith("_")} == {"get", "get_mutation", "page"}
    assert {SqlStepRunRepository, InMemoryStepRunRepository} >= {implementation}
