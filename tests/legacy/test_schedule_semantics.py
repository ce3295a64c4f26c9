"""When a 2.x schedule fires, as the process that runs it decides: node-schedule's cron-parser 4.9.0 in
node mode, busybox crond in system mode (legacy_adapters/node_schedule.py, busybox_crond.py).

Expectations never come from the code under test. Where both 2.x schedulers agree with Vixie cron, croniter
(a test-only dependency) is the oracle. Where they do not, the expected days are written out by hand; each
row was checked against the real thing: cron-parser 4.9.0 run under node (v2.21.0's pnpm-lock.yaml pins it
for node-schedule 2.1.1) and busybox 1.36.1's ParseField/FixDayDow compiled from miscutils/crond.c.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from legacy_adapters.origin import infer_scheduled_origin, schedule_matches
from tests.legacy.conftest import cron

TZ = ZoneInfo("Asia/Shanghai")
YEAR = [date(2028, 1, 1) + timedelta(days=i) for i in range(366)]  # a leap year: Feb 29 and 31-day months
SUN, MON, TUE, WED, THU, FRI, SAT = 6, 0, 1, 2, 3, 4, 5  # date.weekday()


def begin(day: date, hour: int = 9, minute: int = 0, second: int = 0) -> int:
    """The shell's begin time: a second after the fire time."""
    return int(datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=TZ).timestamp()) + 1


def fired(schedule: str, scheduler: str, hour: int = 9, second: int = 0) -> set[date]:
    return {d for d in YEAR if schedule_matches(schedule, begin(d, hour, 0, second), TZ, scheduler=scheduler)}


def croniter_days(schedule: str, hour: int = 9, second: int = 0, *, six_fields: bool = False) -> set[date]:
    return {d for d in YEAR
            if croniter.match(schedule, datetime(d.year, d.month, d.day, hour, 0, second, tzinfo=TZ),
                              second_at_beginning=six_fields)}


def days_where(rule: Callable[[date], bool]) -> set[date]:
    return {d for d in YEAR if rule(d)}


def last_of_month(day: date) -> bool:
    return day.day == calendar.monthrange(day.year, day.month)[1]


def month_days(day: date) -> int:
    return calendar.monthrange(day.year, day.month)[1]


# --- Forms where both schedulers agree with Vixie cron: croniter is the oracle --------------------------------

BOTH_AGREE = [
    "0 9 * * */2",  # steps over the whole week: Sun, Tue, Thu, Sat
    "0 9 * * 0-6/2",
    "0 9 * * 1-5/2",
    "0 9 * * 0",
    "0 9 * * 1-7",
    "0 9 * * 0-6",
    "0 9 * * mon,wed,FRI",  # names, any case, in lists and ranges
    "0 9 * * MON-fri",
    "0 9 * * sun",
    "0 9 * jan-MAR *",
    "0 9 * 2-11/3 *",
    "0 9 1,15 * *",
    "0 9 1,15 * 5",  # day of month and day of week both restricted: either one fires (OR)
    "0 9 1-7 * 1",
]

NODE_AGREES = [
    "0 9 * * 7",  # 7 is Sunday
    "0 9 * * 0,7",
    "0 9 * * 5-7",
    "0 9 */10 * *",
    "0 9 5/10 * *",
    "0 9 L * *",
    "0 9 15,L * *",
    "0 9 * * 5#2",
    "0 9 * * 1#1",
    "0 9 15 * 0-6",
]

SYSTEM_AGREES = [
    "0 9 * * fri-mon",  # busybox wraps a range past Saturday
    "0 9 * * sat-sun",
    "0 9 1-30 * 1",
    "0 9 1-31 * 2",
]


@pytest.mark.parametrize("schedule", BOTH_AGREE + NODE_AGREES)
def test_node_mode_fires_on_the_days_croniter_computes(schedule: str) -> None:
    assert fired(schedule, "node") == croniter_days(schedule)


@pytest.mark.parametrize("schedule", BOTH_AGREE + SYSTEM_AGREES)
def test_system_mode_fires_on_the_days_croniter_computes(schedule: str) -> None:
    assert fired(schedule, "system") == croniter_days(schedule)


