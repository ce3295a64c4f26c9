"""Origin inference from 2.x's own evidence: the runSingle row, the schedule, or neither."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from legacy_adapters.identity import task_revision
from legacy_adapters.origin import infer_scheduled_origin, infer_start_origin, schedule_matches
from tests.legacy.conftest import cron

SHANGHAI = ZoneInfo("Asia/Shanghai")
UTC = ZoneInfo("UTC")


def at(*parts: int, tz: ZoneInfo = SHANGHAI) -> int:
    return int(datetime(*parts, tzinfo=tz).timestamp())


def test_a_row_written_by_run_single_means_a_manual_run() -> None:
    row = cron(status=0, pid=42, log_path="a_5/x.log")
    decision = infer_start_origin(row, 42, "a_5/x.log", at(2026, 12, 2, 10, 0, 1), "system", SHANGHAI)
    assert (decision.origin, decision.evidence) == ("manual", "run_single_row")


def test_a_run_single_row_of_an_at_boot_cron_means_boot() -> None:
    row = cron("@boot", status=0, pid=42, log_path="a_5/x.log")
    assert infer_start_origin(row, 42, "a_5/x.log", 1, "node", SHANGHAI).origin == "boot"


def test_a_row_of_another_pid_is_not_evidence_of_a_panel_run() -> None:
    row = cron(status=0, pid=41, log_path="a_5/x.log")
    decision = infer_start_origin(row, 42, "a_5/x.log", at(2026, 12, 2, 10, 0, 1), "system", SHANGHAI)
    assert decision.origin == "scheduled_system"


@pytest.mark.parametrize("schedule, mode, expected", [
    ("0 10 * * *", "system", "scheduled_system"),
    ("0 10 * * *", "node", "scheduled_node"),
    ("*/5 * * * * *", "system", "scheduled_node"),  # six fields always run under node-schedule
    ("0 11 * * *", "system", "script"),
])
def test_the_schedule_and_scheduler_mode_decide_a_scheduled_origin(schedule: str, mode: str, expected: str) -> None:
    assert infer_scheduled_origin(cron(schedule), at(2026, 12, 2, 10, 0, 0), mode, SHANGHAI).origin == expected


def test_an_extra_schedule_makes_a_node_cron() -> None:
    row = cron("0 3 * * *", extra_schedules=("0 10 * * *",))
    decision = infer_scheduled_origin(row, at(2026, 12, 2, 10, 0, 2), "system", SHANGHAI)
    assert (decision.origin, decision.evidence) == ("scheduled_node", "schedule_match:extra:5_field:node")


def test_schedules_are_read_in_the_installs_time_zone() -> None:
    ten_shanghai = at(2026, 12, 2, 10, 0, 1)
    assert schedule_matches("0 10 * * *", ten_shanghai, SHANGHAI)
    assert not schedule_matches("0 10 * * *", ten_shanghai, UTC)
    assert schedule_matches("0 2 * * *", ten_shanghai, UTC)


def test_crontab_weekday_numbers_count_from_sunday() -> None:
    wednesday = at(2026, 12, 2, 10, 0, 1)  # 2026-12-02 is a Wednesday
    assert schedule_matches("0 10 * * 3", wednesday, SHANGHAI)
    assert not schedule_matches("0 10 * * 2", wednesday, SHANGHAI)
    assert schedule_matches("0 10 * * 0-5", wednesday, SHANGHAI)
    assert not schedule_matches("0 10 * * 0", wednesday, SHANGHAI)


def test_a_begin_long_after_the_fire_time_is_not_a_scheduled_run() -> None:
    assert not schedule_matches("0 10 * * *", at(2026, 12, 2, 10, 0, 30), SHANGHAI)
    assert not schedule_matches("@once", at(2026, 12, 2, 10, 0, 0), SHANGHAI)
    assert not schedule_matches("not a schedule", 1, SHANGHAI)


@pytest.mark.parametrize("begin_s", [2**53 - 1, -(2**53 - 1), 10**12])
@pytest.mark.parametrize("mode", ["system", "node"])
def test_a_begin_time_no_calendar_reaches_is_no_schedule_evidence(begin_s: int, mode: str) -> None:
    # 2.x stores what the shell sent; inference must answer, not raise (a raise loses the callback's Run).
    decision = infer_start_origin(cron("* * * * *"), 42, "a_5/x.log", begin_s, mode, SHANGHAI)
    assert (decision.origin, decision.evidence) == ("script", "no_schedule_evidence")


def test_the_task_revision_changes_with_the_command_only() -> None:
    assert task_revision(cron()) == task_revision(cron(name="renamed"))
    assert task_revision(cron()) != task_revision(cron(command="task b.js"))
