"""Imperative commands on one Run, and the pure rules that decide each of them.

A rule reads what the caller loaded (the Run in a RunChange, its Attempts) and adds the command's steps to
the RunChange, or raises; nothing here does I/O. Carrying a command out in one transaction is the caller's
part: RunService.change / transaction, the one write API.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bridge.domain.aggregate import RunChange
from bridge.domain.errors import (
    AttemptConflictError,
    IdempotencyKeyConflictError,
    InvalidRunTransitionError,
    RetryNotAllowedError,
)
from bridge.domain.events import Actor, EventType
from bridge.domain.model import (
    IMPORTED_MODE,
    AttemptStatus,
    Origin,
    Owner,
    Run,
    RunAttempt,
    RunMode,
    RunStatus,
    member,
)

# Statuses a user may retry by creating a new Run (docs/run-state.md#terminal-runs-and-retries).
RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT})
CANCEL_REASON_MAX = 200
RETRY_TRIGGER = "manual_retry"  # Run.trigger_type of a Run retrying another


@dataclass(frozen=True, slots=True)
class CreateRun:
    project_id: str
    task_id: str
    task_revision: str
    trigger_type: str
    actor: Actor
    idempotency_key: str | None = None
    legacy_cron_id: int | None = None
    trigger_id: str | None = None
    parent_run_id: str | None = None
    priority: int = 0
    origin: str | None = None
    mode: str | None = None
    owner: str | None = None
    retry_of_run_id: str | None = None  # a manual retry (retry_of); not part of the request fingerprint


@dataclass(frozen=True, slots=True)
class TransitionRun:
    run_id: str
    to: RunStatus
    expected_version: int
    actor: Actor
    dedupe_key: str | None = None
    error_code: str | None = None
    error_summary: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def replay_key(self) -> str:
        """The dedupe key a repeat of this command is known by: the caller's, else version and target."""
        return self.dedupe_key or f"run-transition:{self.expected_version}:{self.to.value}"


@dataclass(frozen=True, slots=True)
class CreateAttempt:
    run_id: str
    expected_version: int
    actor: Actor
    executor_type: str = "local_process"
    pid: int | None = None
    dedupe_key: str | None = None


@dataclass(frozen=True, slots=True)
class TransitionAttempt:
    """Move an Attempt; CAS on (id, expected status, expected callback_sequence) and the Run version.

    ``run_to`` moves the Run in the same transaction (for example attempt succeeded + run succeeded,
    or attempt failed + run retry_wait for an automatic retry).
    """

    run_id: str
    attempt_id: str
    to: AttemptStatus
    expected_version: int
    expected_status: AttemptStatus
    expected_callback_sequence: int
    actor: Actor
    run_to: RunStatus | None = None
    exit_code: int | None = None
    error_code: str | None = None
    pid: int | None = None
    dedupe_key: str | None = None

    @property
    def replay_key(self) -> str:
        """The dedupe key a repeat of this command is known by: the caller's, else the Attempt's CAS and target."""
        return self.dedupe_key or \
            f"attempt-transition:{self.attempt_id}:{self.expected_callback_sequence}:{self.to.value}"


@dataclass(frozen=True, slots=True)
class RetryRun:
    """Manual retry: a new Run that points at a failed, cancelled or timed-out one."""

    run_id: str
    actor: Actor
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class RequestCancel:
    run_id: str
    actor: Actor
    reason: str = "cancelled_by_user"


class CancelOutcome(StrEnum):
    REQUESTED = "requested"
    ALREADY_REQUESTED = "already_requested"
    ALREADY_TERMINAL = "already_terminal"


# --- CreateRun and RetryRun -----------------------------------------------------------------------------


