"""The pure projection rules (docs/primary-mode.md, docs/run-state.md#projection-rules): Run facts in, 2.x values in
2.x's units out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.service.outbox import RunFacts
from legacy_adapters.schema import CrontabStatus, InstanceStatus
from projections.legacy_status import project_crontab, project_instance

T0 = 1_796_216_497_123


def facts(status: str = "running", attempt: str | None = "running", **kw: object) -> RunFacts:
    values: dict[str, object] = {"run_id": "r1", "cron_id": 7, "status": status, "created_at_ms": T0 - 10,
                                 "started_at_ms": T0, "attempt_id": "a1", "attempt_status": attempt, "pid": 4321,
                                 "legacy_log_path": "task_7/x.log", "attempt_started_at_ms": T0}
    values.update(kw)
    return RunFacts(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("statuses, expected", [
    (["running"], CrontabStatus.RUNNING),
    (["queued", "running"], CrontabStatus.RUNNING),
    (["queued"], CrontabStatus.QUEUED),
    (["dispatching"], CrontabStatus.QUEUED),
    (["created", "retry_wait"], CrontabStatus.QUEUED),
    (["waiting_approval"], CrontabStatus.RUNNING),
    (["lost"], CrontabStatus.IDLE),
    ([], CrontabStatus.IDLE),
])
def test_the_cron_status_is_running_then_queued_then_idle(statuses: list[str], expected: CrontabStatus) -> None:
    active = [facts(status=s, run_id=f"r{i}") for i, s in enumerate(statuses)]
    assert project_crontab(active, None, None).status == expected


def test_the_pid_is_the_most_recently_started_still_active_local_attempts() -> None:
    older = facts(run_id="old", pid=100, attempt_started_at_ms=T0)
    newer = facts(run_id="new", pid=200, attempt_started_at_ms=T0 + 5000)
    remote = facts(run_id="remote", pid=None, attempt_started_at_ms=T0 + 9000)
    ended = facts(run_id="ended", attempt="succeeded", pid=300, attempt_started_at_ms=T0 + 9999)
    assert project_crontab([older, newer, remote, ended], None, None).pid == 200
    assert project_crontab([remote], None, None).pid is None  # None: 2.x's column is left as it is


def test_times_leave_in_seconds_and_unknown_values_leave_the_column_alone() -> None:
    latest = facts()
    terminal = facts(status="succeeded", attempt="succeeded", duration_ms=7_400, finished_at_ms=T0 + 7_400)
    projected = project_crontab([], latest, terminal)
    assert projected.last_execution_time == T0 // 1000 and projected.last_running_time == 7
    assert projected.log_path == "task_7/x.log" and projected.status == CrontabStatus.IDLE
    nothing = project_crontab([], None, None)
    assert (nothing.pid, nothing.log_path, nothing.last_execution_time, nothing.last_running_time) == (None,) * 4


def test_a_run_ended_without_a_reported_outcome_leaves_the_cron_idle_with_its_times() -> None:
    ended = facts(status="ended", attempt="ended", duration_ms=4_000, finished_at_ms=T0 + 4_000)
    projected = project_crontab([], ended, ended)
    assert (projected.status, projected.pid, projected.last_running_time) == (CrontabStatus.IDLE, None, 4)


def test_a_terminal_run_without_a_stored_duration_uses_its_start_and_finish() -> None:
    terminal = facts(status="failed", attempt="failed", duration_ms=None, finished_at_ms=T0 + 2_600)
    assert project_crontab([], None, terminal).last_running_time == 3


@pytest.mark.parametrize("attempt, exit_code, status, projected_exit", [
    ("running", None, InstanceStatus.RUNNING, None),
    ("starting", None, InstanceStatus.RUNNING, None),
    ("succeeded", 0, InstanceStatus.FINISHED, 0),
    ("succeeded", None, InstanceStatus.FINISHED, None),
    ("ended", None, InstanceStatus.FINISHED, None),  # update.sh's end: no exit code, and 2.x writes finished
    ("failed", 3, InstanceStatus.ERROR, 3),
    ("cancelled", None, InstanceStatus.STOPPED, 143),
    ("timed_out", None, InstanceStatus.ERROR, 124),
    ("lost", None, InstanceStatus.STOPPED, None),
])
def test_an_instance_follows_its_attempt(attempt: str, exit_code: int | None, status: InstanceStatus,
                                         projected_exit: int | None) -> None:
    done = attempt not in ("running", "starting")
    f = facts(attempt=attempt, exit_code=exit_code, attempt_finished_at_ms=T0 + 2_999 if done else None)
    instance = project_instance(f)
    assert (instance.status, instance.exit_code) == (status, projected_exit)
    assert (instance.cron_id, instance.pid, instance.log_path) == (7, 4321, "task_7/x.log")
    assert instance.started_at == T0 // 1000
    assert instance.finished_at == ((T0 + 2_999) // 1000 if done else None)


def test_an_attempt_not_yet_started_borrows_the_runs_times() -> None:
    f = replace(facts(attempt="claimed"), attempt_started_at_ms=None, started_at_ms=None)
    assert project_instance(f).started_at == (T0 - 10) // 1000