@pytest.mark.parametrize("schedule", ["30 0 9 * * */2", "30 0 9 * * 7", "30 0 9 1,15 * fri", "*/15 0 9 L * *"])
def test_six_fields_put_seconds_first_and_fire_on_the_second(schedule: str) -> None:
    assert fired(schedule, "node", second=30) == croniter_days(schedule, second=30, six_fields=True)
    assert fired(schedule, "node", second=31) == set()


@pytest.mark.parametrize("schedule", ["*/20 */6 * * *", "0,30 9-11/2 * * *", "*/7 * * * *", "59 23 * * *"])
@pytest.mark.parametrize("scheduler", ["node", "system"])
def test_minute_and_hour_fields_follow_croniter_too(schedule: str, scheduler: str) -> None:
    minutes = [datetime(2028, 3, 1, h, m, tzinfo=TZ) for h in (0, 5, 6, 9, 10, 11, 23) for m in range(60)]
    expected = {m for m in minutes if croniter.match(schedule, m)}
    matched = {m for m in minutes if schedule_matches(schedule, int(m.timestamp()) + 2, TZ, scheduler=scheduler)}
    assert matched == expected
    assert expected


def test_every_other_weekday_is_sunday_tuesday_thursday_saturday_in_both_modes() -> None:
    week = [date(2028, 3, 5) + timedelta(days=i) for i in range(7)]  # Sunday to Saturday
    for schedule in ("0 9 * * */2", "0 9 * * 0-6/2"):
        for scheduler in ("node", "system"):
            days = {d.weekday() for d in week if schedule_matches(schedule, begin(d), TZ, scheduler=scheduler)}
            assert days == {SUN, TUE, THU, SAT}, (schedule, scheduler)


# --- Where node-schedule (cron-parser 4.9.0) departs from Vixie cron: checked against cron-parser itself -----

NODE_OWN = {
    # A range ending on 7 also holds 0 (Sunday), whatever the step says.
    "0 9 * * 6-7/2": lambda d: d.weekday() in (SAT, SUN),
    "0 9 * * 3/2": lambda d: d.weekday() in (WED, FRI, SUN),  # 3/2 is 3-7/2
    # A day-of-month field holding as many values as the month has days counts as a wildcard,
    # so the weekday alone decides (no OR).
    "0 9 1-31 * 2": lambda d: d.weekday() == TUE,
    "0 9 1-30 * 1": lambda d: d.weekday() == MON or (month_days(d) == 31 and d.day <= 30),
    "0 9 * * 5L": lambda d: d.weekday() == FRI and (d + timedelta(days=7)).month != d.month,
    "0 9 * * 0L": lambda d: d.weekday() == SUN and (d + timedelta(days=7)).month != d.month,
    "0 9 * * 5L,1": lambda d: d.weekday() == MON or (d.weekday() == FRI and (d + timedelta(days=7)).month != d.month),
    "0 9 29 2 *": lambda d: d == date(2028, 2, 29),
    # addCron refuses '?' and a bare /N (node-schedule would return null), so these never run.
    "0 9 ? * 1": lambda d: False,
    "0 9 1 * ?": lambda d: False,
    "0 /3 * * *": lambda d: False,
    # cron-parser throws on these, so node-schedule schedules nothing.
    "0 9 * * fri-mon": lambda d: False,
    "0 9 * * sat-sun": lambda d: False,  # sun is 0 there, and 6-0 is not a range
    "0 9 30 2 *": lambda d: False,
    "0 9 * * L": lambda d: False,  # parses, then throws on the first date it looks at
}


@pytest.mark.parametrize("schedule", list(NODE_OWN))
def test_node_mode_keeps_cron_parser_4_9_0s_own_rules(schedule: str) -> None:
    assert fired(schedule, "node") == days_where(NODE_OWN[schedule])


@pytest.mark.parametrize("schedule, hour, rule", [
    ("@daily", 0, lambda d: True),
    ("@weekly", 0, lambda d: d.weekday() == SUN),
    ("@monthly", 0, lambda d: d.day == 1),
    ("@yearly", 0, lambda d: d == date(2028, 1, 1)),
    ("@annually", 0, lambda d: False),  # not one of cron-parser 4.9.0's names
])
def test_node_mode_knows_cron_parsers_predefined_names(schedule: str, hour: int, rule: Callable[[date], bool]) -> None:
    assert fired(schedule, "node", hour=hour) == days_where(rule)


