"""make_engine: one SQLAlchemy engine per store URL, with the SQLite and PostgreSQL settings we rely on.

SQLite: WAL, foreign keys, a short busy_timeout, and BEGIN IMMEDIATE for write transactions. pysqlite
normally delays BEGIN until the first write, so two writers can both read, then one fails with
"database is locked" mid-transaction; taking the write lock up front turns that into a clean wait
(SQLAlchemy SQLite dialect docs, "Serializable isolation / Savepoints / Transactional DDL").

PostgreSQL: bounded timeouts, no pre-ping; a `PoolSweep` recycles the whole pool once one pooled
connection turns out to have been dropped by the server.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InvalidatePoolError

# Execution option that marks a read-only unit of work (plain deferred BEGIN on SQLite).
READ_ONLY = "bridge_read_only"
SQLITE_POOL_SIZE = 4  # one writer at a time (SqlUnitOfWork queues them), readers of the request threads
SQLITE_POOL_OVERFLOW = 4  # readers (v3 API, health, flags), the projector and the reconciler
# Page cache per connection, below SQLite's default of 2000 KiB: the OS page cache holds the file anyway, so a
# larger one makes a callback's writes no faster and only costs memory in every pooled connection.
SQLITE_CACHE_KIB = 512


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What the store's backend can do, for code outside storage to ask instead of naming the dialect."""

    single_writer: bool  # one write transaction at a time holds the whole store (SQLite): pace long writes
    serializable_writes: bool  # writes may run SERIALIZABLE and fail one, to be run again (PostgreSQL)
    database_roles: bool  # who may write is granted to database roles, not file permissions (PostgreSQL)
    reads_are_round_trips: bool  # every read crosses the network to a server (PostgreSQL): read ahead of a write


def store_capabilities(engine: Engine) -> StoreCapabilities:
    """The capabilities of the store behind ``engine`` (one of the two backends make_engine builds)."""
    postgres = engine.dialect.name == "postgresql"
    return StoreCapabilities(single_writer=engine.dialect.name == "sqlite", serializable_writes=postgres,
                             database_roles=postgres, reads_are_round_trips=postgres)


@dataclass(frozen=True, slots=True)
class StoreDeadlines:
    """How long any one wait on a PostgreSQL store may last (docs/configuration.md#store-deadlines).

    ``statement_ms`` bounds a statement and a lock wait on the server; each exchange with the server (a query, a
    COMMIT) waits at most that plus ``DEADLINE_MARGIN_MS`` on the client, whatever the network does; a new
    connection at most ``connect_s``. Keepalives find a peer gone quiet on an idle connection within
    ``keepalive_s`` (idle, then three probes), and ``tcp_user_timeout`` drops one whose sent bytes go unacknowledged.
    """

    statement_ms: int = 5000
    connect_s: int = 5
    keepalive_s: int = 10

    @property
    def exchange_s(self) -> float:
        return (self.statement_ms + DEADLINE_MARGIN_MS) / 1000


DEADLINE_MARGIN_MS = 2000  # past statement_timeout, so that the server's own timeout reports first


