"""busybox crond (miscutils/crond.c ``ParseField`` / ``FixDayDow``, 1.36-1.37), as the Alpine image's system
mode runs a schedule.

It differs from node-schedule (legacy_adapters/node_schedule.py): ``7`` fills every weekday here, ``5/15`` is
only 5, ``fri-mon`` wraps around, and there is no ``L`` or ``#``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

_CROND_DOW_NAMES = "sunmontuewedthufrisat"
_CROND_MONTH_NAMES = "janfebmaraprmayjunjulaugsepoctnovdec"
_STRTOL = re.compile(r"\s*[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class CrondLine:
    """busybox's CronLine arrays after FixDayDow; tm_mon counts from 0 and tm_wday from Sunday."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]

    def fires(self, at: datetime) -> bool:
        return (at.minute in self.minutes and at.hour in self.hours and at.month - 1 in self.months
                and (at.day in self.days or at.isoweekday() % 7 in self.weekdays))


@lru_cache(maxsize=1024)
def crond_line(schedule: str) -> CrondLine | None:
    """The line crond builds from ``<schedule> <command>``; None for lines it skips."""
    tokens = schedule.split()
    if len(tokens) != 5 or schedule.startswith("@"):
        return None  # crond needs five time fields before the command (its @-names are not used here)
    minutes = _crond_field(tokens[0], 60, 0, None)
    hours = _crond_field(tokens[1], 24, 0, None)
    days = _crond_field(tokens[2], 32, 0, None)
    months = _crond_field(tokens[3], 12, -1, _CROND_MONTH_NAMES)
    weekdays = _crond_field(tokens[4], 7, 0, _CROND_DOW_NAMES)
    # FixDayDow: a field with every slot set is unused, and then only the other one decides.
    week_used, days_used = len(weekdays) < 7, len(days) < 32
    if week_used != days_used:
        if week_used:
            days = frozenset()
        else:
            weekdays = frozenset()
    return CrondLine(minutes, hours, days, months, weekdays)


def _crond_field(text: str, modvalue: int, off: int, names: str | None) -> frozenset[int]:
    """ParseField: a parse error stops filling but keeps what was filled (crond only logs it)."""
    slots: set[int] = set()
    pos, n1, n2 = 0, -1, -1
    while True:
        found = False
        if text[pos:pos + 1] == "*":
            n1, n2, found = 0, modvalue - 1, True
            pos += 1
        elif text[pos:pos + 1].isascii() and text[pos:pos + 1].isdigit():
            number, pos = _strtol(text, pos)
            if n1 < 0:
                n1 = number + off
            else:
                n2 = number + off
            found = True
        elif names is not None:
            for i in range(0, len(names), 3):
                if text[pos:pos + 3].lower() == names[i:i + 3]:
                    pos += 3
                    if n1 < 0:
                        n1 = i // 3
                    else:
                        n2 = i // 3
                    found = True
                    break
        if not found:
            return frozenset(slots)
        if text[pos:pos + 1] == "-" and n2 < 0:
            pos += 1
            continue
        if n2 < 0:
            n2 = n1
        skip = 1
        if text[pos:pos + 1] == "/":
            skip, pos = _strtol(text, pos + 1)
        countdown, failsafe = 1, 1024
        n1 -= 1
        while True:  # fill with wrap-around; a bound outside the field never ends but at the failsafe
            n1 = _c_mod(n1 + 1, modvalue)
            countdown -= 1
            if countdown == 0:
                if 0 <= n1 < modvalue:
                    slots.add(n1)
                countdown = skip
            failsafe -= 1
            if failsafe == 0:
                return frozenset(slots)
            if n1 == n2:
                break
        if text[pos:pos + 1] != ",":
            break
        pos += 1
        n1 = n2 = -1
    return frozenset(slots)


def _strtol(text: str, pos: int) -> tuple[int, int]:
    """C strtol(base 10) from ``pos``: the number and where it stopped (0 and ``pos`` if none)."""
    match = _STRTOL.match(text, pos)
    if match is None:
        return 0, pos
    return int(match.group()), match.end()


def _c_mod(a: int, b: int) -> int:
    return a - b * int(a / b)  # C's %, which keeps the dividend's sign
