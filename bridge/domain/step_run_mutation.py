"""StepRun mutations (docs/run-state.md#steprun-mutations): the commands, their request digest, and the pure decision of
one mutation.

A mutation is part of the Run aggregate. Every store runs it as one short transaction in MUTATION_STEPS
order and asks ``decide`` for the outcome between reading and writing; nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.domain.events import DEFAULT_PAYLOAD_CAP_BYTES, Actor, EventType, RunEvent
from bridge.domain.model import RUN_TERMINAL, RunStatus
from bridge.domain.step_run import (
    STEP_ATTEMPT_LIMIT,
    STEP_RUN_ERROR_STATUSES,
    STEP_RUN_LIMIT,
    STEP_RUN_TERMINAL,
    StepRun,
    StepRunKind,
    StepRunStatus,
    canonical_json,
    check_pattern,
    check_ref,
    check_step_key,
    sha256_hex,
    step_run_can_go,
)
from bridge.domain.step_run_errors import (
    InvalidStepRunTransitionError,
    RunFenceConflictError,
    RunTerminalError,
    StepAttemptLimitError,
    StepMutationConflictError,
    StepRunLimitError,
    StepRunNotFoundError,
    StepRunValidationError,
    StepRunVersionConflictError,
)

# The steps of one mutation's transaction, in order (docs/run-state.md#steprun-mutations). Stores name them to a
# failure-injection hook.
MUTATION_STEPS = ("serialise", "replay", "fence", "write_step_run", "advance_run", "append_event",
                  "append_ledger", "commit")
MUTATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
# What a step_run.* event may say: identities, statuses, counters and the digest; never content.
STEP_RUN_EVENT_FIELDS = frozenset({"mutation_id", "kind", "from", "to", "version", "attempt_count", "digest",
                                   "error_code"})


@dataclass(frozen=True, slots=True)
class RunFence:
    """The Run as the mutation's transaction read it, after serialising on it."""

    run_id: str
    status: RunStatus
    version: int
    event_sequence: int


@dataclass(frozen=True, slots=True)
class CreateStepRun:
    """Add a StepRun (status pending) to a Run whose version and Event sequence are still the expected ones."""

    mutation_id: str
    run_id: str
    step_key: str
    kind: StepRunKind
    expected_run_version: int
    expected_event_sequence: int
    actor: Actor
    input_ref: str | None = None

    def request(self) -> dict[str, Any]:
        """What makes two deliveries "the same request" (the actor is not part of it, as for create_run)."""
        return {"op": "create", "run_id": self.run_id, "step_key": self.step_key, "kind": self.kind.value,
                "input_ref": self.input_ref, "expected_run_version": self.expected_run_version,
                "expected_event_sequence": self.expected_event_sequence}


@dataclass(frozen=True, slots=True)
class TransitionStepRun:
    """Move a StepRun, compare-and-set on its version, digest and status, under the Run's fence."""

    mutation_id: str
    run_id: str
    step_run_id: str
    to: StepRunStatus
    expected_run_version: int
    expected_event_sequence: int
    expected_version: int
    expected_digest: str
    expected_status: StepRunStatus
    actor: Actor
    input_ref: str | None = None  # write-once: set only while the StepRun has none
    output_ref: str | None = None  # write-once
    error_code: str | None = None

    def request(self) -> dict[str, Any]:
        return {"op": "transition", "run_id": self.run_id, "step_run_id": self.step_run_id, "to": self.to.value,
                "expected_run_version": self.expected_run_version,
                "expected_event_sequence": self.expected_event_sequence, "expected_version": self.expected_version,
                "expected_digest": self.expected_digest, "expected_status": self.expected_status.value,
                "input_ref": self.input_ref, "output_ref": self.output_ref, "error_code": self.error_code}


StepRunMutation = CreateStepRun | TransitionStepRun


def request_digest(command: StepRunMutation) -> str:
    """SHA-256 of the request's canonical JSON: an exact replay is the same mutation id with this digest."""
    return sha256_hex(canonical_json({"mutation_id": command.mutation_id, **command.request()}))