def request_fingerprint(cmd: CreateRun) -> str:
    """What makes two create requests "the same request" for idempotency (the actor is not part of it)."""
    body: dict[str, Any] = {
        "task_id": cmd.task_id, "task_revision": cmd.task_revision, "trigger_type": cmd.trigger_type,
        "trigger_id": cmd.trigger_id, "parent_run_id": cmd.parent_run_id, "legacy_cron_id": cmd.legacy_cron_id,
        "priority": cmd.priority,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def new_run(cmd: CreateRun, *, run_id: str, at_ms: int) -> Run:
    """The Run a CreateRun opens: status created, version 0, carrying its request's fingerprint."""
    return Run(
        id=run_id, project_id=cmd.project_id, task_id=cmd.task_id, task_revision=cmd.task_revision,
        trigger_type=cmd.trigger_type, status=RunStatus.CREATED, version=0, event_sequence=0, created_at_ms=at_ms,
        priority=cmd.priority, legacy_cron_id=cmd.legacy_cron_id, trigger_id=cmd.trigger_id,
        parent_run_id=cmd.parent_run_id, retry_of_run_id=cmd.retry_of_run_id, idempotency_key=cmd.idempotency_key,
        request_fingerprint=request_fingerprint(cmd), origin=member(Origin, cmd.origin),
        mode=member(RunMode, cmd.mode), owner=member(Owner, cmd.owner),
    )


def created_payload(cmd: CreateRun) -> dict[str, Any] | None:
    """The ``run.created`` event's payload: the origin, when the request names one."""
    return {"origin": cmd.origin} if cmd.origin else None


def replayed(existing: Run, cmd: CreateRun) -> Run:
    """The Run an idempotency key already names is the answer to a repeat of its request.

    Raises IdempotencyKeyConflictError when that Run was created by a different request.
    """
    if existing.request_fingerprint is not None and existing.request_fingerprint != request_fingerprint(cmd):
        raise IdempotencyKeyConflictError(cmd.project_id, existing.id)
    return existing


def retry_of(source: Run, cmd: RetryRun) -> CreateRun:
    """The CreateRun of a manual retry: the source's task and placement, pointing back at it.

    Raises RetryNotAllowedError unless the source failed, was cancelled or timed out, and for imported
    history, which is read-only.
    """
    if source.status not in RETRYABLE or source.mode == IMPORTED_MODE:
        raise RetryNotAllowedError(source.id, source.status.value)
    return CreateRun(
        project_id=source.project_id, task_id=source.task_id, task_revision=source.task_revision,
        trigger_type=RETRY_TRIGGER, actor=cmd.actor, idempotency_key=cmd.idempotency_key,
        legacy_cron_id=source.legacy_cron_id, priority=source.priority, origin=source.origin,
        mode=source.mode, owner=source.owner, retry_of_run_id=source.id,
    )


# --- commands on an existing Run --------------------------------------------------------------------------


def move_run(change: RunChange, cmd: TransitionRun) -> RunStatus:
    """Move the Run as asked, keeping a given error code and summary. Raises InvalidRunTransitionError."""
    fields = {k: v for k, v in (("error_code", cmd.error_code), ("error_summary", cmd.error_summary)) if v}
    return change.move_run(cmd.to, payload=cmd.payload, **fields)


def add_attempt(change: RunChange, attempts: Sequence[RunAttempt], cmd: CreateAttempt,
                new_id: Callable[[], str]) -> RunAttempt:
    """Add the next Attempt, claimed, to a dispatching Run whose previous Attempt (if any) has ended.

    Raises AttemptConflictError while the previous Attempt is not terminal, InvalidRunTransitionError when
    the Run is not dispatching.
    """
    if attempts and not attempts[-1].is_terminal:
        raise AttemptConflictError(attempts[-1].id, "a terminal attempt", attempts[-1].status.value)
    if change.run.status is not RunStatus.DISPATCHING:
        raise InvalidRunTransitionError(cmd.run_id, change.run.status.value, "dispatching (new attempt)")
    return change.add_attempt(RunAttempt(
        id=new_id(), run_id=cmd.run_id, attempt=len(attempts) + 1, status=AttemptStatus.CLAIMED,
        executor_type=cmd.executor_type, callback_sequence=0, created_at_ms=change.at_ms, pid=cmd.pid,
    ))


def move_attempt(change: RunChange, attempt: RunAttempt | None, cmd: TransitionAttempt) -> RunAttempt:
    """Move the Attempt ``cmd`` names and, with ``run_to``, its Run (see run_target_after).

    Raises AttemptConflictError when the Attempt is missing, belongs to another Run, or is no longer at the
    expected status and callback_sequence; InvalidAttemptTransitionError / InvalidRunTransitionError for a
    move its state machine forbids.
    """
    if attempt is None or attempt.run_id != cmd.run_id:
        raise AttemptConflictError(cmd.attempt_id, cmd.expected_status.value, "missing")
    if (attempt.status, attempt.callback_sequence) != (cmd.expected_status, cmd.expected_callback_sequence):
        raise AttemptConflictError(attempt.id, f"{cmd.expected_status.value}#{cmd.expected_callback_sequence}",
                                   f"{attempt.status.value}#{attempt.callback_sequence}")
    fields = {k: v for k, v in (("exit_code", cmd.exit_code), ("error_code", cmd.error_code), ("pid", cmd.pid))
              if v is not None}
    payload = {} if cmd.exit_code is None else {"exit_code": cmd.exit_code}
    moved = change.move_attempt(attempt, cmd.to, payload=payload, **fields)
    if cmd.run_to is not None:
        error: dict[str, Any] = {"error_code": moved.error_code} if moved.error_code else {}
        change.move_run(run_target_after(moved.status, cmd.run_to), **error)
    return moved


def run_target_after(attempt_status: AttemptStatus, requested: RunStatus) -> RunStatus:
    """Where the Run goes after its Attempt ended: as requested, except that a cancel which converged the
    Attempt to cancelled takes the Run there too."""
    if attempt_status is AttemptStatus.CANCELLED and requested in (RunStatus.SUCCEEDED, RunStatus.FAILED,
                                                                   RunStatus.ENDED):
        return RunStatus.CANCELLED
    return requested


def request_cancel(change: RunChange, cmd: RequestCancel) -> CancelOutcome:
    """Durable cancellation (docs/run-state.md#durable-cancellation): record the request, before any signal, once.

    A terminal Run is left as it is, and so is a Run whose cancel was already requested.
    """
    run = change.run
    if run.is_terminal:
        return CancelOutcome.ALREADY_TERMINAL
    if run.cancel_requested_at_ms is not None:
        return CancelOutcome.ALREADY_REQUESTED
    reason = cmd.reason[:CANCEL_REASON_MAX]
    change.set_run_fields(cancel_requested_at_ms=change.at_ms, cancel_reason=reason)
    change.append(EventType.RUN_CANCEL_REQUESTED, {"cancel_reason": reason})
    return CancelOutcome.REQUESTED
