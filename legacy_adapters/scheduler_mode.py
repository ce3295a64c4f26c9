"""Which scheduler 2.x runs its crons with (docs/legacy-2x.md#scheduler-mode): crond ("system") or its own node-schedule
("node")."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from enum import StrEnum


class SchedulerMode(StrEnum):
    """2.x's CronService.schedulerMode; the value is 2.x's own word (QL_SCHEDULER, BRIDGE_LEGACY_SCHEDULER)."""

    SYSTEM = "system"  # busybox crond runs the crontab 2.x writes
    NODE = "node"  # node-schedule inside 2.x's back end


def detect_scheduler_mode(environ: Mapping[str, str] | None = None) -> SchedulerMode:
    """2.x's CronService.schedulerMode: QL_SCHEDULER if valid, else "system" when crond exists."""
    env = os.environ if environ is None else environ
    configured = env.get("QL_SCHEDULER", "").strip()
    if configured in ("system", "node"):
        return SchedulerMode(configured)
    return SchedulerMode.SYSTEM if shutil.which("crond") else SchedulerMode.NODE


def resolve_scheduler_mode(setting: str, environ: Mapping[str, str] | None = None) -> SchedulerMode:
    """The mode BRIDGE_LEGACY_SCHEDULER names, or for ``auto`` the one 2.x would pick here (detect_scheduler_mode).
    Raises ValueError for any other word (Settings admits none)."""
    return detect_scheduler_mode(environ) if setting == "auto" else SchedulerMode(setting)
