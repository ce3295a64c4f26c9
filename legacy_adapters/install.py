"""What a running 2.x install says about itself, from evidence on disk and in /proc (docs/legacy-2x.md#ports,
#log-paths).

- Ports. The entrypoint exports `BACK_PORT` from `QlPort` before it sources `config/config.sh`, and the
  backend listens on `BACK_PORT`. Every task shell (`task.sh`, `update.sh`) inherits the environment of
  whoever spawned it — the backend, crond, a `docker exec` terminal — then sources `config.sh`, and only
  then computes `ql_port=${QlPort:-5700}`. So `config.sh` is the one place that points every shell at
  the bridge without moving the backend (`seam_block`, `task_shell`).
- Which install. A host may run two 2.x installs; a backend belongs to the one whose data directory it
  resolves as `back/config/index.ts` does (every tag v2.17.0–v2.21.0): `QL_DATA_DIR` (environment, else the
  install's `.env`; read from v2.17.6), else `<QL_DIR>/data`, where `QL_DIR` is the environment's or two
  folders above the `static/build/` of the script it runs; a relative path is taken from its cwd. Its port
  is `BACK_PORT` (environment, else `.env`), else the release's default
  (docs/legacy-2x.md#processes-ports-and-health-before-v221).
- Time zone. Log file names carry the local time of the execution's start (`task.sh`'s `log_time` and
  `begin_timestamp` come from one `date` reading), and `RunningInstances.started_at` (v2.21) or, before
  v2.21, the `Crontabs` row's `last_execution_time` beside its `log_path` (both from the same callback) the
  same moment in unix seconds: their difference is the UTC offset 2.x ran with.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from legacy_adapters.releases import ReleaseProfile

DEFAULT_PORT = 5700
BACKEND_SCRIPT = b"static/build/app.js"  # what pm2 (or the plain-node fallback) runs
_LOG_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})(?:-\d{3})?\.log$")
_MAX_OFFSET_S = 14 * 3600


HEALTH_PATH = "/api/health"  # the backend's own health route from v2.19.0 (back/api/health.ts)
# Served by the backend of every release v2.17.0–v2.21.0 and listed in config.apiWhiteList, so it needs no
# token: GET /api/system (back/api/system.ts, back/config/index.ts). No trailing slash: the whitelist is matched
# against the exact path.
SYSTEM_PATH = "/api/system"


@dataclass(frozen=True)
class BackendProbe:
    """The request that tells whether 2.x's backend answers, and why that one (``why`` is None for the health
    route itself)."""

    path: str
    why: str | None = None


def backend_probe(profile: ReleaseProfile | None) -> BackendProbe:
    """What to ask the backend behind BRIDGE_LEGACY_URL on ``profile``'s release (None: not known, the newest).

    Before v2.19 ``/api/health`` is served only by ``public.js`` on port 5400, never by the backend, which
    answers it 401 (not in its token whitelist) (docs/legacy-2x.md#processes-ports-and-health-before-v221)."""
    if profile is None or profile.health_on_backend:
        return BackendProbe(HEALTH_PATH)
    return BackendProbe(SYSTEM_PATH, f"{HEALTH_PATH} on {profile.name} is served by public.js (port 5400), not by "
                                     f"the backend; {SYSTEM_PATH} is the backend's and needs no token")


@dataclass(frozen=True)
class BackendProcess:
    pid: int
    environ: dict[str, str] | None  # None when /proc/<pid>/environ cannot be read
    argv: tuple[str, ...] = ()
    cwd: Path | None = None  # /proc/<pid>/cwd, None when it cannot be read

    @property
    def listen_port(self) -> int | None:
        """The port the backend listens on when the release is not known (v2.20+'s default), when readable."""
        return self.listen_port_or(DEFAULT_PORT)

    def listen_port_or(self, default: int) -> int | None:
        """``BACK_PORT`` as back/config/index.ts reads it (the environment, else the install's ``.env``), else
        ``default`` (the release's, ``ReleaseProfile.default_backend_port``); None when unreadable. ``QlPort``
        is never the backend's: before v2.20 it is nginx's port, from v2.20 the entrypoint copies it into
        ``BACK_PORT``."""
        if self.environ is None:
            return None
        return _port(self.setting("BACK_PORT")) or default

    @property
    def inherited_qlport(self) -> int | None:
        """The QlPort every shell it spawns starts with, before config.sh."""
        return None if self.environ is None else _port(self.environ.get("QlPort"))

    @property
    def install_root(self) -> Path | None:
        """2.x's ``QL_DIR``: the environment's, else two folders above ``static/build/`` of the script it runs."""
        if self.environ is None:
            return None
        if self.environ.get("QL_DIR"):
            return self._absolute(self.environ["QL_DIR"].rstrip("/") or "/")
        script = next((a for a in self.argv if a.endswith(BACKEND_SCRIPT.decode())), None)
        path = self._absolute(script) if script else None
        return path.parent.parent.parent if path is not None else None

    def setting(self, name: str) -> str | None:
        """A variable as the backend's config sees it: its environment, else its install's ``.env`` (dotenv
        overrides nothing already set)."""
        if self.environ is None:
            return None
        if self.environ.get(name):
            return self.environ[name]
        root = self.install_root
        return read_dotenv(root / ".env").get(name) if root is not None else None

    def data_dir(self, *, reads_ql_data_dir: bool = True) -> Path | None:
        """The data directory this backend serves (``reads_ql_data_dir``: the release honours ``QL_DATA_DIR``);
        None when it cannot be told from here."""
        configured = self.setting("QL_DATA_DIR") if reads_ql_data_dir else None
        if configured:
            return self._absolute(configured.rstrip("/") or "/")
        root = self.install_root
        return root / "data" if root is not None else None

    def _absolute(self, text: str) -> Path | None:
        path = Path(text)
        if path.is_absolute():
            return path
        return self.cwd / path if self.cwd is not None else None


def same_directory(left: Path, right: Path) -> bool:
    """Whether two paths name one folder (symlinks and ``..`` resolved where they exist)."""
    return os.path.realpath(left) == os.path.realpath(right)


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a dotenv file (comments, ``export`` and quotes as dotenv takes them); empty when
    it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in text[:65_536].splitlines():
        name, sep, value = line.strip().removeprefix("export ").partition("=")
        if not sep or name.startswith("#") or not name.strip():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].strip()
        found.setdefault(name.strip(), value)
    return found


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
        try:
            cwd: Path | None = Path(os.readlink(pid_dir / "cwd"))
        except OSError:
            cwd = None
        found.append(BackendProcess(int(pid_dir.name), environ,
                                    tuple(a.decode("utf-8", "replace") for a in argv if a), cwd))
    return found


def log_name_offset_s(log_path: str | None, started_at_s: float | None) -> int | None:
    """The UTC offset of the clock that named the log file, to 15 minutes; None when it cannot be told.

    ``started_at_s``: the same execution's begin in unix seconds (``RunningInstances.started_at``, or before
    v2.21 the ``Crontabs`` row's ``last_execution_time`` written with that ``log_path``)."""
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
