"""Infer a 2.x execution's origin from evidence (docs/shadow-recording.md); the callback never says it.

Order: 2.x's own Crontabs row read *before* the start callback is forwarded (runSingle has already
written status 0 with the child's pid and log_path: manual, or boot for an @boot schedule); else a begin
time that matches the cron's schedule (scheduled_node / scheduled_system by scheduler mode and the
6-field / extra_schedules rule, docs/legacy-2x.md#scheduler-routing); else script (any shell command can report under an
ID, docs/legacy-2x.md#any-shell-can-report-under-a-cron-id). Each decision carries a short evidence code, never the
command or path.

Whether a schedule fires at a time is decided the way the 2.x process that runs it decides, not by a
generic cron library: node mode by node-schedule (legacy_adapters/node_schedule.py), system mode by the
Alpine image's busybox crond (legacy_adapters/busybox_crond.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

from legacy_adapters.busybox_crond import crond_line
from legacy_adapters.node_schedule import node_expression
from legacy_adapters.records import LegacyCron

# The shell takes begin_timestamp after sourcing its helpers, so a scheduled run begins a little
# after its fire time; a 5-field schedule fires on the minute, a 6-field one can fire every second.
MINUTE_TOLERANCE_S = 3
SECOND_TOLERANCE_S = 1


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
    if cron is None or begin_s is None or not begin_s or not _on_the_clock(begin_s, tz):
        # No begin time, or one no calendar reaches (2.x stores what the shell sent, 2**53 - 1 included).
        return OriginDecision("script", "no_schedule_evidence")
    schedules = [(cron.schedule or "", "main"), *[(s, "extra") for s in (cron.extra_schedules or ())]]
    # shouldUseCronClient: node-schedule runs every schedule in node mode and node crons in system
    # mode; crond runs the rest.
    scheduler = "node" if scheduler_mode == "node" or _is_node_cron(cron) else "system"
    for schedule, which in schedules:
        if schedule_matches(schedule, begin_s, tz, scheduler=scheduler):
            fields = len(schedule.split())
            origin = "scheduled_node" if scheduler == "node" else "scheduled_system"
            return OriginDecision(origin, f"schedule_match:{which}:{fields}_field:{scheduler}")
    return OriginDecision("script", "no_schedule_match")


def _spawned_by_run_single(cron: LegacyCron, pid: int | None, log_path: str | None) -> bool:
    return cron.status == 0 and pid is not None and cron.pid == pid and bool(log_path) and cron.log_path == log_path


def _is_node_cron(cron: LegacyCron) -> bool:
    """2.x isNodeCron: ``schedule.split(/ +/)`` gives more than five parts, or any extra schedule."""
    return len(re.split(r" +", cron.schedule or "")) > 5 or bool(cron.extra_schedules)


def schedule_matches(schedule: str, begin_s: int, tz: tzinfo, *, scheduler: str = "node") -> bool:
    """True when ``schedule`` fires within the tolerance before ``begin_s``.

    ``scheduler`` is who runs it: "node" (node-schedule) or "system" (busybox crond). @once and @boot
    schedules are never run by either.
    """
    schedule = schedule or ""
    if schedule.startswith(("@once", "@boot")):
        return False
    if scheduler == "system":
        line = crond_line(schedule)
        if line is None:
            return False
        # crond wakes on the minute and runs what matches that local minute.
        return any(line.fires(moment) for moment in _window(begin_s, MINUTE_TOLERANCE_S, tz) if moment.second == 0)
    expression = node_expression(schedule)
    if expression is None:
        return False
    tolerance = SECOND_TOLERANCE_S if expression.fields == 6 else MINUTE_TOLERANCE_S
    return any(expression.fires(moment) for moment in _window(begin_s, tolerance, tz))


def _on_the_clock(begin_s: int, tz: tzinfo) -> bool:
    """Whether the begin time, and the minute before it, are instants a local calendar can name."""
    try:
        datetime.fromtimestamp(begin_s - MINUTE_TOLERANCE_S, tz)
        datetime.fromtimestamp(begin_s, tz)
    except (ValueError, OverflowError, OSError):
        return False
    return True


def _window(begin_s: int, tolerance_s: int, tz: tzinfo) -> list[datetime]:
    """Local wall-clock times of each whole second from ``begin_s - tolerance_s`` to ``begin_s``."""
    return [datetime.fromtimestamp(begin_s - back, tz) for back in range(tolerance_s, -1, -1)]