# --- Where busybox crond departs from Vixie cron: checked against busybox's ParseField itself ---------------

SYSTEM_OWN = {
    # 7 is past the end of the weekday field: the fill loop wraps until its failsafe, setting every day,
    # and crond only logs "parse error" and keeps the line.
    "0 9 * * 7": lambda d: True,
    "0 9 * * 0,7": lambda d: True,
    "0 9 * * 5-7": lambda d: True,
    "0 9 * * 6-7/2": lambda d: True,
    "0 9 * * 3/2": lambda d: d.weekday() == WED,  # a step after a single value adds nothing
    "0 9 5/10 * *": lambda d: d.day == 5,
    "0 9 */10 * *": lambda d: d.day in (10, 20, 30),  # '*' starts the fill at slot 0
    # A weekday field with every slot set counts as unused: only the day of month decides (no OR).
    "0 9 15 * 0-6": lambda d: d.day == 15,
    # Parsing stops at the first character it does not know, keeping what it filled so far.
    "0 9 * * 5L": lambda d: d.weekday() == FRI,
    "0 9 * * 5#2": lambda d: d.weekday() == FRI,
    "0 9 L * *": lambda d: False,
    "0 9 ? * 1": lambda d: d.weekday() == MON,
}


@pytest.mark.parametrize("schedule", list(SYSTEM_OWN))
def test_system_mode_keeps_busybox_crond_rules(schedule: str) -> None:
    assert fired(schedule, "system") == days_where(SYSTEM_OWN[schedule])


def test_a_step_after_a_single_minute_differs_between_the_schedulers() -> None:
    hour = [datetime(2028, 3, 1, 9, m, tzinfo=TZ) for m in range(60)]

    def minutes(scheduler: str) -> list[int]:
        return [m.minute for m in hour if schedule_matches("5/15 9 * * *", int(m.timestamp()) + 1, TZ,
                                                               scheduler=scheduler)]

    assert minutes("node") == [5, 20, 35, 50]
    assert minutes("system") == [5]


def test_system_mode_has_no_seconds_and_no_at_names() -> None:
    assert fired("30 0 9 * * *", "system", second=30) == set()
    assert fired("@daily", "system", hour=0) == set()


def test_once_and_boot_schedules_never_fire() -> None:
    for scheduler in ("node", "system"):
        assert fired("@once", scheduler) == set() and fired("@boot", scheduler, hour=0) == set()


# --- What it changes for origin inference ------------------------------------------------------------------


TUESDAY, MONDAY = date(2028, 3, 7), date(2028, 3, 6)


@pytest.mark.parametrize("schedule", ["0 9 * * */2", "0 9 * * 0-6/2"])
@pytest.mark.parametrize("mode, origin", [("node", "scheduled_node"), ("system", "scheduled_system")])
def test_a_tuesday_run_of_an_every_other_weekday_cron_is_scheduled(schedule: str, mode: str, origin: str) -> None:
    assert infer_scheduled_origin(cron(schedule), begin(TUESDAY), mode, TZ).origin == origin
    assert infer_scheduled_origin(cron(schedule), begin(MONDAY), mode, TZ).origin == "script"


def test_weekday_7_is_sunday_for_node_schedule_but_every_day_for_crond() -> None:
    assert infer_scheduled_origin(cron("0 9 * * 7"), begin(MONDAY), "node", TZ).origin == "script"
    assert infer_scheduled_origin(cron("0 9 * * 7"), begin(MONDAY), "system", TZ).origin == "scheduled_system"


def test_node_crons_in_system_mode_follow_node_schedule() -> None:
    row = cron("0 3 * * *", extra_schedules=("0 9 * * 7",))  # an extra schedule makes it a node cron
    assert infer_scheduled_origin(row, begin(MONDAY), "system", TZ).origin == "script"
    decision = infer_scheduled_origin(row, begin(date(2028, 3, 5)), "system", TZ)
    assert (decision.origin, decision.evidence) == ("scheduled_node", "schedule_match:extra:5_field:node")
