"""RunEvent: the append-only facts of a Run, its actors and error codes (docs/run-state.md#events,
#actors-and-error-codes).

Payloads are allowlisted and size-capped here, before anything reaches storage: an event never
carries commands, environment, log text or tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bridge.domain.errors import PayloadValidationError


class EventType(StrEnum):
    RUN_CREATED = "run.created"
    RUN_QUEUED = "run.queued"
    RUN_DISPATCHING = "run.dispatching"
    RUN_RUNNING = "run.running"
    RUN_CANCEL_REQUESTED = "run.cancel_requested"
    RUN_RETRY_WAIT = "run.retry_wait"
    RUN_WAITING_APPROVAL = "run.waiting_approval"
    RUN_SUCCEEDED = "run.succeeded"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_TIMED_OUT = "run.timed_out"
    RUN_LOST = "run.lost"
    RUN_ENDED = "run.ended"  # finished, outcome not reported (docs/run-state.md#outcome-not-reported)
    ATTEMPT_CLAIMED = "attempt.claimed"
    ATTEMPT_STARTING = "attempt.starting"
    ATTEMPT_RUNNING = "attempt.running"
    ATTEMPT_SUCCEEDED = "attempt.succeeded"
    ATTEMPT_FAILED = "attempt.failed"
    ATTEMPT_CANCELLED = "attempt.cancelled"
    ATTEMPT_TIMED_OUT = "attempt.timed_out"
    ATTEMPT_LOST = "attempt.lost"
    ATTEMPT_ENDED = "attempt.ended"
    ATTEMPT_LATE_CALLBACK_IGNORED = "attempt.late_callback_ignored"
    RUN_LEGACY_PROJECTION_MISMATCH = "run.legacy_projection_mismatch"
    RUN_RECONCILED = "run.reconciled"
    # Bridge diagnostics (docs/run-state.md#events).
    COMPAT_UNMATCHED_CALLBACK = "compat.unmatched_callback"
    COMPAT_AMBIGUOUS_CALLBACK = "compat.ambiguous_callback"
    COMPAT_TRANSITION_MISMATCH = "compat.transition_mismatch"
    COMPAT_SHADOW_WRITE_FAILED = "compat.shadow_write_failed"
    # StepRun mutations (docs/stepruns.md): part of the Run aggregate, so they take the Run's Event sequence.
    STEP_RUN_CREATED = "step_run.created"
    STEP_RUN_TRANSITIONED = "step_run.transitioned"

    @classmethod
    def for_run_status(cls, status: str) -> EventType:
        return cls(f"run.{status}")

    @classmethod
    def for_attempt_status(cls, status: str) -> EventType:
        return cls(f"attempt.{status}")



class ActorType(StrEnum):
    USER = "user"
    API_APP = "api_app"
    TRIGGER = "trigger"
    AGENT = "agent"
    MCP_CLIENT = "mcp_client"
    WORKER = "worker"
    EXECUTOR = "executor"
    SYSTEM = "system"
    LEGACY_SHELL = "legacy_shell"
    SCHEDULER = "scheduler"
    RECONCILER = "reconciler"
    COMPATIBILITY = "compatibility"


class ErrorCode(StrEnum):
    VALIDATION_ERROR = "validation_error"
    DISPATCH_ERROR = "dispatch_error"
    EXECUTOR_START_ERROR = "executor_start_error"
    PROCESS_EXIT_ERROR = "process_exit_error"
    CANCELLED_BY_USER = "cancelled_by_user"
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"
    POLICY_DENIED = "policy_denied"
    APPROVAL_REJECTED = "approval_rejected"
    INTERNAL_ERROR = "internal_error"
    # 2.x's boot reset stopped the instance without a finish time: imported history says so plainly.
    FINISH_TIME_UNKNOWN = "finish_time_unknown"
    # Who stopped a 2.x execution (each is also the Run's cancel_reason). CANCELLED_BY_USER above is an API stop
    # (`PUT /crons/stop`) relayed through the bridge; these are the other sources the bridge can tell apart.
    INSTANCE_STOPPED_BY_USER = "instance_stopped_by_user"  # stopInstance, relayed through the bridge
    REPLACED_BY_NEXT_RUN = "replaced_by_next_run"  # runCron's single-instance kill before the next start
    STOPPED_IN_LEGACY = "stopped_in_legacy"  # 2.x stopped it; the bridge saw no source (the panel went direct)
    LEGACY_BOOT_RESET = "legacy_boot_reset"  # 2.x's start-up reset: stopped, no finish time, no exit code


# Error codes that say 2.x stopped the execution; a Run carrying one ended cancelled.
STOP_CODES: frozenset[ErrorCode] = frozenset({
    ErrorCode.CANCELLED_BY_USER, ErrorCode.INSTANCE_STOPPED_BY_USER, ErrorCode.REPLACED_BY_NEXT_RUN,
    ErrorCode.STOPPED_IN_LEGACY, ErrorCode.LEGACY_BOOT_RESET,
})
_SIGNALS = range(129, 128 + 64 + 1)  # 128 + N for N in 1..64 (SIGRTMAX)


def is_signal_exit(exit_code: int | float | None) -> bool:
    """A shell's exit status 128 + N: its command ended on signal N (143 = SIGTERM, 130 = SIGINT).

    This is what the task shell's trap reports when 2.x kills it; on its own it is no proof of a stop.
    """
    if isinstance(exit_code, bool) or not isinstance(exit_code, (int, float)):
        return False
    return float(exit_code).is_integer() and int(exit_code) in _SIGNALS


@dataclass(frozen=True, slots=True)
class Actor:
    type: ActorType
    id: str | None = None


SHELL = Actor(ActorType.LEGACY_SHELL)  # 2.x's task shell: the actor of every fact a status callback brings


# Stable, low-sensitivity fields only. Anything else is refused, so a new field is a reviewed change.
PAYLOAD_ALLOWLIST: frozenset[str] = frozenset({
    "from", "to", "attempt", "attempt_id", "exit_code", "error_code", "reason", "origin", "mode",
    "owner", "pid", "log_ref", "synthesized", "legacy_status", "kind", "diff", "evidence",
    "duration_ms", "retry_of_run_id", "cancel_reason", "outcome", "late_status", "source",
    "started_at_ms", "finished_at_ms", "received_at_ms", "candidates", "legacy_cron_id",
    "projection", "expected", "current", "error", "truncated",
})
DEFAULT_PAYLOAD_CAP_BYTES = 2048


def encode_payload(payload: Mapping[str, Any], cap_bytes: int = DEFAULT_PAYLOAD_CAP_BYTES) -> str:
    """Validate and serialise a payload; raises PayloadValidationError naming the field."""
    for key in payload:
        if key not in PAYLOAD_ALLOWLIST:
            raise PayloadValidationError(str(key), "is not an allowlisted payload field")
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PayloadValidationError("payload", f"is not JSON-serialisable ({type(exc).__name__})") from exc
    size = len(text.encode("utf-8"))
    if size > cap_bytes:
        largest = max(payload, key=lambda k: len(json.dumps(payload[k], default=str)))
        raise PayloadValidationError(largest, f"makes the payload {size} bytes, over the {cap_bytes}-byte cap")
    return text


@dataclass(frozen=True, slots=True)
class RunEvent:
    """An immutable fact; ``sequence`` is per run, contiguous from 1."""

    id: str
    run_id: str
    sequence: int
    type: EventType
    actor_type: ActorType
    created_at_ms: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    dedupe_key: str | None = None
    actor_id: str | None = None
    attempt_id: str | None = None
    step_run_id: str | None = None