def validate(command: StepRunMutation) -> None:
    """Refuse a malformed mutation before any transaction opens. Raises StepRunValidationError."""
    check_pattern("mutation_id", command.mutation_id, MUTATION_ID, "1-128 letters, digits and . _ : -")
    for name in ("expected_run_version", "expected_event_sequence"):
        value = getattr(command, name)
        if type(value) is not int or value < 0:
            raise StepRunValidationError(name, "must be a whole number")
    check_ref("input_ref", command.input_ref)
    if isinstance(command, CreateStepRun):
        check_step_key(command.step_key)
        if not isinstance(command.kind, StepRunKind):
            raise StepRunValidationError("kind", "must be one of the v1 kinds")
        return
    check_ref("output_ref", command.output_ref)
    if not isinstance(command.to, StepRunStatus) or not isinstance(command.expected_status, StepRunStatus):
        raise StepRunValidationError("to", "must be one of the v1 statuses")
    if command.error_code is not None and command.to not in STEP_RUN_ERROR_STATUSES:
        raise StepRunValidationError("error_code", f"is not taken by a move to {command.to.value}")


@dataclass(frozen=True, slots=True)
class MutationResult:
    """What a mutation committed: the StepRun, the Run's version and Event sequence right after it.

    ``applied`` is False for an exact replay, which wrote nothing and returns what was committed then.
    """

    mutation_id: str
    step_run: StepRun
    run_version: int
    event_sequence: int
    applied: bool


@dataclass(frozen=True, slots=True)
class MutationRecord:
    """One immutable row of the mutation ledger (``step_run_mutations``)."""

    mutation_id: str
    op: str  # "create" | "transition"
    run_id: str
    step_run_id: str
    request_digest: str
    step_run: StepRun  # the result, as committed
    run_version: int
    event_sequence: int
    event_id: str
    created_at_ms: int

    def replay(self, command: StepRunMutation) -> MutationResult:
        """The committed result again. Raises StepMutationConflictError if ``command`` is another request."""
        if request_digest(command) != self.request_digest:
            raise StepMutationConflictError(command.mutation_id)
        return MutationResult(self.mutation_id, self.step_run, self.run_version, self.event_sequence, False)


@dataclass(frozen=True, slots=True)
class StepRunDecision:
    """Everything one mutation writes: the StepRun (insert, or CAS on ``expected``), the Run's new counters,
    the event and the ledger row."""

    step_run: StepRun
    expected: StepRun | None  # None: insert
    run_version: int
    event_sequence: int
    event: RunEvent
    ledger: MutationRecord

    def result(self) -> MutationResult:
        return MutationResult(self.ledger.mutation_id, self.step_run, self.run_version, self.event_sequence, True)


def check_fence(command: StepRunMutation, fence: RunFence) -> None:
    """Raises RunFenceConflictError if the Run moved, RunTerminalError if it has ended."""
    expected = (command.expected_run_version, command.expected_event_sequence)
    current = (fence.version, fence.event_sequence)
    if expected != current:
        raise RunFenceConflictError(fence.run_id, expected, current)
    if fence.status in RUN_TERMINAL:
        raise RunTerminalError(fence.run_id, fence.status.value)


