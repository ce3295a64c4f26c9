"""Which scheduler 2.x runs its crons with (docs/legacy-2x.md#scheduler-mode): crond ("system") or its own node-schedule
("node")."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Literal


def detect_scheduler_mode(environ: Mapping[str, str] | None = None) -> Literal["system", "node"]:
    """2.x's CronService.schedulerMode: QL_SCHEDULER if valid, else "system" when crond exists."""
    env = os.environ if environ is None else environ
    configured = env.get("QL_SCHEDULER", "").strip()
    if configured in ("system", "node"):
        return "system" if configured == "system" else "node"
    return "system" if shutil.which("crond") else "node"
