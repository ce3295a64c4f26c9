"""LegacyStatusWriter: writes projected columns into 2.x's ``database.sqlite``, in as few 2.x transactions as it can.

2.x runs its SQLite in rollback-journal mode and waits for a busy database in SQLite's busy handler
(docs/legacy-2x.md#connection-and-locking), so every transaction of ours holds 2.x's only write lock across two syncs
while 2.x's writers sleep behind it. This writer therefore reads first, without any write lock, and opens a transaction
only for what would change: ``BEGIN IMMEDIATE``, the differing rows, COMMIT. It never waits inside 2.x's lock (busy
timeout 0: a busy database raises ``LegacyBusyError`` and the projector retries later), never changes a setting of 2.x's
database (journal_mode, synchronous), never creates or alters a table, and touches only the projected columns of
``Crontabs`` plus the ``RunningInstances`` rows the projection owns. A database it cannot write at all raises
``LegacyDatabaseError`` whose reason is the reader's ``DatabaseState`` code.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from bridge.domain.errors import BridgeError
from legacy_adapters.database_state import DatabaseState, database_state
from legacy_adapters.errors import LegacyDatabaseError
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
# How many of the newest RunningInstances rows the crash-adoption lookup scans (a short read by primary key).
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
    """The Crontabs columns a projection writes (read-only: a frozen projection satisfies it)."""

    @property
    def status(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def log_path(self) -> str | None: ...
    @property
    def last_execution_time(self) -> int | None: ...
    @property
    def last_running_time(self) -> int | None: ...


class InstanceValues(Protocol):
    """The RunningInstances columns a projection writes."""

    @property
    def cron_id(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def log_path(self) -> str | None: ...
    @property
    def started_at(self) -> int: ...
    @property
    def finished_at(self) -> int | None: ...
    @property
    def status(self) -> int: ...
    @property
    def exit_code(self) -> int | float | None: ...


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


# One cron's projection: (cron_id, crontab values, instance values or None, known instance row id or None).
Write = tuple[int, CrontabValues, InstanceValues | None, int | None]


class LegacyStatusWriter:
    """Applies projections to 2.x's database: a batch is read without a lock, then written in one short
    ``BEGIN IMMEDIATE`` transaction holding only what differs, or in none when nothing does.

    One connection is kept between calls (outside a transaction it holds no lock) and reopened when the
    file is replaced, so a restored database is never written through a stale handle. Not for concurrent
    use from several threads: one projector owns one writer.
    """

    MAX_BATCH = 256  # statements cost microseconds each; the transaction's cost is its syncs

    def __init__(self, database_path: str | os.PathLike[str]) -> None:
        self.path = Path(database_path)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._checked = False
        self._busy_in_a_row = 0
        self.transactions = 0  # 2.x write transactions committed: what 2.x's writers may have waited behind
        self.held_s = 0.0  # how long those transactions held 2.x's write lock, BEGIN IMMEDIATE to COMMIT

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
        """Several crons' projections in at most ONE transaction (all or nothing), in order; same errors as apply.

        Rows that already hold the projected values are left alone (their ``updatedAt`` too); when no row
        would change, no transaction is opened at all. Several writes of one cron update its Crontabs row
        once, with the last write's values. Returns each write's instance row id."""
        if len(writes) > self.MAX_BATCH:
            raise ValueError(f"at most {self.MAX_BATCH} writes per transaction")
        with self._translated("write"):
            conn = self._connection()
            if not self._checked:
                self._check_schema(conn)
                self._check_writable(conn)
                self._checked = True
            plan = _plan(conn, writes)  # reads only: 2.x's writers can take their lock meanwhile
            if plan.changes:
                plan.prepare(format_updated_at(now_ms))
                began = time.monotonic()
                try:
                    with self._immediate(conn):
                        plan.write(conn)
                finally:
                    self.held_s += time.monotonic() - began
                self.transactions += 1
        self._busy_in_a_row = 0
        return plan.found

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
    def _immediate(self, conn: sqlite3.Connection, *, commit: bool = True) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not commit:
            conn.execute("ROLLBACK")
            return
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

    def _check_writable(self, conn: sqlite3.Connection) -> None:
        # Once per connection: a database that would refuse our writes must halt the projector even while
        # every row it is given already matches (then no write of ours would find out). An UPDATE that
        # matches nothing fails on a read-only file yet changes no page: no journal, no sync.
        with self._immediate(conn, commit=False):
            conn.execute("UPDATE `Crontabs` SET `id` = `id` WHERE 0")

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


_INSTANCE_FIELDS = ("cron_id", "pid", "log_path", "started_at", "finished_at", "status", "exit_code")
_CRONTAB_FIELDS = ("status", "pid", "log_path", "last_execution_time", "last_running_time")
# None leaves a column as it is, like Sequelize dropping undefined attributes (2.x never clears pid).
_UPDATE_CRONTAB = ("UPDATE `Crontabs` SET `status` = ?, " + ", ".join(
    f"`{name}` = coalesce(?, `{name}`)" for name in _CRONTAB_FIELDS[1:]) + ", `updatedAt` = ? WHERE `id` = ?")
_UPDATE_INSTANCE = ("UPDATE `RunningInstances` SET " + ", ".join(f"`{name}` = ?" for name in _INSTANCE_FIELDS)
                    + ", `updatedAt` = ? WHERE `id` = ?")
_INSERT_INSTANCE_COLUMNS = ", ".join(f"`{name}`" for name in (*_INSTANCE_FIELDS, "createdAt", "updatedAt"))
_INSERT_ROW = f"({', '.join('?' * (len(_INSTANCE_FIELDS) + 2))})"


def _instance_values(instance: InstanceValues) -> tuple[Any, ...]:
    return tuple(getattr(instance, name) for name in _INSTANCE_FIELDS)


class _Plan:
    """What one batch would change in 2.x, worked out from a lock-free read of the rows it touches."""

    def __init__(self, size: int) -> None:
        self.crontabs: dict[int, CrontabValues] = {}  # cron id -> values, only where a column would change
        self.updates: list[tuple[int, InstanceValues, int]] = []  # (write index, values, row id)
        self.inserts: list[tuple[int, InstanceValues]] = []  # (write index, values), in the batch's order
        self.found: list[int | None] = [None] * size
        self._parameters: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[Any]] = ([], [], [])
        self._stamp = ""

    @property
    def changes(self) -> bool:
        return bool(self.crontabs or self.updates or self.inserts)

    def prepare(self, stamp: str) -> None:
        """Every statement parameter, worked out before BEGIN."""
        self._stamp = stamp
        self._parameters = (
            [(*(getattr(crontab, name) for name in _CRONTAB_FIELDS), stamp, cron_id)
             for cron_id, crontab in self.crontabs.items()],
            [(*_instance_values(instance), stamp, target) for _, instance, target in self.updates],
            [v for _, instance in self.inserts for v in (*_instance_values(instance), stamp, stamp)])

    def write(self, conn: sqlite3.Connection) -> None:
        """Inside the transaction: each kind of change is one call into SQLite, so little Python (which may
        have to wait for the GIL while another thread runs) runs while 2.x's lock is held."""
        crontabs, updates, inserts = self._parameters
        if crontabs:
            conn.executemany(_UPDATE_CRONTAB, crontabs)
        if updates and conn.executemany(_UPDATE_INSTANCE, updates).rowcount != len(updates):
            gone = _missing(conn, [target for _, _, target in self.updates])  # 2.x deleted one since the read
            self.inserts = sorted(self.inserts + [(i, instance) for i, instance, t in self.updates if t in gone])
            self.updates = [update for update in self.updates if update[2] not in gone]
            self.prepare(self._stamp)
            inserts = self._parameters[2]
        for index, _, target in self.updates:
            self.found[index] = target
        if self.inserts:
            # One statement: with the write lock held, AUTOINCREMENT gives its rows consecutive ids, in order.
            last = conn.execute(f"INSERT INTO `RunningInstances` ({_INSERT_INSTANCE_COLUMNS}) VALUES "
                                + ", ".join([_INSERT_ROW] * len(self.inserts)), inserts).lastrowid or 0
            for offset, (index, _) in enumerate(self.inserts):
                self.found[index] = last - len(self.inserts) + 1 + offset


