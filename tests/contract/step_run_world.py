"""Builders for the StepRun contract tests: a repository on any backend, Runs made by RunService, and mutations
that read the Run's current fence the way a caller would."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from bridge.domain.events import RunEvent
from bridge.domain.model import Run, RunStatus
from bridge.domain.step_run import StepRun, StepRunKind, StepRunStatus
from bridge.domain.step_run_mutation import CreateStepRun, MutationResult, TransitionStepRun
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.step_runs import StepRunService
from bridge.storage.step_runs import SqlStepRunRepository
from bridge.storage.step_runs_memory import InMemoryStepRunRepository
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR, create, move

_mutation_ids = itertools.count(1)


def mutation_id() -> str:
    return f"mutation-{next(_mutation_ids)}"


class InjectedFailure(Exception):
    """Raised by a checkpoint to fail a mutation at one of its steps."""


@dataclass
class Faults:
    """The repository's checkpoint: records each step it passes and fails at ``fail_at``."""

    fail_at: str | None = None
    passed: list[str] = field(default_factory=list)

    def __call__(self, step: str) -> None:
        self.passed.append(step)
        if step == self.fail_at:
            raise InjectedFailure(step)


def repository_for(backend: Backend, checkpoint: Callable[[str], None] | None = None) -> Any:
    if backend.engine is None:
        return InMemoryStepRunRepository(backend.uow, checkpoint=checkpoint)  # type: ignore[arg-type]
    return SqlStepRunRepository(backend.engine, checkpoint=checkpoint)


@dataclass
class World:
    backend: Backend
    runs: RunService
    repository: Any
    faults: Faults
    issued: list[str] = field(default_factory=list)  # every mutation id this world built

    def _issue(self, given: str | None) -> str:
        self.issued.append(given or mutation_id())
        return self.issued[-1]

    @property
    def steps(self) -> StepRunService:
        return StepRunService(self.repository, clock=SystemClock())

    def run(self, status: RunStatus = RunStatus.CREATED) -> Run:
        run = create(self.runs)
        for to in {RunStatus.CREATED: (), RunStatus.QUEUED: (RunStatus.QUEUED,),
                   RunStatus.CANCELLED: (RunStatus.CANCELLED,)}[status]:
            run = move(self.runs, run, to)
        return run

    def creation(self, run_id: str, key: str = "step", kind: StepRunKind = StepRunKind.TASK, *,
                 mutation: str | None = None, fence: tuple[int, int] | None = None, **kw: Any) -> CreateStepRun:
        version, sequence = fence or self.fence(run_id)
        return CreateStepRun(self._issue(mutation), run_id, key, kind, version, sequence, ACTOR, **kw)

    def transition(self, step: StepRun, to: StepRunStatus, *, mutation: str | None = None,
                   fence: tuple[int, int] | None = None, **kw: Any) -> TransitionStepRun:
        version, sequence = fence or self.fence(step.run_id)
        return TransitionStepRun(self._issue(mutation), step.run_id, step.id, to, version, sequence,
                                 step.version, step.digest, step.status, ACTOR, **kw)

    def create(self, run_id: str, key: str = "step", **kw: Any) -> MutationResult:
        return self.steps.create_step_run(self.creation(run_id, key, **kw))

    def move(self, step: StepRun, to: StepRunStatus, **kw: Any) -> StepRun:
        return self.steps.transition_step_run(self.transition(step, to, **kw)).step_run

    def fence(self, run_id: str) -> tuple[int, int]:
        run = self.runs.get_run(run_id)
        return run.version, run.event_sequence

    def events(self, run_id: str) -> list[RunEvent]:
        return list(self.runs.list_events(run_id, 0, 10_000).events)

    def snapshot(self, run_id: str) -> tuple[Any, ...]:
        """Everything a mutation of this Run could write: the Run, its events, its StepRuns, ledger rows."""
        page = self.repository.page(run_id, None, 1000)
        ledger = [self.repository.get_mutation(m) for m in dict.fromkeys(self.issued)]
        return (self.runs.get_run(run_id), self.events(run_id), page.step_runs,
                [m for m in ledger if m is not None and m.run_id == run_id])

    def sql(self, statement: str, **params: Any) -> list[Any]:
        """Raw SQL on its own transaction, bypassing the repository."""
        assert self.backend.engine is not None
        with self.backend.engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []


def world_for(backend: Backend) -> World:
    faults = Faults()
    return World(backend, RunService(backend.uow, clock=SystemClock()),  # type: ignore[arg-type]
                 repository_for(backend, faults), faults)
