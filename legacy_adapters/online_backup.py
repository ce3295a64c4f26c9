"""A consistent copy of 2.x's database taken while 2.x keeps writing: SQLite's Online Backup API in short steps,
and what the copy holds of RunningInstances. Nothing here writes 2.x's file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from legacy_adapters.database_state import DatabaseState, database_state
from legacy_adapters.errors import LegacyDatabaseError

# Online Backup API steps: each step holds 2.x's SHARED lock only while it copies this many pages. A write by
# 2.x between steps restarts the copy; after a few restarts the step grows so the copy can finish.
BACKUP_PAGES = 256
BACKUP_SLEEP_S = 0.005
BACKUP_RESTARTS_PER_STEP_SIZE = 3
BACKUP_MAX_PAGES = 65_536


def backup_copy(source: Path, dest: Path, *, pages: int = BACKUP_PAGES, sleep_s: float = BACKUP_SLEEP_S,
                on_step: Callable[[int, int], None] | None = None) -> None:
    """Copy ``source`` to ``dest`` with the Online Backup API, opened read-only, in steps of ``pages`` pages.

    Between steps 2.x's database is not locked at all; if 2.x writes meanwhile, SQLite restarts the copy, so
    the result is always one consistent state. Every few restarts the step doubles (up to a whole-file step),
    so steady writes cannot keep the copy from finishing. ``on_step(remaining, total)`` is called after each
    step. Raises LegacyDatabaseError, its reason ``missing`` when there is no source file and ``not_legacy``
    (the detail naming SQLite's error) when it is not an SQLite database.
    """
    if not source.is_file():
        raise LegacyDatabaseError(str(source), DatabaseState.MISSING.value, "no such file")
    step = pages
    while True:
        restarts = _Restarts(BACKUP_RESTARTS_PER_STEP_SIZE if step != -1 else None, on_step)
        try:
            with closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=0.3)) as src, \
                    closing(sqlite3.connect(dest)) as dst:
                src.backup(dst, pages=step, progress=restarts, sleep=sleep_s)
            return
        except _TooManyRestarts:
            step = -1 if step * 2 > BACKUP_MAX_PAGES else step * 2
        except sqlite3.DatabaseError as exc:
            raise LegacyDatabaseError(str(source), DatabaseState.NOT_LEGACY.value,
                                      f"{type(exc).__name__}: {exc}") from exc


class _TooManyRestarts(Exception):
    pass


class _Restarts:
    """Backup progress callback: a successful step that did not shrink ``remaining`` means SQLite restarted
    the copy because 2.x wrote in between (a busy step is only waited out)."""

    def __init__(self, limit: int | None, on_step: Callable[[int, int], None] | None) -> None:
        self.limit, self.on_step = limit, on_step
        self.seen = 0
        self.last_remaining: int | None = None

    def __call__(self, status: int, remaining: int, total: int) -> None:
        if self.on_step is not None:
            self.on_step(remaining, total)
        if status == sqlite3.SQLITE_OK and self.last_remaining is not None and remaining >= self.last_remaining:
            self.seen += 1
            if self.limit is not None and self.seen >= self.limit:
                raise _TooManyRestarts()
        self.last_remaining = remaining


def instance_span(copy: Path, after_id: int) -> tuple[int, int]:
    """(instances with an id above ``after_id``, the newest instance id) of a private copy (never 2.x's file:
    the count reads the whole table). Raises LegacyDatabaseError, its reason the copy's DatabaseState."""
    try:
        with closing(sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            table = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'RunningInstances'"
            if not conn.execute(table).fetchone():
                return 0, 0
            count, newest = conn.execute("SELECT count(*) FILTER (WHERE id > ?), coalesce(max(id), 0) "
                                         "FROM RunningInstances", (after_id,)).fetchone()
            return int(count), int(newest)
    except sqlite3.Error as exc:
        raise LegacyDatabaseError(str(copy), database_state(copy, exc).value) from exc
