"""Read-only access to 2.x's ``data/db/database.sqlite``, tolerant of installs older than v2.21.0.

Every read goes through ``LegacyReader._read``, the one place where an SQLite error becomes a LegacyDatabaseError
whose ``reason`` is the state the file is in (``DatabaseState``): no caller sees a driver error.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from legacy_adapters.database_state import STATE_DETAIL, DatabaseState, database_state
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.records import (
    CRON_COLUMNS,
    INSTANCE_COLUMNS,
    LegacyCron,
    LegacyInstance,
    cron_from_row,
    instance_from_row,
)
from legacy_adapters.schema import CRONTABS_SENTINEL_COLUMNS, format_updated_at

# 2.x sets no busy_timeout and retries SQLITE_BUSY itself; a reader must never hold the
# rollback-journal SHARED lock long, so it waits briefly and reads in short statements.
BUSY_BUDGET_S = 0.3
# A read waits for a lock in short tries of SQLite's own busy handler, again until the budget. Left alone for the
# whole budget, that handler backs off to long sleeps, and while 2.x commits back to back each try wakes inside
# its next commit; with short tries the handler never sleeps more than a millisecond at a time, in C, without
# the GIL, and a read gets into the short gaps between 2.x's commits.
BUSY_STEP_S = 0.002
T = TypeVar("T")
COLUMNS_TTL_S = 30.0
KEPT_CACHE_KIB = 512
# Objects a QingLong 3.0 migration creates; their presence means the file is no longer plain 2.x.
_THREE_ZERO_TABLES = ("Runs", "RunAttempts", "RunEvents", "RunRetryPolicies")
# How long before (and, for clock steps, after) a given moment 2.x may have inserted the instance row of an
# execution, and how many ids one lookup reads at most (about 50 executions a second for the whole window).
INSTANCE_LOOKBACK_S = 600
INSTANCE_LOOKAHEAD_S = 60
INSTANCE_SCAN_IDS = 30_000
_STATES = frozenset(state.value for state in DatabaseState)


class LegacyReader:
    """Reads 2.x tables by column name over read-only connections: v2.21's reader (legacy_adapters/ports.py's
    LegacyRecords; the older lines' is legacy_adapters/release_readers.py's, built on this one).

    By default each read opens and closes its own connection. A long-running reader (``bridge serve``,
    which reads a Crontabs row before forwarding every start callback) keeps up to ``keep_connections``
    idle connections instead: opening one costs a schema parse, more than the lookup itself. An idle
    connection holds no lock (every read is one autocommit statement, finished before it is returned),
    SQLite re-validates its page cache against 2.x's writes at each read, and a file replaced under the
    same path (a restore) is noticed by its inode and the old connections are dropped.
    """

    def __init__(self, database_path: str | os.PathLike[str], *, schema_ttl_s: float = COLUMNS_TTL_S,
                 keep_connections: int = 0) -> None:
        self.path = Path(database_path)
        self._schema_ttl_s = schema_ttl_s
        self._columns: dict[str, tuple[float, frozenset[str]]] = {}
        self._keep = keep_connections
        self._idle: list[sqlite3.Connection] = []
        self._idle_file: tuple[int, int] | None = None  # (st_dev, st_ino) the idle connections are open on
        self._lock = threading.Lock()

    def _connect(self, deadline: float | None = None) -> sqlite3.Connection:
        # mode=ro can never create or write the file; as_uri() percent-encodes odd paths. A lock is waited for
        # in steps of BUSY_STEP_S, by _until.
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_STEP_S, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        if self._keep:  # bounded memory per kept connection; preparing it reads the schema, under 2.x's lock
            until = time.monotonic() + BUSY_BUDGET_S if deadline is None else deadline
            try:
                self._until(until, lambda: conn.execute(f"PRAGMA cache_size=-{KEPT_CACHE_KIB}"))
            except BaseException:
                conn.close()
                raise
        return conn

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        # One statement = one implicit read transaction, released before rows are used.
        return self._read(lambda conn: conn.execute(sql, params).fetchall())

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work``'s autocommit statements on one connection, run again while 2.x's lock turns them away.

        Raises LegacyDatabaseError, its ``reason`` the DatabaseState the SQLite error reveals, when the read fails.
        """
        deadline = time.monotonic() + BUSY_BUDGET_S
        try:
            with self._connection(deadline) as conn:
                return self._until(deadline, lambda: work(conn))
        except sqlite3.Error as exc:
            state = self.state_of(exc)
            raise LegacyDatabaseError(str(self.path), state.value, STATE_DETAIL.get(state, "")) from exc

    def _until(self, deadline: float, attempt: Callable[[], T]) -> T:
        """``attempt()``, tried again while SQLITE_BUSY turns it away (each try waits up to BUSY_STEP_S itself).

        Raises the last SQLITE_BUSY once ``deadline`` has passed, and any other error at once. A statement
        refused with SQLITE_BUSY held no lock and left no transaction open, so the connection stays usable.
        """
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                if database_state(self.path, exc) is not DatabaseState.LOCKED or time.monotonic() >= deadline:
                    raise

    @contextmanager
    def _connection(self, deadline: float) -> Iterator[sqlite3.Connection]:
        """A connection for a few autocommit statements: none holds a lock once it has returned its rows."""
        if not self._keep:
            with closing(self._connect(deadline)) as conn:
                yield conn
            return
        file_id, conn = self._checkout(deadline)
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        self._checkin(file_id, conn)

    def _checkout(self, deadline: float) -> tuple[tuple[int, int] | None, sqlite3.Connection]:
        try:
            stat = os.stat(self.path)
            file_id: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
        except OSError:
            file_id = None  # connecting then fails with the usual sqlite3 error
        with self._lock:
            if file_id != self._idle_file:
                stale, self._idle, self._idle_file = self._idle, [], file_id
            else:
                stale = []
            conn = self._idle.pop() if self._idle else None
        for old in stale:
            old.close()
        return file_id, conn or self._connect(deadline)

    def _checkin(self, file_id: tuple[int, int] | None, conn: sqlite3.Connection) -> None:
        with self._lock:
            if file_id is not None and file_id == self._idle_file and len(self._idle) < self._keep:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the kept connections (a later read opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def columns(self, table: str) -> frozenset[str]:
        """Column names of ``table``; empty when the install has no such table.

        Kept for a short while: 2.x only adds columns at its own boot, and asking on every read cost a
        second connection per Crontabs lookup on the callback path.
        """
        cached = self._columns.get(table)
        if cached is not None and time.monotonic() - cached[0] < self._schema_ttl_s:
            return cached[1]
        rows = self._fetch("SELECT name FROM pragma_table_info(?)", (table,))
        names = frozenset(row["name"] for row in rows)
        self._columns[table] = (time.monotonic(), names)
        return names

    def has_table(self, name: str) -> bool:
        """True when the 2.x database has a table called ``name``."""
        rows = self._fetch("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return bool(rows)

    def _select(self, table: str, wanted: Sequence[str]) -> str | None:
        present = self.columns(table)
        if not present:
            return None
        names = ", ".join(f'"{c}"' for c in wanted if c in present)
        return f'SELECT {names} FROM "{table}"'

    def get_cron(self, cron_id: int) -> LegacyCron | None:
        """The Crontabs row with ``cron_id``, or None."""
        select = self._select("Crontabs", list(CRON_COLUMNS.values()))
        rows = self._fetch(f"{select} WHERE id = ?", (cron_id,)) if select else []
        return cron_from_row(dict(rows[0])) if rows else None

    def crons_stamped(self, updated_at: str) -> int:
        """How many Crontabs rows carry exactly this ``updatedAt`` (2.x writes it as text that sorts in time
        order, to the millisecond; docs/legacy-2x.md#crontabs)."""
        if "updatedAt" not in self.columns("Crontabs"):
            return 0
        return int(self._fetch('SELECT count(*) FROM "Crontabs" WHERE "updatedAt" = ?', (updated_at,))[0][0])

    def iter_crons(self, batch_size: int = 500) -> Iterator[LegacyCron]:
        """Every Crontabs row in id order, keyset-paged so no lock is held between pages."""
        select = self._select("Crontabs", list(CRON_COLUMNS.values()))
        yield from (cron_from_row(r) for r in self._pages(select, 0, batch_size))

    def iter_instances(self, after_id: int = 0, batch_size: int = 500) -> Iterator[LegacyInstance]:
        """RunningInstances rows with id > ``after_id`` in id order; none on pre-2.21 installs."""
        select = self._select("RunningInstances", INSTANCE_COLUMNS)
        yield from (instance_from_row(r) for r in self._pages(select, after_id, batch_size))

    def _pages(self, select: str | None, after_id: int, batch_size: int) -> Iterator[dict[str, Any]]:
        while select is not None:
            rows = self._fetch(f"{select} WHERE id > ? ORDER BY id LIMIT ?", (after_id, batch_size))
            yield from (dict(row) for row in rows)
            if len(rows) < batch_size:
                return
            after_id = int(rows[-1]["id"])

    def instances_for_cron(self, cron_id: int, limit: int) -> list[LegacyInstance]:
        """Up to ``limit`` instances of a cron, newest first (2.x orders by started_at DESC)."""
        select = self._select("RunningInstances", INSTANCE_COLUMNS)
        if select is None:
            return []
        rows = self._fetch(f"{select} WHERE cron_id = ? ORDER BY started_at DESC, id DESC LIMIT ?", (cron_id, limit))
        return [instance_from_row(dict(row)) for row in rows]

    def recent_instances(self, limit: int) -> list[LegacyInstance]:
        """The ``limit`` newest instances of any cron, by primary key (the only index 2.x keeps)."""
        select = self._select("RunningInstances", INSTANCE_COLUMNS)
        if select is None:
            return []
        return [instance_from_row(dict(row)) for row in self._fetch(f"{select} ORDER BY id DESC LIMIT ?", (limit,))]

    def begun_logs(self, limit: int) -> list[tuple[str | None, float | None]]:
        """The newest instances' (log_path, started_at): v2.21 stamps both on the row it inserts at the start."""
        return [(i.log_path, i.started_at) for i in self.recent_instances(limit)]

    def instances_inserted_near(self, cron_id: int, pid: int | None, at_ms: int, *,
                                lookback_s: int = INSTANCE_LOOKBACK_S,
                                max_ids: int = INSTANCE_SCAN_IDS) -> list[LegacyInstance]:
        """Instances of ``cron_id`` with ``pid`` (NULL matches NULL) that 2.x inserted between ``lookback_s``
        before and INSTANCE_LOOKAHEAD_S after ``at_ms``, newest first, reading at most ``max_ids`` ids.

        RunningInstances has no index but its primary key (docs/legacy-2x.md#runninginstances) and is never pruned, and
        the bridge adds nothing to 2.x's schema. 2.x stamps ``createdAt`` as it inserts, so ids follow ``createdAt``:
        binary searches over the key find the ids inserted at the window's two ends, and only the ids between are read,
        through the key. However many instances the cron has had since, one lookup stays this size.
        """
        select = self._select("RunningInstances", INSTANCE_COLUMNS)
        if select is None:
            return []
        with_created_at = "createdAt" in self.columns("RunningInstances")

        def lookup(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            top = conn.execute('SELECT max(id) FROM "RunningInstances"').fetchone()[0]
            if top is None:
                return []
            if with_created_at:
                first = self._first_id_since(conn, int(top), format_updated_at(at_ms - lookback_s * 1000))
                after = self._first_id_since(conn, int(top), format_updated_at(at_ms + INSTANCE_LOOKAHEAD_S * 1000))
            else:  # not 2.x's own table: the newest ids only
                first, after = max(0, int(top) + 1 - max_ids), int(top) + 1
            return conn.execute(f'{select} WHERE id >= ? AND id < ? AND cron_id = ? AND "pid" IS ? ORDER BY id DESC',
                                (first, min(after, first + max_ids), cron_id, pid)).fetchall()

        return [instance_from_row(dict(row)) for row in self._read(lookup)]

    @staticmethod
    def _first_id_since(conn: sqlite3.Connection, top: int, stamp: str) -> int:
        """The lowest id whose createdAt is at or after ``stamp`` (2.x's on-disk text sorts in time order), or
        ``top + 1`` when there is none."""
        low, high = 0, top + 1
        while low < high:  # each probe is one lookup through the key, about log2(ids) of them
            mid = (low + high) // 2
            row = conn.execute('SELECT id, "createdAt" FROM "RunningInstances" WHERE id >= ? ORDER BY id LIMIT 1',
                               (mid,)).fetchone()
            if row is None or (row[1] is not None and str(row[1]) >= stamp):
                high = mid
            else:
                low = int(row[0]) + 1
        return low

    def state(self) -> DatabaseState:
        """What 2.x's database is right now (OK, or why it cannot be read); never raises, never cached."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return DatabaseState.MISSING
        except OSError:
            return DatabaseState.UNREADABLE
        if not stat.S_ISREG(status.st_mode):
            return DatabaseState.UNREADABLE
        try:
            tables, crontabs = self._read(lambda conn: (
                {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")},
                {row[0] for row in conn.execute("SELECT name FROM pragma_table_info('Crontabs')")}))
        except LegacyDatabaseError as exc:
            return self.state_of(exc)
        if not CRONTABS_SENTINEL_COLUMNS <= crontabs:
            # Nothing at all is no evidence of something else: a file emptied by a crash, or 2.x's first boot.
            return DatabaseState.EMPTY if not tables else DatabaseState.NOT_LEGACY
        if tables & set(_THREE_ZERO_TABLES):
            return DatabaseState.UNSUPPORTED
        return DatabaseState.OK

    def state_of(self, exc: sqlite3.Error | LegacyDatabaseError) -> DatabaseState:
        """The state a failed read of this reader reveals: the reason of its LegacyDatabaseError, or what an
        SQLite error says (for a caller that still holds one)."""
        if isinstance(exc, LegacyDatabaseError):
            return DatabaseState(exc.reason) if exc.reason in _STATES else DatabaseState.UNREADABLE
        return database_state(self.path, exc)

    def check_is_legacy_database(self) -> None:
        """Raises LegacyDatabaseError, its ``reason`` a DatabaseState value, unless 2.x's database reads as such."""
        state = self.state()
        if state is DatabaseState.OK:
            return
        if state is DatabaseState.UNSUPPORTED:
            foreign = [t for t in _THREE_ZERO_TABLES if self.has_table(t)]
            raise LegacyDatabaseError(str(self.path), state.value,
                                      "already holds QingLong 3.0 tables: " + ", ".join(foreign))
        raise LegacyDatabaseError(str(self.path), state.value, STATE_DETAIL[state])

