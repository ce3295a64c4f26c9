"""Infer a 2.x execution's origin from evidence (DESIGN.md section 5); the callback never says it.

Order: 2.x's own Crontabs row read *before* the start callback is forwarded (runSingle has already
written status 0 with the child's pid and log_path: manual, or boot for an @boot schedule); else a begin
time that matches the cron's schedule (scheduled_node / scheduled_system by scheduler mode and the
6-field / extra_schedules rule, legacy-2x.md 6.3); else script (any shell command can report under an
ID, legacy-2x.md 10.10). Each decision carries a short evidence code, never the command or path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

from legacy_adapters.reader import LegacyCron

# The shell takes begin_timestamp after sourcing its helpers, so a scheduled run begins a little
# after its fire time; a 5-field schedule fires on the minute, a 6-field one can fire every second.
MINUTE_TOLERANCE_S = 3
SECOND_TOLERANCE_S = 1
_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True, slots=True)
class OriginDecision:
    origin: str
    evidence: str


def infer_start_origin(cron_before: LegacyCron | None, pid: int | None, log_path: str | None,
                       begin_s: int | None, scheduler_mode: str, tz: tzinfo) -> OriginDecision:
    """Origin of a start callback, given the Crontabs row as it was before 2.x saw the callback."""
    if cron_before is not None and _spawned_by_run_single(cron_before, pid, log_path):
        if (cron_before.schedule or "").startswith("@boot"):
            return OriginDecision("boot", "run_single_row:boot_schedule")
        return OriginDecision("manual", "run_single_row")
    return infer_scheduled_origin(cron_before, begin_s, scheduler_mode, tz)


def infer_scheduled_origin(cron: LegacyCron | None, begin_s: int | None, scheduler_mode: str,
                           tz: tzinfo) -> OriginDecision:
    """scheduled_node / scheduled_system when the begin time matches a schedule, else script."""
    if cron is None or begin_s is None or not begin_s:
        return OriginDecision("script", "no_schedule_evidence")
    schedules = [(cron.schedule or "", "main"), *[(s, "extra") for s in (cron.extra_schedules or ())]]
    node_cron = _is_node_cron(cron)
    for schedule, which in schedules:
        if schedule_matches(schedule, begin_s, tz):
            fields = len(schedule.split())
            if node_cron or scheduler_mode == "node":
                return OriginDecision("scheduled_node", f"schedule_match:{which}:{fields}_field:node")
            return OriginDecision("scheduled_system", f"schedule_match:{which}:{fields}_field:system")
    return OriginDecision("script", "no_schedule_match")


def _spawned_by_run_single(cron: LegacyCron, pid: int | None, log_path: str | None) -> bool:
    return cron.status == 0 and pid is not None and cron.pid == pid and bool(log_path) and cron.log_path == log_path


def _is_node_cron(cron: LegacyCron) -> bool:
    """legacy-2x.md 6.3 isNodeCron: more than five fields, or any extra schedule."""
    return len((cron.schedule or "").split()) > 5 or bool(cron.extra_schedules)


def schedule_matches(schedule: str, begin_s: int, tz: tzinfo) -> bool:
    """True when a fire time of ``schedule`` lies within the tolerance before ``begin_s``."""
    trigger = _trigger(schedule.strip(), _tz_key(tz))
    if trigger is None:
        return False
    fields = len(schedule.split())
    tolerance = SECOND_TOLERANCE_S if fields == 6 else MINUTE_TOLERANCE_S
    begin = datetime.fromtimestamp(begin_s, tz)
    window_start = begin - timedelta(seconds=tolerance)
    fire = trigger.get_next_fire_time(None, window_start)
    return fire is not None and window_start <= fire <= begin


def _tz_key(tz: tzinfo) -> str:
    return getattr(tz, "key", None) or str(tz)


@lru_cache(maxsize=512)
def _trigger(schedule: str, tz_key: str) -> CronTrigger | None:
    """A CronTrigger for a 5-field or 6-field (seconds first) 2.x schedule; None for @once/@boot/garbage."""
    parts = schedule.split()
    if schedule.startswith("@") or len(parts) not in (5, 6):
        return None
    if len(parts) == 5:
        parts = ["0", *parts]
    second, minute, hour, day, month, dow = parts
    try:
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=_crontab_dow(dow), timezone=ZoneInfo(tz_key))
    except (ValueError, KeyError):
        return None


def _crontab_dow(field: str) -> str:
    """Crontab counts weekdays from Sunday = 0 (or 7); APScheduler 3.x from Monday = 0: use names."""
    out = []
    for part in field.split(","):
        base, slash, step = part.partition("/")
        low, dash, high = base.partition("-")
        if dash and low == "0" and high.isdigit() and not slash:
            base = "7" if high in ("0", "7") else f"7,1-{high}"  # 0-N wraps past Sunday in APScheduler's order
        base = re.sub(r"\d+", lambda m: _DOW_NAMES[int(m.group()) % 8] if int(m.group()) <= 7 else m.group(), base)
        out.append(base + slash + step)
    return ",".join(out)