def _plan(conn: sqlite3.Connection, writes: Sequence[Write]) -> _Plan:
    plan = _Plan(len(writes))
    latest = {cron_id: crontab for cron_id, crontab, _, _ in writes}  # the last write of a cron wins
    current = _rows(conn, "Crontabs", _CRONTAB_FIELDS, list(latest))
    # An unknown cron id changes nothing, as in 2.x's CronService.status: no UPDATE is needed for it.
    plan.crontabs = {cron_id: crontab for cron_id, crontab in latest.items()
                     if cron_id in current and _crontab_differs(current[cron_id], crontab)}
    unmapped = [instance for _, _, instance, known in writes if instance is not None and known is None]
    adopted = iter(_adoptable(conn, unmapped))
    targets = [None if instance is None else known if known is not None else next(adopted)
               for _, _, instance, known in writes]
    present = _rows(conn, "RunningInstances", _INSTANCE_FIELDS, [t for t in targets if t is not None])
    for index, ((_, _, instance, _), target) in enumerate(zip(writes, targets)):
        if instance is None:
            continue
        if target is None or target not in present:
            plan.inserts.append((index, instance))
        elif present[target] == _instance_values(instance):
            plan.found[index] = target  # already as projected
        else:
            plan.updates.append((index, instance, target))
    return plan


