"""When 2.x's Node scheduler next fires a 6-field ``*/N * * * * *`` cron: the begin second of an execution that
runCron started (the only starts that can replace a single-instance cron's run, bridge/jobs/stop_decisions.py)."""

from __future__ import annotations

import time

EVERY_5_S = "*/5 * * * * *"


def next_tick(every_s: int = 5) -> int:
    """The next second after now on which ``*/<every_s> * * * * *`` fires (within ``every_s`` of now).

    Take it before a simulated runCron kill, never after: 2.x kills at the fire, so the kill's finish time and the
    next start are one moment, and a tick taken after the kill may fall a second past the replacement gap."""
    return (int(time.time()) // every_s + 1) * every_s
