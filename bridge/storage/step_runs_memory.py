"""InMemoryStepRunRepository: the StepRunRepository contract in plain dicts, beside InMemoryUnitOfWork's Runs.

It runs through the same contract suite as the SQL stores. A mutation runs inside the unit of work's write (its
lock is the serialisation on the Run); the Run's counters and the event go through InMemoryRunStore.apply, and
this repository's own dicts change only at the end, so any failure leaves the Runs and the StepRuns as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bridge.domain.aggregate import ChangeSet
from bridge.domain.errors import RunNotFoundError
from bridge.domain.step_run import StepRun
from bridge.domain.step_run_mutation import (
    MutationRecord,
    MutationResult,
    RunFence,
    StepRunMutation,
    TransitionStepRun,
    check_fence,
    decide,
    validate,
)
from bridge.service.ports import StepRunPage
from bridge.storage.memory import InMemoryRunStore, InMemoryUnitOfWork


@dataclass
class _Ledger:
    step_runs: dict[str, StepRun] = field(default_factory=dict)
    by_run: dict[str, list[str]] = field(default_factory=dict)  # step run ids of each Run, in creation order
    mutations: dict[str, MutationRecord] = field(default_factory=dict)


def _nothing(_step: str) -> None:
    return None


class InMemoryStepRunRepository:
    def __init__(self, uow: InMemoryUnitOfWork, *, checkpoint: Callable[[str], None] | None = None) -> None:
        self._uow = uow
        self._state = _Ledger()
        self._checkpoint = checkpoint or _nothing

    def mutate(self, command: StepRunMutation, *, at_ms: int, new_id: Callable[[], str]) -> MutationResult:
        validate(command)
        return self._uow.write(lambda store: self._mutate(store, command, at_ms, new_id))

    def _mutate(self, store: InMemoryRunStore, command: StepRunMutation, at_ms: int,
                new_id: Callable[[], str]) -> MutationResult:
        step, state = self._checkpoint, self._state
        step("serialise")  # the unit of work's lock is held
        run = store.get_run(command.run_id)
        if run is None:
            raise RunNotFoundError(command.run_id)
        fence = RunFence(run.id, run.status, run.version, run.event_sequence)
        step("replay")
        if command.mutation_id in state.mutations:
            return state.mutations[command.mutation_id].replay(command)
        step("fence")
        check_fence(command, fence)
        current = state.step_runs.get(command.step_run_id) if isinstance(command, TransitionStepRun) else None
        count = len(state.by_run.get(run.id, ()))
        decision = decide(command, fence, current, count, at_ms=at_ms, new_id=new_id)
        for name in ("write_step_run", "advance_run", "append_event"):
            step(name)
        store.apply(ChangeSet(run=run.evolve(version=decision.run_version, event_sequence=decision.event_sequence),
                              expected_version=run.version, attempt_writes=(), events=(decision.event,)))
        step("append_ledger")
        step("commit")
        created = decision.step_run
        if decision.expected is None:
            state.by_run.setdefault(run.id, []).append(created.id)
        state.step_runs[created.id] = created
        state.mutations[command.mutation_id] = decision.ledger
        return decision.result()

    def get(self, step_run_id: str) -> StepRun | None:
        return self._uow.read(lambda _store: self._state.step_runs.get(step_run_id))

    def get_mutation(self, mutation_id: str) -> MutationRecord | None:
        return self._uow.read(lambda _store: self._state.mutations.get(mutation_id))

    def page(self, run_id: str, after: tuple[int, str] | None, limit: int) -> StepRunPage:
        def work(store: InMemoryRunStore) -> StepRunPage:
            if store.get_run(run_id) is None:
                raise RunNotFoundError(run_id)
            ordered = sorted((self._state.step_runs[i] for i in self._state.by_run.get(run_id, ())),
                             key=lambda s: (s.created_at_ms, s.id))
            rest = [s for s in ordered if after is None or (s.created_at_ms, s.id) > after]
            page = tuple(rest[:limit])
            return StepRunPage(page, (page[-1].created_at_ms, page[-1].id) if len(rest) > limit and page else None)

        return self._uow.read(work)
