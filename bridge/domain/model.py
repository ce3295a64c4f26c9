"""Run and RunAttempt: statuses, the allowed-transition tables (docs/run-state.md#run-statuses-and-transitions,
#attempt-statuses-and-transitions) and the records.

The tables are data: one mapping drives validation, the property tests and the docs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

from bridge.domain.keys import task_id


class RunStatus(StrEnum):
    CREATED = "created"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    # The execution finished and nobody reported how (docs/run-state.md#outcome-not-reported): 2.x's end
    # callback carried no exit code. Never counted as a success or a failure.
    ENDED = "ended"


class AttemptStatus(StrEnum):
    CLAIMED = "claimed"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    ENDED = "ended"  # finished, outcome not reported (docs/run-state.md#outcome-not-reported)


_R = RunStatus
RUN_TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    _R.CREATED: frozenset({_R.QUEUED, _R.CANCELLED}),
    _R.QUEUED: frozenset({_R.DISPATCHING, _R.CANCELLED, _R.TIMED_OUT}),
    _R.DISPATCHING: frozenset({_R.RUNNING, _R.RETRY_WAIT, _R.FAILED, _R.CANCELLED, _R.LOST}),
    _R.RUNNING: frozenset({_R.WAITING_APPROVAL, _R.RETRY_WAIT, _R.SUCCEEDED, _R.FAILED, _R.ENDED,
                           _R.CANCELLED, _R.TIMED_OUT, _R.LOST}),
    _R.WAITING_APPROVAL: frozenset({_R.RUNNING, _R.CANCELLED, _R.TIMED_OUT}),
    _R.RETRY_WAIT: frozenset({_R.QUEUED, _R.CANCELLED, _R.TIMED_OUT}),
    _R.LOST: frozenset({_R.QUEUED, _R.FAILED, _R.CANCELLED}),
    _R.SUCCEEDED: frozenset(),
    _R.FAILED: frozenset(),
    _R.CANCELLED: frozenset(),
    _R.TIMED_OUT: frozenset(),
    _R.ENDED: frozenset(),
}
RUN_TERMINAL: frozenset[RunStatus] = frozenset({_R.SUCCEEDED, _R.FAILED, _R.CANCELLED, _R.TIMED_OUT, _R.ENDED})

_A = AttemptStatus
ATTEMPT_TRANSITIONS: Mapping[AttemptStatus, frozenset[AttemptStatus]] = {
    _A.CLAIMED: frozenset({_A.STARTING, _A.CANCELLED, _A.LOST}),
    _A.STARTING: frozenset({_A.RUNNING, _A.FAILED, _A.CANCELLED, _A.TIMED_OUT, _A.LOST}),
    _A.RUNNING: frozenset({_A.SUCCEEDED, _A.FAILED, _A.ENDED, _A.CANCELLED, _A.TIMED_OUT, _A.LOST}),
    _A.SUCCEEDED: frozenset(),
    _A.FAILED: frozenset(),
    _A.CANCELLED: frozenset(),
    _A.TIMED_OUT: frozenset(),
    _A.LOST: frozenset(),
    _A.ENDED: frozenset(),
}
# docs/run-state.md#attempt-statuses-and-transitions: every one of these is immutable, lost included (a Run may add a
# new Attempt after it).
ATTEMPT_TERMINAL: frozenset[AttemptStatus] = frozenset(
    s for s, targets in ATTEMPT_TRANSITIONS.items() if not targets
)
# A Run counts as active (it may still change what 2.x shows) while it is not terminal.
RUN_ACTIVE: frozenset[RunStatus] = frozenset(set(RunStatus) - RUN_TERMINAL)
# An Attempt is active (its process may exist) until it reaches a terminal status.
ATTEMPT_ACTIVE: frozenset[AttemptStatus] = frozenset(set(AttemptStatus) - ATTEMPT_TERMINAL)
# Terminal statuses that say how the execution finished. ``ended`` is the one that does not: a comparison with
# 2.x's outcome (reconcile, the report, the gates) counts it as unknown, neither agreement nor disagreement.
RUN_OUTCOME_KNOWN: frozenset[RunStatus] = frozenset(RUN_TERMINAL - {_R.ENDED})


def outcome_unreported(status: RunStatus) -> bool:
    """The Run ended and nobody reported how (docs/run-state.md#outcome-not-reported): its status and exit code
    are unknown, never set beside 2.x's as an agreement or a disagreement."""
    return status in RUN_TERMINAL and status not in RUN_OUTCOME_KNOWN


def run_can_go(from_status: RunStatus, to_status: RunStatus) -> bool:
    return to_status in RUN_TRANSITIONS[from_status]


def attempt_can_go(from_status: AttemptStatus, to_status: AttemptStatus) -> bool:
    return to_status in ATTEMPT_TRANSITIONS[from_status]


class Owner(StrEnum):
    """Who answers the shell for an execution; fixed when the execution is accepted."""

    LEGACY = "legacy"
    BRIDGE = "bridge"


class Mode(StrEnum):
    OFF = "off"
    SHADOW = "shadow"
    PRIMARY = "primary"


class RunMode(StrEnum):
    """Run.mode: how the bridge stood to the execution when it recorded the Run."""

    SHADOW = "shadow"  # 2.x answered the shell; the Run shadows it
    PRIMARY = "primary"  # the bridge answered the shell
    IMPORTED = "legacy_import"  # history read from 2.x's tables: read-only, never compared, never retried


IMPORTED_MODE = RunMode.IMPORTED.value  # as the store holds it
# Run.trigger_type of a 2.x execution: recorded from its shell's callbacks, or read from 2.x's tables by the import.
CALLBACK_TRIGGER = "legacy_callback"
IMPORT_TRIGGER = "legacy_import"


# The project every Run of a 2.x execution lives in (shadow, primary and imported alike): 2.x has no projects.
PROJECT_ID = "default"


class Origin(StrEnum):
    MANUAL = "manual"
    BOOT = "boot"
    SCHEDULED_NODE = "scheduled_node"
    SCHEDULED_SYSTEM = "scheduled_system"
    SCRIPT = "script"
    SUBSCRIPTION = "subscription"
    SYSTEM = "system"


@dataclass(frozen=True, slots=True)
class Run:
    """One user-visible execution (the aggregate root); ``version`` guards every change."""

    id: str
    project_id: str
    task_id: str
    task_revision: str
    trigger_type: str
    status: RunStatus
    version: int
    event_sequence: int
    created_at_ms: int
    priority: int = 0
    legacy_cron_id: int | None = None
    parent_run_id: str | None = None
    retry_of_run_id: str | None = None
    trigger_id: str | None = None
    idempotency_key: str | None = None
    request_fingerprint: str | None = None
    input_ref: str | None = None
    output_ref: str | None = None
    queued_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    cancel_requested_at_ms: int | None = None
    cancel_reason: str | None = None
    error_code: str | None = None
    error_summary: str | None = None
    origin: Origin | None = None
    origin_evidence: str | None = None
    mode: RunMode | None = None
    owner: Owner | None = None
    legacy_pid: int | None = None
    log_ref: str | None = None
    synthesized: bool = False
    received_at_ms: int | None = None
    duration_ms: int | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in RUN_TERMINAL

    def evolve(self, **changes: Any) -> Run:
        return replace(self, **changes)


_E = TypeVar("_E", bound=StrEnum)


def member(kind: type[_E], value: str | None) -> _E | None:
    """``value`` (a stored or inferred text, or already a member) as a member of ``kind``; None stays None.
    Raises ValueError for a text that is no member."""
    return None if value is None else kind(value)


def new_legacy_run(*, run_id: str, cron_id: int, task_revision: str, trigger_type: str, created_at_ms: int,
                   idempotency_key: str, origin: str | None, origin_evidence: str, mode: str, owner: str,
                   legacy_pid: int | None, log_ref: str | None, synthesized: bool,
                   received_at_ms: int | None = None) -> Run:
    """The Run of one 2.x execution as it is created (before the ladder takes it up): in the 2.x project, on
    the cron's task, at version 0 with no events yet. Origin, mode and owner become their enums here."""
    return Run(
        id=run_id, project_id=PROJECT_ID, task_id=task_id(cron_id), task_revision=task_revision,
        trigger_type=trigger_type, status=RunStatus.CREATED, version=0, event_sequence=0,
        created_at_ms=created_at_ms, legacy_cron_id=cron_id, idempotency_key=idempotency_key,
        origin=member(Origin, origin), origin_evidence=origin_evidence, mode=RunMode(mode), owner=Owner(owner),
        legacy_pid=legacy_pid, log_ref=log_ref, synthesized=synthesized, received_at_ms=received_at_ms,
    )


@dataclass(frozen=True, slots=True)
class RunAttempt:
    """One dispatch of a Run to an executor; terminal attempts never change again."""

    id: str
    run_id: str
    attempt: int
    status: AttemptStatus
    executor_type: str
    callback_sequence: int
    created_at_ms: int
    step_run_id: str | None = None
    worker_id: str | None = None
    executor_handle: str | None = None
    pid: int | None = None
    log_artifact_id: str | None = None
    lease_token: str | None = None
    lease_expires_at_ms: int | None = None
    deadline_at_ms: int | None = None
    callback_token_hash: str | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    exit_code: int | None = None
    error_code: str | None = None
    error_summary: str | None = None
    synthesized: bool = False
    legacy_log_path: str | None = None  # primary mode only: what the 2.x projection writes back

    @property
    def is_terminal(self) -> bool:
        return self.status in ATTEMPT_TERMINAL

    def evolve(self, **changes: Any) -> RunAttempt:
        return replace(self, **changes)
