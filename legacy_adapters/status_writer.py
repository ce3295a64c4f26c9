"""LegacyStatusWriter: writes projected columns into 2.x's ``database.sqlite``, one short transaction each.

2.x runs its SQLite in rollback-journal mode with no busy timeout and retries SQLITE_BUSY itself
(legacy-2x.md 2.1). So this writer never waits inside 2.x's lock: busy timeout 0, ``BEGIN IMMEDIATE``,
a handful of statements, COMMIT; a busy database raises ``LegacyBusyError`` and the projector retries
later. It never changes journal_mode, never creates or alters a table, and touches only the projected
columns of ``Crontabs`` plus the ``RunningInstances`` rows the projection owns. A database it cannot
write at all raises ``LegacyDatabaseError`` whose reason is the reader's ``DatabaseState`` code.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from bridge.domain.errors import BridgeError
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.reader import DatabaseState, database_state
from legacy_adapters.schema import format_updated_at

_CRONTAB_COLUMNS = frozenset({"id", "status", "pid", "log_path", "last_execution_time", "last_running_time",
                              "updatedAt"})
_INSTANCE_COLUMNS = frozenset({"id", "cron_id", "pid", "log_path", "started_at", "finished_at", "status",
                               "exit_code", "createdAt", "updatedAt"})
# sqlite3 result codes, masked to the primary code.
_BUSY, _LOCKED, _READONLY = 5, 6, 8
# Busy transactions in a row after which 2.x's lock is a state of the database, not a blip: the projector then
# halts as "locked" and waits, instead of spending its rows' retry budgets (a row is parked after 8).
LOCKED_AFTER = 3
# How many of the newest RunningInstances rows the crash-adoption lookup scans (about 0.3 ms for 5000).
ADOPT_WINDOW = 5000
_BUSY_TEXT = ("database is locked", "database table is locked", "database is busy")
_CANNOT_OPEN = (14, 23)  # SQLITE_CANTOPEN, SQLITE_AUTH: the file is there but this process may not open it
_DETAIL = {
    DatabaseState.HOT_JOURNAL: "a writer died mid-transaction and this connection cannot roll its journal back",
    DatabaseState.READ_ONLY: "attempt to write a readonly database",
    DatabaseState.MISSING: "cannot be opened for writing",
    DatabaseState.UNREADABLE: "cannot be opened for writing",
    DatabaseState.CORRUPT: "truncated or malformed",
    DatabaseState.NOT_LEGACY: "not an SQLite database",
}


class LegacyBusyError(BridgeError):
    """2.x's database is locked by another writer right now; transient, retry later."""

    code = "LEGACY_BUSY"

    def __init__(self, operation: str) -> None:
        super().__init__(f"the 2.x database is busy ({operation}); the projection will retry", operation=operation)
        self.operation = operation


class CrontabValues(Protocol):
    status: int
    pid: int | None
    log_path: str | None
    last_execution_time: int | None
    last_running_time: int | None


class InstanceValues(Protocol):
    cron_id: int
    pid: int | None
    log_path: str | None
    started_at: int
    finished_at: int | None
    status: int
    exit_code: int | None


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


# One cron's projection: (cron_id, crontab values, instance values or None, known instance row id or None).
Write = tuple[int, CrontabValues, InstanceValues | None, int | None]


