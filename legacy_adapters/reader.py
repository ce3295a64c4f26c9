"""Read-only access to 2.x's ``data/db/database.sqlite``, tolerant of installs older than v2.21.0.

Also names the state the file is in when it cannot be read (``DatabaseState``) and detects the 2.x scheduler
mode (legacy-2x.md 1.3).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.schema import CRONTABS_SENTINEL_COLUMNS, format_updated_at

# 2.x sets no busy_timeout and retries SQLITE_BUSY itself; a reader must never hold the
# rollback-journal SHARED lock long, so it waits briefly and reads in short statements.
BUSY_BUDGET_S = 0.3
# How a read waits for a lock: SQLite's busy handler, held to BUSY_STEP_S per try, then again until the budget.
# Left alone for the whole budget, that handler sleeps 1, 2, 5, 10, ... 100 ms between tries, and while 2.x
# commits back to back (a burst of callbacks) each try woke inside the next commit: in
# tests/legacy/test_reader_busy.py 7 to 28 of 60 reads waited out the budget and failed. The gaps between 2.x's
# commits are short, not rare; with 2 ms per try the handler never sleeps more than 1 ms at a time, in C,
# without the GIL. (A Python loop sleeping up to 0.5 ms between tries cost the serving worker 0.25 ms more CPU
# per callback under four clients, for about the same latency: bench_shadow_http.)
BUSY_STEP_S = 0.002
T = TypeVar("T")
COLUMNS_TTL_S = 30.0
KEPT_CACHE_KIB = 512
# Objects a QingLong 3.0 migration creates; their presence means the file is no longer plain 2.x.
_THREE_ZERO_TABLES = ("Runs", "RunAttempts", "RunEvents", "RunRetryPolicies")

_CRON_COLUMNS = {  # field -> Crontabs column
    "id": "id",
    "name": "name",
    "command": "command",
    "schedule": "schedule",
    "timestamp": "timestamp",
    "saved": "saved",
    "status": "status",
    "is_system": "isSystem",
    "pid": "pid",
    "is_disabled": "isDisabled",
    "is_pinned": "isPinned",
    "log_path": "log_path",
    "labels": "labels",
    "last_running_time": "last_running_time",
    "last_execution_time": "last_execution_time",
    "sub_id": "sub_id",
    "extra_schedules": "extra_schedules",
    "task_before": "task_before",
    "task_after": "task_after",
    "log_name": "log_name",
    "allow_multiple_instances": "allow_multiple_instances",
    "work_dir": "work_dir",
    "created_at": "createdAt",
    "updated_at": "updatedAt",
}
_INSTANCE_COLUMNS = ("id", "cron_id", "pid", "log_path", "started_at", "finished_at", "status", "exit_code")
# How long before (and, for clock steps, after) a given moment 2.x may have inserted the instance row of an
# execution, and how many ids one lookup reads at most (about 50 executions a second for the whole window).
INSTANCE_LOOKBACK_S = 600
INSTANCE_LOOKAHEAD_S = 60
INSTANCE_SCAN_IDS = 30_000


class DatabaseState(StrEnum):
    """What 2.x's database is, as the bridge sees it; each value is a stable code (error reason, metric label).

    Only the foreign states may stop the bridge: a database that is positively something else. Every other
    state passes (a killed writer, a restore, 2.x's first boot): the bridge keeps forwarding and reads again.
    """

    OK = "ok"
    LOCKED = "locked"  # another connection holds the lock longer than the busy timeout
    HOT_JOURNAL = "hot_journal"  # a writer died mid-transaction: only a connection with write access rolls it back
    MISSING = "missing"  # no file at the path
    EMPTY = "empty"  # an SQLite file without a single table: emptied, or 2.x has not created its tables yet
    UNREADABLE = "unreadable"  # there, but it cannot be opened or read (permissions, not a regular file, I/O)
    CORRUPT = "corrupt"  # an SQLite file that is truncated or malformed
    READ_ONLY = "read_only"  # readable, but it takes no writes (the projector's view of a read-only mount)
    NOT_LEGACY = "not_legacy"  # foreign: an SQLite database without 2.x's Crontabs table, or not SQLite at all
    UNSUPPORTED = "unsupported"  # foreign: a 2.x database a QingLong 3.0 migration has already changed


FOREIGN_STATES = frozenset({DatabaseState.NOT_LEGACY, DatabaseState.UNSUPPORTED})
TRANSIENT_STATES = frozenset(DatabaseState) - FOREIGN_STATES - {DatabaseState.OK}
_STATE_DETAIL = {
    DatabaseState.LOCKED: "another connection holds its lock",
    DatabaseState.HOT_JOURNAL: "a writer died mid-transaction and left a hot rollback journal; it reads again once "
                               "a connection with write access (2.x's next one) has rolled it back",
    DatabaseState.MISSING: "no such file",
    DatabaseState.EMPTY: "it holds no table: emptied, or 2.x has not created its tables yet",
    DatabaseState.UNREADABLE: "it cannot be opened or read",
    DatabaseState.CORRUPT: "truncated or malformed",
    DatabaseState.READ_ONLY: "attempt to write a readonly database",
    DatabaseState.NOT_LEGACY: "not an SQLite database with 2.x's Crontabs(id, command, schedule) table",
}
# sqlite3 result codes (sqlite3.h). 776 is SQLITE_READONLY_ROLLBACK: a hot journal a read-only connection met.
_BUSY, _LOCKED, _CORRUPT, _CANTOPEN, _NOTADB, _READONLY_ROLLBACK = 5, 6, 11, 14, 26, 776
_SQLITE_MAGIC = b"SQLite format 3\x00"


def database_state(path: str | os.PathLike[str], exc: sqlite3.Error) -> DatabaseState:
    """The state an SQLite error raised while reading or writing ``path`` reveals."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if code == _READONLY_ROLLBACK:
        return DatabaseState.HOT_JOURNAL
    if primary in (_BUSY, _LOCKED) or "database is locked" in str(exc).lower():
        return DatabaseState.LOCKED
    if primary == _CORRUPT:
        return DatabaseState.CORRUPT
    if primary == _NOTADB:
        return _not_a_database(Path(path))
    if primary == _CANTOPEN and not os.path.lexists(path):
        return DatabaseState.MISSING
    return DatabaseState.UNREADABLE


def _not_a_database(path: Path) -> DatabaseState:
    """SQLite refused the file: foreign only when its first bytes are positively something else.

    Read only once SQLite has refused the file, so no connection of this process holds a lock on it (closing
    any descriptor of a file drops the process's POSIX locks on it).
    """
    try:
        with path.open("rb") as file:
            head = file.read(16)
    except FileNotFoundError:
        return DatabaseState.MISSING
    except OSError:
        return DatabaseState.UNREADABLE
    if len(head) < len(_SQLITE_MAGIC) or not head.strip(b"\0") or head == _SQLITE_MAGIC:
        return DatabaseState.CORRUPT  # cut inside the header, zeroed, or an SQLite header with broken fields
    return DatabaseState.NOT_LEGACY


@dataclass(frozen=True)
class LegacyCron:
    """One ``Crontabs`` row; a column the install lacks reads as None."""

    id: int
    name: str | None
    command: str | None
    schedule: str | None
    timestamp: str | None
    saved: bool | None
    status: int | None
    is_system: bool | None
    pid: int | None
    is_disabled: bool  # NULL is "not disabled", as in 2.x's filters
    is_pinned: bool | None
    log_path: str | None
    labels: tuple[str, ...] | None  # None: the stored JSON text is malformed
    last_running_time: int | float | None  # seconds (a duration)
    last_execution_time: int | float | None  # unix seconds; 0 means never
    sub_id: int | None
    extra_schedules: tuple[str, ...] | None  # None: the stored JSON text is malformed
    task_before: str | None
    task_after: str | None
    log_name: str | None
    work_dir: str | None
    # NULL on upgraded rows never re-saved; runCron tests `=== 0`, so NULL acts as True.
    allow_multiple_instances: bool | None
    created_at: str | None
    updated_at: str | None


@dataclass(frozen=True)
class LegacyInstance:
    """One ``RunningInstances`` row; times are unix seconds."""

    id: int
    cron_id: int | None
    pid: int | None
    log_path: str | None
    started_at: int | float | None
    finished_at: int | float | None
    status: int | None
    exit_code: int | float | None


def _number(value: Any) -> int | float | None:
    # NUMBER has NUMERIC affinity: integers come back as int, odd writes as float or text.
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    return value if isinstance(value, int) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return number if isinstance(number, int) else None


def _flag(value: Any) -> bool | None:
    number = _number(value)
    return None if number is None else bool(number)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_strings(value: Any, key: str | None = None) -> tuple[str, ...] | None:
    """A JSON array of strings (labels) or of ``{"schedule": ...}`` objects (extra_schedules)."""
    if value is None or value == "":
        return ()
    try:
        items = json.loads(value) if isinstance(value, (str, bytes)) else value
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    found = [item.get(key) if key and isinstance(item, dict) else item for item in items]
    return tuple(str(item) for item in found if isinstance(item, str) and item)


def _cron_from_row(row: Mapping[str, Any]) -> LegacyCron:
    get = row.get
    return LegacyCron(
        id=int(row["id"]),
        name=_text(get("name")),
        command=_text(get("command")),
        schedule=_text(get("schedule")),
        timestamp=_text(get("timestamp")),
        saved=_flag(get("saved")),
        status=_integer(get("status")),
        is_system=_flag(get("isSystem")),
        pid=_integer(get("pid")),
        is_disabled=bool(_flag(get("isDisabled"))),
        is_pinned=_flag(get("isPinned")),
        log_path=_text(get("log_path")),
        labels=_json_strings(get("labels")),
        last_running_time=_number(get("last_running_time")),
        last_execution_time=_number(get("last_execution_time")),
        sub_id=_integer(get("sub_id")),
        extra_schedules=_json_strings(get("extra_schedules"), "schedule"),
        task_before=_text(get("task_before")),
        task_after=_text(get("task_after")),
        log_name=_text(get("log_name")),
        work_dir=_text(get("work_dir")),
        allow_multiple_instances=_flag(get("allow_multiple_instances")),
        created_at=_text(get("createdAt")),
        updated_at=_text(get("updatedAt")),
    )


def _instance_from_row(row: Mapping[str, Any]) -> LegacyInstance:
    get = row.get
    return LegacyInstance(
        id=int(row["id"]),
        cron_id=_integer(get("cron_id")),
        pid=_integer(get("pid")),
        log_path=_text(get("log_path")),
        started_at=_number(get("started_at")),
        finished_at=_number(get("finished_at")),
        status=_integer(get("status")),
        exit_code=_number(get("exit_code")),
    )


class LegacyReader:
    """Reads 2.x tables by column name over read-only connections.

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
        """``work``'s autocommit statements on one connection, run again while 2.x's lock turns them away."""
        deadline = time.monotonic() + BUSY_BUDGET_S
        with self._connection(deadline) as conn:
            return self._until(deadline, lambda: work(conn))

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
        select = self._select("Crontabs", list(_CRON_COLUMNS.values()))
        rows = self._fetch(f"{select} WHERE id = ?", (cron_id,)) if select else []
        return _cron_from_row(dict(rows[0])) if rows else None

    def iter_crons(self, batch_size: int = 500) -> Iterator[LegacyCron]:
        """Every Crontabs row in id order, keyset-paged so no lock is held between pages."""
        select = self._select("Crontabs", list(_CRON_COLUMNS.values()))
        yield from (_cron_from_row(r) for r in self._pages(select, 0, batch_size))

    def iter_instances(self, after_id: int = 0, batch_size: int = 500) -> Iterator[LegacyInstance]:
        """RunningInstances rows with id > ``after_id`` in id order; none on pre-2.21 installs."""
        select = self._select("RunningInstances", _INSTANCE_COLUMNS)
        yield from (_instance_from_row(r) for r in self._pages(select, after_id, batch_size))

    def _pages(self, select: str | None, after_id: int, batch_size: int) -> Iterator[dict[str, Any]]:
        while select is not None:
            rows = self._fetch(f"{select} WHERE id > ? ORDER BY id LIMIT ?", (after_id, batch_size))
            yield from (dict(row) for row in rows)
            if len(rows) < batch_size:
                return
            after_id = int(rows[-1]["id"])

    def instances_for_cron(self, cron_id: int, limit: int) -> list[LegacyInstance]:
        """Up to ``limit`` instances of a cron, newest first (2.x orders by started_at DESC)."""
        select = self._select("RunningInstances", _INSTANCE_COLUMNS)
        if select is None:
            return []
        rows = self._fetch(f"{select} WHERE cron_id = ? ORDER BY started_at DESC, id DESC LIMIT ?", (cron_id, limit))
        return [_instance_from_row(dict(row)) for row in rows]

    def recent_instances(self, limit: int) -> list[LegacyInstance]:
        """The ``limit`` newest instances of any cron, by primary key (the only index 2.x keeps)."""
        select = self._select("RunningInstances", _INSTANCE_COLUMNS)
        if select is None:
            return []
        return [_instance_from_row(dict(row)) for row in self._fetch(f"{select} ORDER BY id DESC LIMIT ?", (limit,))]

    def instances_inserted_near(self, cron_id: int, pid: int | None, at_ms: int, *,
                                lookback_s: int = INSTANCE_LOOKBACK_S,
                                max_ids: int = INSTANCE_SCAN_IDS) -> list[LegacyInstance]:
        """Instances of ``cron_id`` with ``pid`` (NULL matches NULL) that 2.x inserted between ``lookback_s``
        before and INSTANCE_LOOKAHEAD_S after ``at_ms``, newest first, reading at most ``max_ids`` ids.

        RunningInstances has no index but its primary key (legacy-2x.md 2.4) and is never pruned, and the bridge
        adds nothing to 2.x's schema. 2.x stamps ``createdAt`` as it inserts, so ids follow ``createdAt``: binary
        searches over the key find the ids inserted at the window's two ends, and only the ids between are read,
        through the key. However many instances the cron has had since, one lookup stays this size.
        """
        select = self._select("RunningInstances", _INSTANCE_COLUMNS)
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

        return [_instance_from_row(dict(row)) for row in self._read(lookup)]

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
        except sqlite3.Error as exc:
            return self.state_of(exc)
        if not CRONTABS_SENTINEL_COLUMNS <= crontabs:
            # Nothing at all is no evidence of something else: a file emptied by a crash, or 2.x's first boot.
            return DatabaseState.EMPTY if not tables else DatabaseState.NOT_LEGACY
        if tables & set(_THREE_ZERO_TABLES):
            return DatabaseState.UNSUPPORTED
        return DatabaseState.OK

    def state_of(self, exc: sqlite3.Error) -> DatabaseState:
        """The state an SQLite error from one of this reader's reads reveals."""
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
        raise LegacyDatabaseError(str(self.path), state.value, _STATE_DETAIL[state])


def detect_scheduler_mode(environ: Mapping[str, str] | None = None) -> Literal["system", "node"]:
    """2.x's CronService.schedulerMode: QL_SCHEDULER if valid, else "system" when crond exists."""
    env = os.environ if environ is None else environ
    configured = env.get("QL_SCHEDULER", "").strip()
    if configured in ("system", "node"):
        return "system" if configured == "system" else "node"
    return "system" if shutil.which("crond") else "node"