def make_engine(url: str, *, sqlite_busy_timeout_ms: int = 100, deadlines: StoreDeadlines | None = None,
                pg_search_path: str | None = None) -> Engine:
    """Build the engine; ``pg_search_path`` puts the bridge's tables in their own schema."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, sqlite_busy_timeout_ms)
    if parsed.get_backend_name() == "postgresql":
        engine = _postgres_engine(url, deadlines or StoreDeadlines(), pg_search_path)
        pool_sweep(engine)
        return engine
    raise ValueError(f"unsupported store URL scheme {parsed.drivername!r} (use sqlite:/// or postgresql+psycopg://)")


def _sqlite_engine(url: str, busy_timeout_ms: int) -> Engine:
    # check_same_thread off: the pool hands a connection to one thread at a time. Each connection has its
    # own page cache, so the pool is small and LIFO (the few busiest connections are reused, the rest stay
    # cold) and each cache is bounded: SQLite has one writer at a time anyway, and an unbounded pool of
    # default-sized caches would grow the serving process with the store.
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
                           pool_size=SQLITE_POOL_SIZE, max_overflow=SQLITE_POOL_OVERFLOW, pool_use_lifo=True,
                           pool_timeout=5)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Sent on the driver's connection: SQLAlchemy's execution machinery (exec_driver_sql) would add its
        # per-statement overhead to every callback for a statement that returns nothing. Errors are
        # wrapped as that path wrapped them, so a locked store is still a DBAPIError the unit of work retries.
        # It passes below the cursor events: audits of it read SQLite's own trace (set_trace_callback).
        sql = "BEGIN" if conn.get_execution_options().get(READ_ONLY, False) else "BEGIN IMMEDIATE"
        try:
            conn.connection.dbapi_connection.execute(sql)
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, None, exc, sqlite3.Error, dialect=conn.dialect) from exc

    return engine


def _postgres_engine(url: str, deadlines: StoreDeadlines, search_path: str | None) -> Engine:
    # Bounded waits everywhere: a store that is down, locked or silent raises instead of holding a thread.
    # No pool_pre_ping (a round trip per transaction): SqlUnitOfWork sweeps the pool (PoolSweep) and
    # retries, once, a transaction whose pooled connection the server had dropped; any other user sees one
    # error after a server restart, and SQLAlchemy then recycles the whole pool.
    from bridge.storage.pg_deadline import deadline_connection_class

    statement_ms = int(deadlines.statement_ms)
    options = f"-c statement_timeout={statement_ms} -c lock_timeout={statement_ms}"
    if search_path:
        options += f" -c search_path={search_path}"
    idle_s = max(1, deadlines.keepalive_s // 2)
    probe_s = max(1, (deadlines.keepalive_s - idle_s) // 3)
    engine = create_engine(
        url,
        pool_size=5,
        max_overflow=5,
        pool_timeout=5,
        connect_args={"connect_timeout": deadlines.connect_s, "options": options, "keepalives": 1,
                      "keepalives_idle": idle_s, "keepalives_interval": probe_s, "keepalives_count": 3,
                      "tcp_user_timeout": int(deadlines.exchange_s * 1000)},
    )
    connection_class = deadline_connection_class(deadlines.exchange_s)

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        return connection_class.connect(*cargs, **cparams)

    return engine


class PoolSweep:
    """Recycles every connection an engine's pool opened before the last `request`, at its next checkout.

    A server restart drops all pooled connections at once, but a pool learns that one connection at a
    time, as each fails. SQLAlchemy recycles the whole pool when the failure passes through a
    `Connection` (`Pool._invalidate`, "Dealing with Disconnects", optimistic); the store's driver-level
    statements (`bridge.storage.runs`) do not pass through it. So a unit of work that met a dropped
    connection calls `request()`, and every later checkout of a connection opened before that moment
    raises `InvalidatePoolError` in the pool's `checkout` event: SQLAlchemy's documented way to say "the
    database restarted", which reconnects that connection and marks all older ones to be replaced. It
    costs nothing until a connection is dropped: no round trip, one comparison per checkout.
    """

    _OPENED_AT = "bridge_opened_at"  # monotonic time, in the connection record's info

    def __init__(self, engine: Engine) -> None:
        self._requested_at: float | None = None
        # Connections opened before these listeners carry no stamp: they count as opened at install time.
        self._default_opened_at = time.monotonic()
        event.listen(engine, "connect", self._on_connect)
        event.listen(engine, "checkout", self._on_checkout)

    def request(self) -> None:
        """Mark every connection opened until now as stale."""
        self._requested_at = time.monotonic()

    def _on_connect(self, _dbapi_connection: Any, record: Any) -> None:
        record.info[self._OPENED_AT] = time.monotonic()

    def _on_checkout(self, _dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        requested_at = self._requested_at
        if requested_at is not None and record.info.get(self._OPENED_AT, self._default_opened_at) < requested_at:
            raise InvalidatePoolError("the server dropped a pooled connection: recycling the pool")


_SWEEPS: WeakKeyDictionary[Engine, PoolSweep] = WeakKeyDictionary()
_SWEEPS_LOCK = threading.Lock()


def pool_sweep(engine: Engine) -> PoolSweep:
    """The engine's one PoolSweep, installed on first use (make_engine installs it on PostgreSQL)."""
    with _SWEEPS_LOCK:
        sweep = _SWEEPS.get(engine)
        if sweep is None:
            sweep = _SWEEPS[engine] = PoolSweep(engine)
        return sweep