def decide(command: StepRunMutation, fence: RunFence, current: StepRun | None, step_run_count: int, *,
           at_ms: int, new_id: Callable[[], str]) -> StepRunDecision:
    """The outcome of a mutation that is not a replay, after the fence was checked (``check_fence``).

    ``current`` is the StepRun named by a transition (None if there is none in this Run); ``step_run_count``
    how many StepRuns the Run has. Raises StepRunLimitError, StepRunNotFoundError,
    StepRunVersionConflictError, InvalidStepRunTransitionError, StepAttemptLimitError,
    StepRunValidationError.
    """
    if isinstance(command, CreateStepRun):
        if step_run_count >= STEP_RUN_LIMIT:
            raise StepRunLimitError(command.run_id, STEP_RUN_LIMIT)
        step_run, expected = StepRun(
            id=new_id(), run_id=command.run_id, step_key=command.step_key, kind=command.kind,
            status=StepRunStatus.PENDING, version=0, attempt_count=0, created_at_ms=at_ms, updated_at_ms=at_ms,
            input_ref=command.input_ref), None
        payload: dict[str, Any] = {"kind": step_run.kind.value, "to": step_run.status.value}
    else:
        step_run, expected = _moved(command, current, at_ms), current
        payload = {"from": command.expected_status.value, "to": step_run.status.value,
                   "attempt_count": step_run.attempt_count}
        if step_run.error_code is not None:
            payload["error_code"] = step_run.error_code
    payload.update(mutation_id=command.mutation_id, version=step_run.version, digest=step_run.digest)
    sequence = fence.event_sequence + 1
    event = RunEvent(
        id=new_id(), run_id=fence.run_id, sequence=sequence,
        type=EventType.STEP_RUN_CREATED if expected is None else EventType.STEP_RUN_TRANSITIONED,
        actor_type=command.actor.type, actor_id=command.actor.id, created_at_ms=at_ms,
        payload=step_event_payload(payload), dedupe_key=f"step-mutation:{command.mutation_id}",
        step_run_id=step_run.id)
    ledger = MutationRecord(
        mutation_id=command.mutation_id, op="create" if expected is None else "transition", run_id=fence.run_id,
        step_run_id=step_run.id, request_digest=request_digest(command), step_run=step_run,
        run_version=fence.version + 1, event_sequence=sequence, event_id=event.id, created_at_ms=at_ms)
    return StepRunDecision(step_run, expected, fence.version + 1, sequence, event, ledger)


def _moved(command: TransitionStepRun, current: StepRun | None, at_ms: int) -> StepRun:
    if current is None or current.run_id != command.run_id:
        raise StepRunNotFoundError(command.step_run_id, command.run_id)
    seen = (current.version, current.digest, current.status)
    if seen != (command.expected_version, command.expected_digest, command.expected_status):
        raise StepRunVersionConflictError(
            current.id,
            {"version": command.expected_version, "digest": command.expected_digest,
             "status": command.expected_status.value},
            {"version": current.version, "digest": current.digest, "status": current.status.value})
    if not step_run_can_go(current.status, command.to):
        raise InvalidStepRunTransitionError(current.id, current.status.value, command.to.value)
    changes: dict[str, Any] = {"status": command.to, "version": current.version + 1,
                               "updated_at_ms": max(at_ms, current.updated_at_ms), "error_code": command.error_code}
    if command.to is StepRunStatus.RUNNING:
        if current.attempt_count >= STEP_ATTEMPT_LIMIT:
            raise StepAttemptLimitError(current.id, STEP_ATTEMPT_LIMIT)
        changes["attempt_count"] = current.attempt_count + 1
        if current.started_at_ms is None:
            changes["started_at_ms"] = changes["updated_at_ms"]
    if command.to in STEP_RUN_TERMINAL:
        changes["finished_at_ms"] = changes["updated_at_ms"]
    for name in ("input_ref", "output_ref"):
        given = getattr(command, name)
        if given is not None and given != getattr(current, name):
            if getattr(current, name) is not None:
                raise StepRunValidationError(name, "is write-once and is already set")
            changes[name] = given
    return current.evolve(**changes)


def step_event_payload(payload: Mapping[str, Any], cap_bytes: int = DEFAULT_PAYLOAD_CAP_BYTES) -> dict[str, Any]:
    """The allowlisted, size-capped payload of a step_run.* event. Raises StepRunValidationError."""
    for key in payload:
        if key not in STEP_RUN_EVENT_FIELDS:
            raise StepRunValidationError(str(key), "is not an allowlisted step run event field")
    if len(canonical_json(payload).encode("utf-8")) > cap_bytes:
        raise StepRunValidationError("payload", f"is over the {cap_bytes}-byte cap")
    return dict(payload)
