"""StepRunService: the one write path of StepRuns (docs/stepruns.md). Thin: it stamps the time and supplies the ids; the
repository runs the whole mutation as one transaction of the Run aggregate, with replay and fences.

Storage capability only (docs/run-state.md#storage-capability-only): nothing here executes a step, and pyproject's
import-linter contract keeps the callback path, the jobs and the web layer from importing this module.
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.domain.errors import RunVersionConflictError
from bridge.domain.step_run import StepRun
from bridge.domain.step_run_errors import StepRunNotFoundError, StepRunVersionConflictError
from bridge.domain.step_run_mutation import (
    CreateStepRun,
    MutationRecord,
    MutationResult,
    StepRunMutation,
    TransitionStepRun,
)
from bridge.service.ids import new_id
from bridge.service.ports import Clock, NullMetrics, ServiceMetrics, StepRunPage, StepRunRepository


class StepRunService:
    def __init__(self, repository: StepRunRepository, *, clock: Clock, id_factory: Callable[[], str] = new_id,
                 metrics: ServiceMetrics | None = None) -> None:
        self._repository = repository
        self._clock = clock
        self._new_id = id_factory
        self._metrics = metrics or NullMetrics()

    def create_step_run(self, cmd: CreateStepRun) -> MutationResult:
        """Add a pending StepRun to the Run. Raises what StepRunRepository.mutate raises."""
        return self._mutate(cmd, "create_step_run")

    def transition_step_run(self, cmd: TransitionStepRun) -> MutationResult:
        """Move a StepRun (compare-and-set on version, digest and status). Raises what mutate raises."""
        return self._mutate(cmd, "transition_step_run")

    def _mutate(self, cmd: StepRunMutation, command: str) -> MutationResult:
        try:
            return self._repository.mutate(cmd, at_ms=self._clock.now_ms(), new_id=self._new_id)
        except (RunVersionConflictError, StepRunVersionConflictError):
            self._metrics.conflict(command)
            raise

    def get_step_run(self, step_run_id: str) -> StepRun:
        """Raises StepRunNotFoundError."""
        step_run = self._repository.get(step_run_id)
        if step_run is None:
            raise StepRunNotFoundError(step_run_id)
        return step_run

    def get_mutation(self, mutation_id: str) -> MutationRecord | None:
        return self._repository.get_mutation(mutation_id)

    def list_step_runs(self, run_id: str, after: tuple[int, str] | None = None, limit: int = 50) -> StepRunPage:
        """A keyset page, oldest first. Raises RunNotFoundError."""
        return self._repository.page(run_id, after, limit)
