"""What the commands print with: the program's name, a console that never cuts a line off a terminal, and
times in the operator's zone with its offset."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from rich.console import Console

from bridge.config import Settings, local_zone_name

PROG = "ql-bridge"
WIDE = 100_000  # columns of a console that is not a terminal: a line is never wrapped or cut


def console() -> Console:
    """Rich output for stdout. Off a terminal (`docker logs`, a pipe, a file) it never wraps or cuts a line."""
    terminal = Console(markup=False, highlight=False)
    if terminal.is_terminal:
        return terminal
    return Console(markup=False, highlight=False, width=WIDE, soft_wrap=True)


def local_time(ms: int, zone: str) -> str:
    """Epoch ms as ``2026-12-04 17:03:12 +08:00`` in ``zone``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(zone))
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.isoformat()[-6:]}"


def operator_zone(settings: Settings) -> str:
    """The zone times are shown in: BRIDGE_LEGACY_TZ if set, else the host's."""
    return settings.legacy_tz or local_zone_name()
