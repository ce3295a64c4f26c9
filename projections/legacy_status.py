"""Pure projection of bridge-owned Run facts onto 2.x's ``Crontabs`` / ``RunningInstances`` values.

DESIGN.md section 6 and legacy-2x.md 9.5. No I/O: the relay feeds facts in and hands the values to the
2.x writer. Every time value leaves here in 2.x's unit (seconds), converted only by ``timeconv``.

How Run statuses read in 2.x (2.x itself knows only running / queued / idle):

    running, waiting_approval                     -> running (0): the process exists
    created, queued, dispatching, retry_wait      -> queued (3): 2.x's runCron sets queued before spawning
    lost and every terminal status                -> neither (no process we can vouch for)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from legacy_adapters.schema import CrontabStatus, InstanceStatus
from legacy_adapters.timeconv import ms_to_duration_seconds, ms_to_epoch_seconds

_RUNNING_RUNS = frozenset({"running", "waiting_approval"})
_QUEUED_RUNS = frozenset({"created", "queued", "dispatching", "retry_wait"})
_TERMINAL_RUNS = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
_ACTIVE_ATTEMPTS = frozenset({"claimed", "starting", "running"})
STOPPED_EXIT_CODE = 143  # what 2.x's stopInstance writes (SIGTERM)
TIMEOUT_EXIT_CODE = 124  # what `timeout` exits with when the shell's own limit fires


@dataclass(frozen=True, slots=True)
class RunFacts:
    """One bridge-owned Run with one of its Attempts (the latest, or the one an outbox row names)."""

    run_id: str
    cron_id: int
    status: str  # RunStatus value
    created_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    duration_ms: int | None = None
    attempt_id: str | None = None
    attempt_status: str | None = None  # AttemptStatus value
    pid: int | None = None
    legacy_log_path: str | None = None  # 2.x's raw log_path, primary attempts only
    exit_code: int | None = None
    attempt_started_at_ms: int | None = None
    attempt_finished_at_ms: int | None = None

    @property
    def attempt_active(self) -> bool:
        return self.attempt_status in _ACTIVE_ATTEMPTS

    @property
    def is_terminal(self) -> bool:
        return self.status in _TERMINAL_RUNS


@dataclass(frozen=True, slots=True)
class CrontabProjection:
    """The projected ``Crontabs`` columns; None means "leave the column as it is"."""

    status: int
    pid: int | None
    log_path: str | None
    last_execution_time: int | None  # unix seconds
    last_running_time: int | None  # seconds


@dataclass(frozen=True, slots=True)
class InstanceProjection:
    """One ``RunningInstances`` row for one Attempt; times are unix seconds."""

    cron_id: int
    pid: int | None
    log_path: str | None
    started_at: int
    finished_at: int | None
    status: int
    exit_code: int | None


def crontab_status(active: Iterable[RunFacts]) -> CrontabStatus:
    """running if any active Run is running, else queued if one is queued, else idle."""
    statuses = {facts.status for facts in active}
    if statuses & _RUNNING_RUNS:
        return CrontabStatus.RUNNING
    if statuses & _QUEUED_RUNS:
        return CrontabStatus.QUEUED
    return CrontabStatus.IDLE


def _latest_local_pid(active: Iterable[RunFacts]) -> int | None:
    # Local = an Attempt with a process id; a remote executor has none and leaves 2.x's pid alone.
    live = [f for f in active if f.attempt_active and f.pid is not None]
    if not live:
        return None
    newest = max(live, key=lambda f: (f.attempt_started_at_ms or f.created_at_ms, f.created_at_ms, f.run_id))
    return newest.pid


def _duration_ms(facts: RunFacts) -> int | None:
    if facts.duration_ms is not None:
        return facts.duration_ms
    if facts.started_at_ms is not None and facts.finished_at_ms is not None:
        return max(0, facts.finished_at_ms - facts.started_at_ms)
    return None


def project_crontab(active: list[RunFacts], latest: RunFacts | None,
                    latest_terminal: RunFacts | None) -> CrontabProjection:
    """The cron's 2.x columns from its active Runs, its latest started Run and its latest terminal Run."""
    started = latest.started_at_ms if latest is not None else None
    duration = _duration_ms(latest_terminal) if latest_terminal is not None else None
    return CrontabProjection(
        status=int(crontab_status(active)),
        pid=_latest_local_pid(active),
        log_path=latest.legacy_log_path if latest is not None else None,
        last_execution_time=ms_to_epoch_seconds(started, field="started_at_ms") if started is not None else None,
        last_running_time=ms_to_duration_seconds(duration, field="duration_ms") if duration is not None else None,
    )


def _instance_outcome(facts: RunFacts) -> tuple[InstanceStatus, int | None]:
    status = facts.attempt_status
    if status is None or status in _ACTIVE_ATTEMPTS:
        return InstanceStatus.RUNNING, None
    if status == "succeeded":
        return InstanceStatus.FINISHED, facts.exit_code
    if status == "failed":
        return InstanceStatus.ERROR, facts.exit_code
    if status == "cancelled":
        return InstanceStatus.STOPPED, STOPPED_EXIT_CODE  # like stopInstance
    if status == "timed_out":
        return InstanceStatus.ERROR, facts.exit_code if facts.exit_code is not None else TIMEOUT_EXIT_CODE
    # lost: the process is gone unobserved; 2.x's own startup reset shows such rows stopped, no exit code.
    return InstanceStatus.STOPPED, facts.exit_code


def project_instance(facts: RunFacts) -> InstanceProjection:
    """The ``RunningInstances`` row of ``facts``' Attempt: running while active, then its outcome."""
    status, exit_code = _instance_outcome(facts)
    begun = facts.attempt_started_at_ms or facts.started_at_ms or facts.created_at_ms
    finished = None
    if status is not InstanceStatus.RUNNING:
        ended = facts.attempt_finished_at_ms or facts.finished_at_ms
        finished = ms_to_epoch_seconds(ended, field="finished_at_ms") if ended is not None else None
    return InstanceProjection(
        cron_id=facts.cron_id,
        pid=facts.pid,
        log_path=facts.legacy_log_path,
        started_at=ms_to_epoch_seconds(begun, field="started_at_ms"),
        finished_at=finished,
        status=int(status),
        exit_code=exit_code,
    )
