"""Pure projection of bridge-owned Run facts onto 2.x's ``Crontabs`` / ``RunningInstances`` values.

docs/primary-mode.md and docs/run-state.md#projection-rules. No I/O: the projector feeds facts in and hands the values
to the 2.x writer. Every time value leaves here in 2.x's unit (seconds), converted only by ``timeconv``.

How Run statuses read in 2.x (2.x itself knows only running / queued / idle):

    running, waiting_approval                     -> running (0): the process exists
    created, queued, dispatching, retry_wait      -> queued (3): 2.x's runCron sets queued before spawning
    lost and every terminal status                -> neither (no process we can vouch for)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bridge.domain.model import ATTEMPT_ACTIVE, AttemptStatus, RunStatus
from bridge.service.outbox import RunFacts
from legacy_adapters.schema import CrontabStatus, InstanceStatus
from legacy_adapters.timeconv import ms_to_duration_seconds, ms_to_epoch_seconds

_RUNNING_RUNS = frozenset({RunStatus.RUNNING, RunStatus.WAITING_APPROVAL})
_QUEUED_RUNS = frozenset({RunStatus.CREATED, RunStatus.QUEUED, RunStatus.DISPATCHING, RunStatus.RETRY_WAIT})
STOPPED_EXIT_CODE = 143  # what 2.x's stopInstance writes (SIGTERM)
TIMEOUT_EXIT_CODE = 124  # what `timeout` exits with when the shell's own limit fires


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
    if status is None or status in ATTEMPT_ACTIVE:
        return InstanceStatus.RUNNING, None
    if status == AttemptStatus.SUCCEEDED:
        return InstanceStatus.FINISHED, facts.exit_code
    if status == AttemptStatus.FAILED:
        return InstanceStatus.ERROR, facts.exit_code
    if status == AttemptStatus.ENDED:  # no exit code was reported: what 2.x writes for such an end
        return InstanceStatus.FINISHED, None  # (docs/legacy-2x.md#updatesh-sends-no-exit-code)
    if status == AttemptStatus.CANCELLED:
        return InstanceStatus.STOPPED, STOPPED_EXIT_CODE  # like stopInstance
    if status == AttemptStatus.TIMED_OUT:
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
