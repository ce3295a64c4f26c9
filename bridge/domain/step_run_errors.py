"""The errors of the StepRun aggregate (docs/stepruns.md), each with a stable ``code``; they sit beside the Run's.

    BridgeError
    ├── StepRunNotFoundError             STEP_RUN_NOT_FOUND
    ├── StepRunValidationError           STEP_RUN_INVALID
    ├── InvalidStepRunTransitionError    INVALID_STEP_RUN_TRANSITION
    ├── StepRunVersionConflictError      STEP_RUN_VERSION_CONFLICT
    ├── StepMutationConflictError        STEP_MUTATION_CONFLICT
    ├── StepRunLimitError                STEP_RUN_LIMIT_REACHED
    ├── StepAttemptLimitError            STEP_ATTEMPT_LIMIT_REACHED
    ├── RunTerminalError                 RUN_TERMINAL
    ├── RunVersionConflictError          RUN_VERSION_CONFLICT      (bridge.domain.errors)
    │   └── RunFenceConflictError        RUN_VERSION_CONFLICT      the Run's version and Event sequence
    └── StorageError                                               (bridge.domain.errors)
        └── StepRunIntegrityError        STEP_RUN_INTEGRITY        a stored record whose digest does not match

Every refusal writes nothing: the mutation's transaction is rolled back whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.domain.errors import BridgeError, RunVersionConflictError, StorageError


class StepRunNotFoundError(BridgeError):
    code = "STEP_RUN_NOT_FOUND"

    def __init__(self, step_run_id: str, run_id: str | None = None) -> None:
        where = f" in run {run_id}" if run_id is not None else ""
        super().__init__(f"step run {step_run_id} does not exist{where}", step_run_id=step_run_id, run_id=run_id)


class StepRunValidationError(BridgeError):
    """A StepRun record or mutation field that the v1 contract refuses (never echoes the refused value)."""

    code = "STEP_RUN_INVALID"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"step run field {field!r} {reason}", field=field, reason=reason)


class InvalidStepRunTransitionError(BridgeError):
    code = "INVALID_STEP_RUN_TRANSITION"

    def __init__(self, step_run_id: str, from_status: str, to_status: str) -> None:
        super().__init__(f"step run {step_run_id} cannot go from {from_status} to {to_status}",
                         step_run_id=step_run_id, **{"from": from_status, "to": to_status})


class StepRunVersionConflictError(BridgeError):
    """The StepRun's version, digest or status is not what the transition expected."""

    code = "STEP_RUN_VERSION_CONFLICT"

    def __init__(self, step_run_id: str, expected: Mapping[str, Any], current: Mapping[str, Any]) -> None:
        super().__init__(
            f"step run {step_run_id} is at version {current.get('version')} ({current.get('status')}), "
            f"not {expected.get('version')} ({expected.get('status')})",
            step_run_id=step_run_id, expected=dict(expected), current=dict(current))


class StepMutationConflictError(BridgeError):
    """A mutation id already committed for a different request: fails closed, writes nothing."""

    code = "STEP_MUTATION_CONFLICT"

    def __init__(self, mutation_id: str) -> None:
        super().__init__(f"mutation {mutation_id} was already committed for a different request",
                         mutation_id=mutation_id)


class StepRunLimitError(BridgeError):
    code = "STEP_RUN_LIMIT_REACHED"

    def __init__(self, run_id: str, limit: int) -> None:
        super().__init__(f"run {run_id} already has {limit} step runs, the most a run may have",
                         run_id=run_id, limit=limit)


class StepAttemptLimitError(BridgeError):
    code = "STEP_ATTEMPT_LIMIT_REACHED"

    def __init__(self, step_run_id: str, limit: int) -> None:
        super().__init__(f"step run {step_run_id} already ran {limit} attempts, the most a step run may have",
                         step_run_id=step_run_id, limit=limit)


class RunTerminalError(BridgeError):
    """The Run has ended (docs/run-state.md#terminal-runs-and-retries: terminal is immutable), so none of its StepRuns
    may change."""

    code = "RUN_TERMINAL"

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is {status}; a terminal run takes no step run mutation",
                         run_id=run_id, status=status)


class RunFenceConflictError(RunVersionConflictError):
    """The Run's version or Event sequence moved since the caller read them (the mutation's fence)."""

    code = "RUN_VERSION_CONFLICT"

    def __init__(self, run_id: str, expected: tuple[int, int], current: tuple[int, int]) -> None:
        super().__init__(run_id, expected[0], current[0])
        self.message = (f"run {run_id} is at version {current[0]} / event {current[1]}, "
                        f"not {expected[0]} / {expected[1]}")
        self.args = (self.message,)
        self.details.update(expected_event_sequence=expected[1], current_event_sequence=current[1])


class StepRunIntegrityError(StorageError):
    """A stored StepRun record does not hash to its digest, or breaks the v1 contract: the store was altered."""

    code = "STEP_RUN_INTEGRITY"

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"stored step run record {where} fails its integrity check: {reason}",
                         where=where, reason=reason)
