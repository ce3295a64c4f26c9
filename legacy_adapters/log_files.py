"""2.x's per-execution log files (``data/log/<log_path>``) read as evidence of an execution.

Before v2.21 an execution leaves only its ``Crontabs`` row (the latest execution of the cron) and its log file
(docs/legacy-2x.md#crontabs-before-v221, #stops-and-log-lines-before-v221, #log-paths). The file's name is its
start in 2.x's local time (``<YYYY-MM-DD-HH-MM-SS-mmm>.log``; ``update.sh`` leaves out the milliseconds); the
task shell writes ``## 开始执行... <begin>`` first and ``## 执行结束... <end>  耗时 <N> 秒`` last, with
``(手动停止)`` after ``执行结束`` when its trap ran (v2.18.0+, ``shell/share.sh`` ``handle_task_end``). A callback
failure may follow either line on the same line (v2.18.1+: ``, 任务状态更新失败(<text>)``) or on its own line
(v2.17.x, v2.18.0: ``## 更新任务状态失败(<text>)``), and a script may print anything, so the first start line of
the head and the last end line of the tail are taken. Only the head and the tail of a file are read; a file that
cannot be read, or is still being written, gives what it shows (no end line: still running as far as it says).
Nothing of a log's text leaves this module but those times, the duration and whether it was stopped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path

from legacy_adapters.callbacks import log_path_digest

HEAD_BYTES = 4096  # the start line is the first line the shell writes (v2.17: after a failed callback's line)
TAIL_BYTES = 16384  # the end line, then at most a failed callback's text (a response body) and Node's own lines
NEWEST_FILES_SEARCHED = 256  # a cron's log folder may hold years of runs: ``find`` digests only the newest names
NO_LOG = "/dev/null"  # v2.20's log_name /dev/null: nothing is written (shell/task.sh at v2.20.0)
_MOMENT = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
_START_LINE = re.compile(rf"^## 开始执行\.\.\. {_MOMENT}", re.MULTILINE)
_END_LINE = re.compile(rf"^## 执行结束(?P<suffix>[^.\n]*)\.\.\. {_MOMENT}  耗时 (?P<seconds>\d+) 秒", re.MULTILINE)
_FILE_NAME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)-(\d\d)-(\d\d)-(\d\d)(?:-(\d{3}))?\.log$")
# task.sh's log directory without log_name: ``<parent dir>_<name>_<ID>``; runSingle's uniq path ends the same way.
_DIR_CRON_ID = re.compile(r"_(\d+)$")


@dataclass(frozen=True, slots=True)
class LoggedExecution:
    """What one log file says of its execution: times in unix seconds (2.x's own unit), no text."""

    log_path: str  # relative to data/log, as 2.x's Crontabs.log_path and the callbacks name it
    cron_id: int | None  # from the log directory (log_name, or the ``_<ID>`` suffix); None: not a cron's
    named_start_ms: int | None  # the file name's moment; runSingle names the file just before the shell begins
    started_s: int | None  # the start line's second (the callbacks' last_execution_time), else the name's
    ended_s: int | None  # the end line's second; None: no end line (running, or it never wrote one)
    duration_s: int | None  # ``耗时 N 秒``: end minus begin, 0 written as 1
    stopped: bool  # the end line carries the release's stop marker (its trap ran)
    start_line: bool = True  # False: no start line in the head (not written yet, or not a task log)

    @property
    def ended(self) -> bool:
        return self.ended_s is not None

    @property
    def log_ref(self) -> str:
        """The digest a Run of this execution holds (legacy_adapters.callbacks.log_path_digest)."""
        return log_path_digest(self.log_path) or ""


def name_start_ms(file_name: str, tz: tzinfo) -> int | None:
    """A log file name's moment in UTC ms, read in 2.x's zone; None when it is not a task log's name."""
    match = _FILE_NAME.match(file_name)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1000 + int(match[7] or 0)


def local_seconds(text: str, tz: tzinfo) -> int | None:
    """``YYYY-MM-DD HH:MM:SS`` in 2.x's zone as unix seconds."""
    try:
        return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp())
    except ValueError:
        return None


def parse_log(head: str, tail: str, *, tz: tzinfo, stop_marker: str | None) -> tuple[int | None, int | None,
                                                                                    int | None, bool]:
    """(start second, end second, duration seconds, stopped) from a log's head and tail text."""
    start = _START_LINE.search(head)
    ends = list(_END_LINE.finditer(tail))
    started = local_seconds(start[1], tz) if start else None
    if not ends:
        return started, None, None, False
    end = ends[-1]
    stopped = stop_marker is not None and stop_marker in end[0]
    return started, local_seconds(end[2], tz), int(end["seconds"]), stopped


