"""2.x's own task shells at a release tag (tests/support/qinglong_source.py), run for real to leave the log files a
release writes.

``task.sh`` runs as crond or Node would spawn it (``real_time=false no_tee=true ID=<id>``), against a test's data
dir. Its callbacks go nowhere: ``curl`` on its PATH is ``refused_curl``, a double of a backend that is not
listening (curl's exit 7, nothing printed), so no test ever calls whatever happens to listen on 5600 or 5700.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from legacy_adapters.testing.datadir import LegacyDataDir
from tests.support import qinglong_source

PRE_V221 = ("v2.17.13", "v2.18.1", "v2.18.3", "v2.19.2", "v2.20.2")
_REFUSED_CURL = "# double: no backend listens, as curl reports a refused connection\nexit 7"


def install(release: str, root: Path) -> Path:
    """A QL_DIR with ``release``'s shells and a PATH folder holding the refused curl; returns QL_DIR."""
    ql_dir = root / f"ql-{release}"
    if not ql_dir.exists():
        qinglong_source.install(release, ql_dir)
        qinglong_source.stand_in(ql_dir / "test-bin" / "curl", _REFUSED_CURL)
    return ql_dir


def _env(ql_dir: Path, data: LegacyDataDir, cron_id: int, tz: str) -> dict[str, str]:
    return {"PATH": f"{ql_dir / 'test-bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(ql_dir),
            "QL_DIR": str(ql_dir), "QL_DATA_DIR": str(data.root), "TZ": tz, "ID": str(cron_id),
            "real_time": "false", "no_tee": "true", "LANG": "C.UTF-8"}


def _new_log(folder: Path, before: set[Path], deadline_s: float = 10.0) -> Path:
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        fresh = set(folder.glob("*.log")) - before if folder.exists() else set()
        if fresh:
            return fresh.pop()
        time.sleep(0.02)
    raise AssertionError(f"the task shell wrote no log in {folder}")


def run_task(release: str, data: LegacyDataDir, cron_id: int, script: str, body: str, *, tz: str = "UTC",
             stop_after_s: float | None = None) -> str:
    """Run ``task <script> now`` (``body`` as the .sh script) with ``release``'s shells; returns the log path
    relative to data/log. ``stop_after_s``: SIGTERM to the shell's process group once it has begun (as 2.x's
    stop kills the shell and its descendants), so its trap writes the end line."""
    ql_dir = install(release, data.root.parent)
    (data.root / "scripts" / script).write_text(body)
    folder = data.log_dir / f"{Path(script).stem}_{cron_id}"
    before = set(folder.glob("*.log")) if folder.exists() else set()
    shell = subprocess.Popen(["bash", str(ql_dir / "shell" / "task.sh"), script, "now"], cwd=data.root,
                             env=_env(ql_dir, data, cron_id, tz), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        log = _new_log(folder, before)
        if stop_after_s is not None:
            until = time.monotonic() + 10
            while "开始执行" not in log.read_text(errors="replace") and time.monotonic() < until:
                time.sleep(0.02)
            time.sleep(stop_after_s)
            os.killpg(shell.pid, signal.SIGTERM)
        shell.wait(timeout=30)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    return str(log.relative_to(data.log_dir))
