"""What a running 2.x install says about itself, from evidence on disk and in /proc (docs/legacy-2x.md#ports,
#log-paths).

- Ports. The entrypoint exports `BACK_PORT` from `QlPort` before it sources `config/config.sh`, and the
  backend listens on `BACK_PORT`. Every task shell (`task.sh`, `update.sh`) inherits the environment of
  whoever spawned it — the backend, crond, a `docker exec` terminal — then sources `config.sh`, and only
  then computes `ql_port=${QlPort:-5700}`. So `config.sh` is the one place that points every shell at
  the bridge without moving the backend (`seam_block`, `task_shell`).
- Time zone. Log file names carry the local time of the execution's start and `RunningInstances.
  started_at` the same moment in unix seconds: their difference is the UTC offset 2.x ran with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_PORT = 5700
BACKEND_SCRIPT = b"static/build/app.js"  # what pm2 (or the plain-node fallback) runs
_LOG_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})(?:-\d{3})?\.log$")
_MAX_OFFSET_S = 14 * 3600


@dataclass(frozen=True)
class BackendProcess:
    pid: int
    environ: dict[str, str] | None  # None when /proc/<pid>/environ cannot be read

    @property
    def listen_port(self) -> int | None:
        """The port the backend listens on (back/config/index.ts reads BACK_PORT), when readable."""
        if self.environ is None:
            return None
        return _port(self.environ.get("BACK_PORT")) or _port(self.environ.get("QlPort")) or DEFAULT_PORT

    @property
    def inherited_qlport(self) -> int | None:
        """The QlPort every shell it spawns starts with, before config.sh."""
        return None if self.environ is None else _port(self.environ.get("QlPort"))


def find_backend_processes(proc_root: Path = Path("/proc")) -> list[BackendProcess]:
    """2.x's Node backend processes visible from here (none outside its pid namespace)."""
    found = []
    for pid_dir in _pid_dirs(proc_root):
        try:
            argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(arg.endswith(BACKEND_SCRIPT) for arg in argv):
            continue
        try:
            raw = (pid_dir / "environ").read_bytes()
            environ: dict[str, str] | None = dict(_pairs(raw.split(b"\0")))
        except OSError:
            environ = None
        found.append(BackendProcess(int(pid_dir.name), environ))
    return found


def log_name_offset_s(log_path: str | None, started_at_s: float | None) -> int | None:
    """The UTC offset of the clock that named the log file, to 15 minutes; None when it cannot be told."""
    if not log_path or started_at_s is None or isinstance(started_at_s, bool):
        return None
    match = _LOG_STAMP.search(log_path)
    if match is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(g) for g in match.groups())
        local = datetime(year, month, day, hour, minute, second, tzinfo=UTC)  # the wall clock, read as if UTC
        moment = datetime.fromtimestamp(float(started_at_s), UTC)
    except (ValueError, OverflowError, OSError):
        return None
    offset = round((local - moment).total_seconds() / 900) * 900
    return int(offset) if abs(offset) <= _MAX_OFFSET_S else None


def format_offset(offset_s: int) -> str:
    sign = "+" if offset_s >= 0 else "-"
    hours, minutes = divmod(abs(offset_s) // 60, 60)
    return f"{sign}{hours:02d}:{minutes:02d}"


def _port(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and 0 < int(value) < 65536 else None


def _pid_dirs(proc_root: Path) -> Iterator[Path]:
    try:
        entries = list(proc_root.iterdir())
    except OSError:
        return
    yield from (p for p in entries if p.name.isdigit())


def _pairs(items: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    for item in items:
        name, sep, value = item.partition(b"=")
        if sep:
            yield name.decode("utf-8", "replace"), value.decode("utf-8", "replace")
