"""A hypothesis state machine over Runs and StepRuns, on every store: random creates, moves, stale fences, run
ends, exact and conflicting replays. Never an illegal state, replay always equal to history, sequences contiguous."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from bridge.domain.commands import TransitionRun
from bridge.domain.errors import BridgeError
from bridge.domain.model import RunStatus
from bridge.domain.step_run import STEP_ATTEMPT_LIMIT, STEP_RUN_TRANSITIONS, StepRun, StepRunKind, StepRunStatus
from bridge.domain.step_run_errors import (
    InvalidStepRunTransitionError,
    RunFenceConflictError,
    RunTerminalError,
    StepAttemptLimitError,
    StepMutationConflictError,
)
from bridge.domain.step_run_mutation import CreateStepRun, MutationResult, StepRunMutation, TransitionStepRun
from bridge.storage.memory import InMemoryUnitOfWork
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR
from tests.contract.step_run_world import World, world_for
from tests.support.run_commands import transition_run

EXAMPLES = {"memory": 60, "sqlite": 25, "postgres": 12}


@dataclass
class Applied:
    command: StepRunMutation
    result: MutationResult


class StepRunMachine(RuleBasedStateMachine):
    runs = Bundle("runs")
    history = Bundle("history")

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.known: dict[str, StepRun] = {}  # every StepRun of this example, as last committed
        self.ended: set[str] = set()
        self.run_ids: list[str] = []

    def _mutate(self, command: StepRunMutation) -> MutationResult:
        steps = self.world.steps
        return (steps.create_step_run(command) if isinstance(command, CreateStepRun)
                else steps.transition_step_run(command))

    def _refused(self, command: StepRunMutation, error: type[BridgeError]) -> MultipleResults[Applied]:
        """The mutation is refused with ``error`` and writes nothing; nothing is added to the history."""
        before = self.world.snapshot(command.run_id)
        with pytest.raises(error):
            self._mutate(command)
        assert self.world.snapshot(command.run_id) == before
        return multiple()

    @rule(target=runs)
    def new_run(self) -> str:
        run = self.world.run()
        self.run_ids.append(run.id)
        return run.id

    @rule(run_id=runs)
    def end_run(self, run_id: str) -> None:
        run = self.world.runs.get_run(run_id)
        if run.status is RunStatus.CREATED:
            transition_run(self.world.runs, TransitionRun(run_id, RunStatus.CANCELLED, run.version, ACTOR))
            self.ended.add(run_id)

    @rule(target=history, run_id=runs, kind=st.sampled_from(list(StepRunKind)), stale=st.booleans())
    def create(self, run_id: str, kind: StepRunKind, stale: bool) -> Applied | MultipleResults[Applied]:
        version, sequence = self.world.fence(run_id)
        command = self.world.creation(run_id, f"step {len(self.known)}", kind,
                                      fence=(max(version - 1, 0), sequence - 1) if stale else None)
        if stale:
            return self._refused(command, RunFenceConflictError)
        if run_id in self.ended:
            return self._refused(command, RunTerminalError)
        result = self._mutate(command)
        assert result.applied and result.step_run.status is StepRunStatus.PENDING
        assert (result.run_version, result.event_sequence) == (version + 1, sequence + 1)
        self.known[result.step_run.id] = result.step_run
        return Applied(command, result)

    @rule(target=history, applied=history, to=st.sampled_from(list(StepRunStatus)))
    def move(self, applied: Applied, to: StepRunStatus) -> Applied | MultipleResults[Applied]:
        step = self.known[applied.result.step_run.id]
        command = self.world.transition(step, to)
        if step.run_id in self.ended:
            return self._refused(command, RunTerminalError)
        if to not in STEP_RUN_TRANSITIONS[step.status]:
            return self._refused(command, InvalidStepRunTransitionError)
        if to is StepRunStatus.RUNNING and step.attempt_count >= STEP_ATTEMPT_LIMIT:
            return self._refused(command, StepAttemptLimitError)
        result = self._mutate(command)
        moved = result.step_run
        assert moved.status is to and moved.version == step.version + 1 and moved.id == step.id
        assert moved.attempt_count == step.attempt_count + (to is StepRunStatus.RUNNING)
        self.known[moved.id] = moved
        return Applied(command, result)

    @rule(applied=history)
    def replay(self, applied: Applied) -> None:
        before = self.world.snapshot(applied.command.run_id)
        again = self._mutate(applied.command)
        assert again == replace(applied.result, applied=False)  # what was committed then, not what is now
        assert self.world.snapshot(applied.command.run_id) == before

    @rule(applied=consumes(history))
    def conflicting_replay(self, applied: Applied) -> None:
        command = applied.command
        other = (replace(command, step_key=command.step_key + " changed") if isinstance(command, CreateStepRun)
                 else replace(command, expected_version=command.expected_version + 1))
        assert isinstance(other, (CreateStepRun, TransitionStepRun))
        self._refused(other, StepMutationConflictError)

    @invariant()
    def every_run_is_contiguous_and_every_step_run_is_as_committed(self) -> None:
        for run_id in self.run_ids:
            run = self.world.runs.get_run(run_id)
            events = self.world.events(run_id)
            assert [e.sequence for e in events] == list(range(1, run.event_sequence + 1))
            stored = self.world.repository.page(run_id, None, 200).step_runs
            assert {s.id: s for s in stored} == {i: s for i, s in self.known.items() if s.run_id == run_id}
            for step in stored:
                assert step.status in STEP_RUN_TRANSITIONS and 0 <= step.attempt_count <= STEP_ATTEMPT_LIMIT
                assert len([e for e in events if e.step_run_id == step.id]) == step.version + 1


@pytest.mark.parametrize("steps", [25])
def test_random_mutations_never_break_the_step_run_rules(backend: Backend, steps: int) -> None:
    def fresh() -> StepRunMachine:
        """Each example makes its own Runs in a fresh view of the store; the in-memory store, which copies its
        whole state on every write, starts empty each time instead of growing with every example."""
        return StepRunMachine(world_for(backend if backend.engine is not None
                                        else replace(backend, uow=InMemoryUnitOfWork())))

    run_state_machine_as_test(
        fresh,
        settings=settings(max_examples=EXAMPLES[backend.name], stateful_step_count=steps, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]))