class LegacyStatusWriter:
    """Applies projections to 2.x's database, each call in one short ``BEGIN IMMEDIATE`` transaction.

    One connection is kept between calls (outside a transaction it holds no lock) and reopened when the
    file is replaced, so a restored database is never written through a stale handle. Not for concurrent
    use from several threads: one projector owns one writer.
    """

    MAX_BATCH = 64  # keeps a batch transaction to a few milliseconds

    def __init__(self, database_path: str | os.PathLike[str]) -> None:
        self.path = Path(database_path)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._checked = False
        self._busy_in_a_row = 0

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: never create a missing file. timeout 0: fail fast instead of queueing behind 2.x.
        uri = f"{self.path.resolve().as_uri()}?mode=rw"
        conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 0")
        return conn

    def apply(self, cron_id: int, crontab: CrontabValues, instance: InstanceValues | None,
              instance_id: int | None, now_ms: int) -> int | None:
        """Write one cron's projection; returns the instance row id (None without an instance).

        Raises LegacyBusyError when 2.x holds the lock (nothing written); LegacyDatabaseError when the file
        cannot take the write at all (nothing written), its reason a DatabaseState code: still locked after
        LOCKED_AFTER tries in a row, hot_journal, missing, empty, unreadable, corrupt, read_only, not_legacy.
        """
        return self.apply_batch([(cron_id, crontab, instance, instance_id)], now_ms)[0]

    def apply_batch(self, writes: Sequence[Write], now_ms: int) -> list[int | None]:
        """Several crons' projections in ONE transaction (all or nothing), in order; same errors as apply."""
        if len(writes) > self.MAX_BATCH:
            raise ValueError(f"at most {self.MAX_BATCH} writes per transaction")
        stamp = format_updated_at(now_ms)
        with self._translated("write"):
            conn = self._connection()
            with self._immediate(conn):
                if not self._checked:
                    self._check_schema(conn)
                found: list[int | None] = []
                for cron_id, crontab, instance, instance_id in writes:
                    _update_crontab(conn, cron_id, crontab, stamp)
                    found.append(None if instance is None else _write_instance(conn, instance, instance_id, stamp))
        self._checked = True
        self._busy_in_a_row = 0
        return found

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._identity, self._checked = None, None, False

    def _connection(self) -> sqlite3.Connection:
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            raise LegacyDatabaseError(str(self.path), DatabaseState.MISSING.value, "no such file") from None
        if not stat.S_ISREG(status.st_mode):
            self.close()
            raise LegacyDatabaseError(str(self.path), DatabaseState.UNREADABLE.value, "not a regular file")
        if status.st_size == 0:  # emptied by a crash, or 2.x's first boot: never the bridge's to fill
            self.close()
            raise LegacyDatabaseError(str(self.path), DatabaseState.EMPTY.value, "an empty file")
        identity = (status.st_dev, status.st_ino)
        if self._conn is None or identity != self._identity:
            self.close()
            self._conn, self._identity = self._connect(), identity
        return self._conn

    @contextmanager
    def _immediate(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            # A reader still holds SHARED: COMMIT cannot get EXCLUSIVE without waiting. Give the lock back.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        for table, needed in (("Crontabs", _CRONTAB_COLUMNS), ("RunningInstances", _INSTANCE_COLUMNS)):
            present = {row[0] for row in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))}
            if not present and not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'").fetchone():
                raise LegacyDatabaseError(str(self.path), DatabaseState.EMPTY.value, "no table yet")
            if not present:
                raise LegacyDatabaseError(str(self.path), "not_legacy", f"no {table} table")
            missing = sorted(needed - present)
            if missing:
                raise LegacyDatabaseError(str(self.path), "not_legacy", f"{table} lacks {', '.join(missing)}")

    @contextmanager
    def _translated(self, operation: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            self.close()  # start from a fresh connection next time
            raise self._classify(exc, operation) from exc

    def _classify(self, exc: sqlite3.Error, operation: str) -> Exception:
        code, text = _primary_code(exc), str(exc).lower()
        if code in (_BUSY, _LOCKED) or any(marker in text for marker in _BUSY_TEXT):
            self._busy_in_a_row += 1
            if self._busy_in_a_row < LOCKED_AFTER:
                return LegacyBusyError(operation)
            return LegacyDatabaseError(str(self.path), DatabaseState.LOCKED.value,
                                       f"2.x kept its lock through {self._busy_in_a_row} tries in a row")
        if "no such table" in text or "no such column" in text:
            return LegacyDatabaseError(str(self.path), "not_legacy", "a 2.x table or column is missing")
        state = database_state(self.path, exc)  # the connection is closed: nothing of ours holds a lock
        if state is DatabaseState.UNREADABLE and (code == _READONLY or "readonly database" in text):
            state = DatabaseState.READ_ONLY
        if state is DatabaseState.UNREADABLE and code not in _CANNOT_OPEN:
            return exc  # anything else (I/O, disk full): transient as far as we know; the row is retried
        return LegacyDatabaseError(str(self.path), state.value, _DETAIL.get(state, str(exc)))


def _update_crontab(conn: sqlite3.Connection, cron_id: int, crontab: CrontabValues, stamp: str) -> None:
    # None leaves a column as it is, like Sequelize dropping undefined attributes (2.x never clears pid).
    values: dict[str, Any] = {"status": crontab.status}
    optional = {"pid": crontab.pid, "log_path": crontab.log_path,
                "last_execution_time": crontab.last_execution_time, "last_running_time": crontab.last_running_time}
    values.update({name: value for name, value in optional.items() if value is not None})
    values["updatedAt"] = stamp
    sets = ", ".join(f"`{name}` = ?" for name in values)
    # An unknown id changes nothing, as in 2.x's CronService.status.
    conn.execute(f"UPDATE `Crontabs` SET {sets} WHERE `id` = ?", (*values.values(), cron_id))


_INSTANCE_FIELDS = ("cron_id", "pid", "log_path", "started_at", "finished_at", "status", "exit_code")


def _instance_values(instance: InstanceValues) -> tuple[Any, ...]:
    return tuple(getattr(instance, name) for name in _INSTANCE_FIELDS)


def _write_instance(conn: sqlite3.Connection, instance: InstanceValues, instance_id: int | None,
                    stamp: str) -> int:
    values = _instance_values(instance)
    target = instance_id if instance_id is not None else _adoptable(conn, instance)
    if target is not None:
        sets = ", ".join(f"`{name}` = ?" for name in _INSTANCE_FIELDS)
        updated = conn.execute(f"UPDATE `RunningInstances` SET {sets}, `updatedAt` = ? WHERE `id` = ?",
                               (*values, stamp, target)).rowcount
        if updated == 1:
            return target
    names = ", ".join(f"`{name}`" for name in (*_INSTANCE_FIELDS, "createdAt", "updatedAt"))
    cursor = conn.execute(f"INSERT INTO `RunningInstances` ({names}) VALUES ({', '.join('?' * 9)})",
                          (*values, stamp, stamp))
    return int(cursor.lastrowid or 0)


def _adoptable(conn: sqlite3.Connection, instance: InstanceValues) -> int | None:
    """A row this projection inserted before it could remember the mapping (a crash in between).

    In primary mode 2.x receives no status callbacks for these executions, so a row with exactly this
    cron, pid, log_path and start can only be ours. ``IS`` compares NULLs as equal. The table has no index
    but its primary key and is never pruned, so only the newest ADOPT_WINDOW rows are looked at: the lost
    row was inserted just before the crash, and the row is retried first thing after a restart.
    """
    row = conn.execute(
        "SELECT `id` FROM `RunningInstances` WHERE `id` > (SELECT max(`id`) FROM `RunningInstances`) - ? "
        "AND `cron_id` = ? AND `pid` IS ? AND `log_path` IS ? AND `started_at` = ? ORDER BY `id` DESC LIMIT 1",
        (ADOPT_WINDOW, instance.cron_id, instance.pid, instance.log_path, instance.started_at),
    ).fetchone()
    return int(row[0]) if row else None
