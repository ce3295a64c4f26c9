"""node-schedule 2.1.1 over cron-parser 4.9.0 (lib/expression.js), as 2.x's node mode runs a schedule.

v2.21.0's pnpm-lock.yaml pins cron-parser 4.9.0 (the ^5.4.0 in package.json only validates input), behind
addCron's refusal of ``?`` and bare ``/N``. It differs from busybox crond (legacy_adapters/busybox_crond.py):
``7`` is Sunday here, ``5/15`` is 5,20,35,50, ``fri-mon`` is refused, and only cron-parser knows ``L`` and ``#``.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

_NODE_FIELDS = ("second", "minute", "hour", "dayOfMonth", "month", "dayOfWeek")
_NODE_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NODE_SPECIAL_CHARS = ("", "", "", "L", "", "L")
_NODE_DEFAULTS = ("0", "*", "*", "*", "*", "*")
_NODE_VALID = (
    *[re.compile(r"[,*0-9/-]+")] * 3,
    re.compile(r"[?,*0-9L/-]+"),
    re.compile(r"[,*0-9/-]+"),
    re.compile(r"[?,*0-9L#/-]+"),
)
_NODE_ALIASES = {
    "month": {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m},
    "dayOfWeek": {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6},
}
_NODE_PREDEFINED = {"@yearly": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                    "@daily": "0 0 * * *", "@hourly": "0 * * * *"}
_NODE_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# addCron's pre-check: node-schedule would return null for these, so 2.x refuses to register them.
_NODE_REFUSED = re.compile(r"\s/[0-9]|^/[0-9]|\?")

_Value = int | str  # a number, or an "L" item kept as text (cron-parser keeps them as strings)


class _Invalid(ValueError):
    """cron-parser throws: node-schedule then returns no job, so the schedule never fires."""


@dataclass(frozen=True, slots=True)
class NodeExpression:
    """A parsed cron-parser 4.9.0 CronExpression and its day-matching rules (``_findSchedule``)."""

    fields: int
    second: frozenset[int]
    minute: frozenset[int]
    hour: frozenset[int]
    month: frozenset[int]
    day_of_month: tuple[_Value, ...]
    day_of_week: tuple[_Value, ...]
    nth_day_of_week: int

    def fires(self, at: datetime) -> bool:
        dom, dow = self.day_of_month, self.day_of_week
        weekday = at.isoweekday() % 7  # JS getDay: Sunday is 0
        dom_match = at.day in dom or (_has_l(dom) and _is_last_day_of_month(at))
        dow_match = weekday in dow or (_has_l(dow) and any(
            isinstance(item, str) and "L" in item and int(item[0]) % 7 == weekday and _is_last_weekday(at)
            for item in dow))
        # Wildcards are recognised by how many values a field holds, not by how it was written.
        dom_wildcard = len(dom) >= _NODE_DAYS_IN_MONTH[at.month - 1]
        dow_wildcard = len(dow) == 8
        if not dom_match and (not dow_match or dow_wildcard):
            return False
        if dom_wildcard and not dow_wildcard and not dow_match:
            return False
        if self.nth_day_of_week and not _is_nth_day(at, self.nth_day_of_week):
            return False
        return (at.month in self.month and at.hour in self.hour and at.minute in self.minute
                and at.second in self.second)


@lru_cache(maxsize=1024)
def node_expression(schedule: str) -> NodeExpression | None:
    """What node-schedule would schedule for ``schedule``, or None when it would refuse or never fire."""
    if _NODE_REFUSED.search(schedule):
        return None
    try:
        return _parse_node_expression(schedule)
    except _Invalid:
        return None


def _parse_node_expression(expression: str) -> NodeExpression:
    """CronExpression.parse: predefined names, up to six fields right-aligned (seconds default to 0)."""
    expression = _NODE_PREDEFINED.get(expression, expression)
    atoms = expression.strip().split()
    atoms = atoms or [""]  # JS ''.split(/\s+/) is ['']
    if len(atoms) > 6:
        raise _Invalid("Invalid cron expression")
    start = 6 - len(atoms)
    nth = 0
    parsed: list[list[_Value]] = []
    for i, field in enumerate(_NODE_FIELDS):
        value = atoms[i - start] if i >= start else ""
        if not value:
            value = _NODE_DEFAULTS[i]
        elif field == "dayOfWeek":
            value, nth = _parse_nth_day(value)
        parsed.append(_parse_node_field(i, value))
    second, minute, hour, dom, month, dow = parsed
    if len(month) == 1:  # _handleMaxDaysInMonth
        days = _NODE_DAYS_IN_MONTH[int(month[0]) - 1]
        if isinstance(dom[0], int) and dom[0] > days:
            raise _Invalid("Invalid explicit day of month definition")
        dom = [d for d in dom if d == "L" or (isinstance(d, int) and d <= days)]
    if any(isinstance(d, str) and not d[0].isdigit() for d in dow):
        raise _Invalid("Invalid last weekday of the month expression")  # thrown on the first match
    return NodeExpression(
        fields=len(atoms), second=_numbers(second), minute=_numbers(minute), hour=_numbers(hour),
        month=_numbers(month), day_of_month=tuple(dom), day_of_week=tuple(dow), nth_day_of_week=nth)


def _parse_nth_day(value: str) -> tuple[str, int]:
    atoms = value.split("#")
    if len(atoms) == 1:
        return value, 0
    nth = _js_number(atoms[-1])
    if any(c in value for c in ",/-") or len(atoms) > 2 or math.isnan(nth) or not 1 <= nth <= 5:
        raise _Invalid("Constraint error, invalid dayOfWeek occurrence")
    return atoms[0], int(nth)


def _parse_node_field(index: int, value: str) -> list[_Value]:
    """CronExpression._parseField, step for step (its quirks are what 2.x schedules by)."""
    field, (low, high), special = _NODE_FIELDS[index], _NODE_BOUNDS[index], _NODE_SPECIAL_CHARS[index]
    aliases = _NODE_ALIASES.get(field)
    if aliases is not None:
        def alias(match: re.Match[str]) -> str:
            name = match.group().lower()
            if name not in aliases:
                raise _Invalid(f'cannot resolve alias "{name}"')
            return str(aliases[name])
        value = re.sub(r"[A-Za-z]{3}", alias, value)
    if not _NODE_VALID[index].fullmatch(value):
        raise _Invalid(f"Invalid characters, got value: {value}")
    if "*" in value:
        value = value.replace("*", f"{low}-{high}")
    elif "?" in value:
        value = value.replace("?", f"{low}-{high}")

    def is_special(item: object) -> bool:
        return isinstance(item, str) and bool(special) and special in item

    def parse_range(text: str, repeat: float | str) -> list[_Value] | _Value | float:
        atoms = text.split("-")
        if len(atoms) == 1:
            number = _js_number(text)
            return text if math.isnan(number) else number
        if not atoms[0]:
            if not atoms[1]:
                raise _Invalid(f"Invalid range: {text}")
            return _js_number(text)
        first, last = _js_number(atoms[0]), _js_number(atoms[1])
        if math.isnan(first) or math.isnan(last) or first < low or last > high or first > last:
            raise _Invalid(f"Invalid range: {text}")
        interval = repeat if isinstance(repeat, (int, float)) else _js_number(repeat)
        if math.isnan(interval) or interval <= 0:
            raise _Invalid(f"cannot repeat at every {interval} time")
        stack: list[_Value] = []
        if field == "dayOfWeek" and last % 7 == 0:
            stack.append(0)  # 7 is Sunday: a range ending on it also holds 0
        counter = interval
        for index_ in range(int(first), int(last) + 1):
            if index_ not in stack and counter > 0 and counter % interval == 0:
                counter = 1
                stack.append(index_)
            else:
                counter += 1
        return stack

    def parse_repeat(text: str) -> list[_Value] | _Value | float:
        atoms = text.split("/")
        if len(atoms) > 2:
            raise _Invalid(f"Invalid repeat: {text}")
        if len(atoms) == 2:
            if not math.isnan(_js_number(atoms[0])):  # atoms[0] == +atoms[0]
                atoms = [f"{atoms[0]}-{high}", atoms[1]]
            return parse_range(atoms[0], atoms[1])
        return parse_range(text, 1)

    stack: list[_Value] = []
    items = value.split(",")
    if not all(items):
        raise _Invalid("Invalid list value format")
    for item in items:
        result = parse_repeat(item)
        if isinstance(result, list):
            for number in result:
                if not is_special(number) and not (isinstance(number, int) and low <= number <= high):
                    raise _Invalid(f"Constraint error, got value {number}")
                stack.append(number)
        elif isinstance(result, str) and is_special(result):
            stack.append(result)
        else:
            single = _js_number(result)
            if math.isnan(single) or not low <= single <= high:
                raise _Invalid(f"Constraint error, got value {result}")
            stack.append(int(single) % 7 if field == "dayOfWeek" else int(single))
    return sorted(stack, key=lambda v: (1, v, 0) if isinstance(v, str) else (0, "", v))


def _js_number(text: str | float) -> float:
    """JavaScript's unary ``+`` on the texts a cron field can hold ('' is 0, anything odd is NaN)."""
    if isinstance(text, (int, float)):
        return float(text)
    text = text.strip()
    if not text:
        return 0.0
    return float(text) if re.fullmatch(r"[+-]?[0-9]+", text) else math.nan


def _numbers(values: Sequence[_Value]) -> frozenset[int]:
    return frozenset(v for v in values if isinstance(v, int))


def _has_l(values: Sequence[_Value]) -> bool:
    return any(isinstance(v, str) and "L" in v for v in values)


def _is_last_day_of_month(at: datetime) -> bool:
    return at.day == calendar.monthrange(at.year, at.month)[1]


def _is_last_weekday(at: datetime) -> bool:
    return (at.date() + timedelta(days=7)).month != at.month


def _is_nth_day(at: datetime, nth: int) -> bool:
    """cron-parser's isNthDayMatch: the day is the nth of its weekday in the month."""
    if nth >= 6:
        return False
    if at.day < 8 and nth == 1:
        return True
    return (at.day - at.day % 7) // 7 + (1 if at.day % 7 else 0) == nth