def _head_and_tail(path: Path) -> tuple[str, str] | None:
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
            size = os.fstat(file.fileno()).st_size
            if size > HEAD_BYTES:
                file.seek(max(size - TAIL_BYTES, 0))
                tail = file.read(TAIL_BYTES)
            else:
                tail = head
    except OSError:
        return None
    return head.decode("utf-8", errors="replace"), tail.decode("utf-8", errors="replace")


class LogDirectory:
    """2.x's ``data/log`` folder, read-only: one execution's file by its log path, or every task log of a window.

    ``stop_marker`` is the release's (ReleaseProfile.stop_marker; None on v2.17, whose trap leaves no marker).
    """

    def __init__(self, root: Path, tz: tzinfo, stop_marker: str | None) -> None:
        self.root = root
        self._tz = tz
        self._stop_marker = stop_marker

    @property
    def marks_stops(self) -> bool:
        """Whether the release's trap leaves a stop marker on a stopped execution's end line."""
        return self._stop_marker is not None

    def read(self, log_path: str | None, cron_id: int | None = None) -> LoggedExecution | None:
        """The execution the file at ``log_path`` (relative to data/log) describes; None when there is no such
        file under data/log (never written, /dev/null, removed by ``ql rmlog``) or it cannot be read."""
        if not log_path or log_path == NO_LOG:
            return None
        path = self.root / log_path
        try:
            if not path.resolve().is_relative_to(self.root.resolve()) or not path.is_file():
                return None
        except OSError:
            return None
        return self._read(path, log_path, cron_id)

    def find(self, log_ref: str, row_log_path: str | None) -> str | None:
        """The log path (relative to data/log) whose digest is ``log_ref``: the one 2.x's Crontabs row holds, else
        one of the newest files beside it (a newer run of the cron has moved the row on). The bridge keeps only a
        digest of a log path, so this is how it finds the file again; ``read`` then keeps it inside data/log."""
        if not row_log_path or row_log_path.startswith("/"):
            return None  # /dev/null (v2.20's log_name) or a path outside data/log: nothing the bridge reads
        if log_path_digest(row_log_path) == log_ref:
            return row_log_path
        folder, _, _ = row_log_path.rpartition("/")
        if not folder:
            return None
        try:
            names = sorted((e.name for e in os.scandir(self.root / folder) if e.is_file(follow_symlinks=False)),
                           reverse=True)
        except OSError:
            return None
        return next((f"{folder}/{name}" for name in names[:NEWEST_FILES_SEARCHED]
                     if log_path_digest(f"{folder}/{name}") == log_ref), None)

    def _read(self, path: Path, log_path: str, cron_id: int | None) -> LoggedExecution | None:
        text = _head_and_tail(path)
        if text is None:
            return None
        started, ended, duration, stopped = parse_log(*text, tz=self._tz, stop_marker=self._stop_marker)
        named = name_start_ms(path.name, self._tz)
        start_line = started is not None
        if started is None and named is not None:
            started = named // 1000
        return LoggedExecution(log_path, cron_id, named, started, ended, duration, stopped, start_line)

    def scan(self, since_ms: int, until_ms: int | None = None,
             dirs: Mapping[str, int] | None = None) -> Iterator[LoggedExecution]:
        """Every task log of a cron whose name's moment is in [since_ms, until_ms], by directory then name.

        A directory is a cron's when ``dirs`` (log_name → cron id, from Crontabs) names it or its name ends in
        ``_<ID>`` (task.sh's and runSingle's default); other folders (``update``, ``repo``, ``.tmp``…) and files
        without a start line (``ql repo``/``ql raw`` write none) are not executions the bridge can place.
        """
        dirs = dirs or {}
        try:
            folders = sorted((entry for entry in os.scandir(self.root) if entry.is_dir(follow_symlinks=False)),
                             key=lambda entry: entry.name)
        except OSError:
            return
        for folder in (f for f in folders if not f.name.startswith(".")):
            cron_id = dirs.get(folder.name)
            if cron_id is None and (match := _DIR_CRON_ID.search(folder.name)):
                cron_id = int(match[1])
            if cron_id is None:
                continue
            yield from self._scan_folder(Path(folder.path), folder.name, cron_id, since_ms, until_ms)

    def _scan_folder(self, folder: Path, name: str, cron_id: int, since_ms: int,
                     until_ms: int | None) -> Iterator[LoggedExecution]:
        try:
            files = sorted(entry.name for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False))
        except OSError:
            return
        for file_name in files:
            named = name_start_ms(file_name, self._tz)
            if named is None or named < since_ms or (until_ms is not None and named > until_ms):
                continue
            found = self._read(folder / file_name, f"{name}/{file_name}", cron_id)
            if found is not None and (found.ended or found.start_line):
                yield found