def _rows(conn: sqlite3.Connection, table: str, names: Sequence[str], ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """The named columns of the rows with these ids, by id (one autocommit SELECT: a SHARED lock only)."""
    if not ids:
        return {}
    columns = ", ".join(f"`{name}`" for name in names)
    marks = ", ".join("?" * len(ids))
    found = conn.execute(f"SELECT `id`, {columns} FROM `{table}` WHERE `id` IN ({marks})", ids)
    return {row[0]: tuple(row[1:]) for row in found}


def _missing(conn: sqlite3.Connection, ids: list[int]) -> set[int]:
    return set(ids) - set(_rows(conn, "RunningInstances", ("id",), ids))


def _crontab_differs(current: tuple[Any, ...], crontab: CrontabValues) -> bool:
    # None leaves a column as it is, so it never differs.
    return any(value is not None and value != held
               for value, held in zip((getattr(crontab, name) for name in _CRONTAB_FIELDS), current))


def _adoptable(conn: sqlite3.Connection, instances: Sequence[InstanceValues]) -> list[int | None]:
    """For each instance, a row this projection inserted before it could remember the mapping (a crash in
    between), or None; one SELECT for the whole batch, returning only rows of the same cron and start.

    In primary mode 2.x receives no status callbacks for these executions, so a row with exactly this
    cron, pid, log_path and start can only be ours. The table has no index but its primary key and is never
    pruned, so only the newest ADOPT_WINDOW rows are looked at: the lost row was inserted just before the
    crash, and the row is retried first thing after a restart. Newest first, and never one row for two.
    """
    if not instances:
        return []
    keys = sorted({(instance.cron_id, instance.started_at) for instance in instances})
    found = conn.execute(
        "SELECT `id`, `cron_id`, `pid`, `log_path`, `started_at` FROM `RunningInstances` "
        "WHERE `id` > (SELECT max(`id`) FROM `RunningInstances`) - ? "
        f"AND (`cron_id`, `started_at`) IN (VALUES {', '.join(['(?, ?)'] * len(keys))}) ORDER BY `id` DESC",
        (ADOPT_WINDOW, *(v for key in keys for v in key)))
    candidates: dict[tuple[Any, ...], list[int]] = {}
    for row_id, *key in found:
        candidates.setdefault(tuple(key), []).append(int(row_id))
    picked: list[int | None] = []
    for instance in instances:
        ids = candidates.get((instance.cron_id, instance.pid, instance.log_path, instance.started_at))
        picked.append(ids.pop(0) if ids else None)
    return picked
