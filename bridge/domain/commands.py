"""Imperative commands accepted by RunService; each is one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.domain.events import Actor
from bridge.domain.model import AttemptStatus, RunStatus


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
