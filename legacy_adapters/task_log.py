"""A task's log file as 2.x's task shell leaves it: whether its end line says the shell's signal trap ended it.

``task.sh``'s trap runs ``handle_task_end`` with ``MANUAL=true``, whose end line reads ``## 执行结束(手动停止)...``
from v2.18.0 (``## 已停止`` in v2.21.0; nothing in v2.17) (docs/legacy-2x.md#stops-and-log-lines-before-v221). The
bridge keeps only a digest of a log path, so the file is found by its digest: first the path 2.x's Crontabs row
holds, then the newest files of that row's log directory (the cron's own: a newer run of the cron has moved the
row on). Only the file's last bytes are read, and nothing of them leaves this module but a yes or no.
"""

from __future__ import annotations

import os
from pathlib import Path

from legacy_adapters.callbacks import log_path_digest

TAIL_BYTES = 4096  # the end line and the error text v2.18.1+ may append to it fit in far less
NEWEST_FILES_READ = 256  # a cron's log directory may hold years of runs: only the newest names are digested


def find_task_log(log_dir: Path, log_ref: str, row_log_path: str | None) -> Path | None:
    """The file under ``log_dir`` whose 2.x log path (relative to ``log_dir``) has the digest ``log_ref``."""
    if not row_log_path or row_log_path.startswith("/"):
        return None  # /dev/null (v2.20 log_name) or a path outside the log directory: nothing the bridge reads
    if log_path_digest(row_log_path) == log_ref:
        return _inside(log_dir, row_log_path)
    folder, _, _ = row_log_path.rpartition("/")
    directory = _inside(log_dir, folder) if folder else None
    if directory is None:
        return None
    try:
        names = sorted((entry.name for entry in os.scandir(directory) if entry.is_file()), reverse=True)
    except OSError:
        return None
    for name in names[:NEWEST_FILES_READ]:
        if log_path_digest(f"{folder}/{name}") == log_ref:
            return directory / name
    return None


def ends_with_stop_marker(path: Path, marker: str) -> bool:
    """Whether the last end line of the log carries ``marker`` (False when the file cannot be read)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - TAIL_BYTES))
            tail = file.read().decode("utf-8", errors="replace")
    except OSError:
        return False
    end_lines = [line for line in tail.splitlines() if line.startswith("## ")]
    return bool(end_lines) and marker in end_lines[-1]


def _inside(log_dir: Path, relative: str) -> Path | None:
    """``log_dir / relative``, or None when it would leave ``log_dir`` (a path 2.x took from a callback body)."""
    root = log_dir.resolve()
    candidate = (root / relative).resolve()
    return candidate if candidate.is_relative_to(root) else None
