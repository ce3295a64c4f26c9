"""make_engine: one SQLAlchemy engine per store URL, with the SQLite and PostgreSQL settings we rely on.

SQLite: WAL, foreign keys, a short busy_timeout, and BEGIN IMMEDIATE for write transactions. pysqlite
normally delays BEGIN until the first write, so two writers can both read, then one fails with
"database is locked" mid-transaction; taking the write lock up front turns that into a clean wait
(SQLAlchemy SQLite dialect docs, "Serializable isolation / Savepoints / Transactional DDL").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

# Execution option that marks a read-only unit of work (plain deferred BEGIN on SQLite).
READ_ONLY = "bridge_read_only"
SQLITE_POOL_SIZE = 4  # one writer at a time (SqlUnitOfWork queues them), readers of the request threads
SQLITE_POOL_OVERFLOW = 4  # readers (v3 API, health, flags), the projector and the reconciler
# Page cache per connection (SQLite's default is 2000 KiB). The OS page cache holds the file anyway: on a
# store of 50,000 executions (202 MiB) a callback's writes took as long with 256 KiB as with 1 MiB.
SQLITE_CACHE_KIB = 512


def make_engine(url: str, *, sqlite_busy_timeout_ms: int = 100, pg_statement_timeout_ms: int = 5000,
                pg_search_path: str | None = None) -> Engine:
    """Build the engine; ``pg_search_path`` puts the bridge's tables in their own schema."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, sqlite_busy_timeout_ms)
    if parsed.get_backend_name() == "postgresql":
        return _postgres_engine(url, pg_statement_timeout_ms, pg_search_path)
    raise ValueError(f"unsupported store URL scheme {parsed.drivername!r} (use sqlite:/// or postgresql+psycopg://)")


def _sqlite_engine(url: str, busy_timeout_ms: int) -> Engine:
    # check_same_thread off: the pool hands a connection to one thread at a time. Each connection has its
    # own page cache, so the pool is small and LIFO (the few busiest connections are reused, the rest stay
    # cold) and each cache is bounded: SQLite has one writer at a time anyway, and an unbounded pool of
    # default 2 MiB caches grew the serving worker by tens of MiB as the store grew.
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
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _postgres_engine(url: str, statement_timeout_ms: int, search_path: str | None) -> Engine:
    # Bounded waits: a store that is down or locked raises instead of hanging the callback path.
    # No pool_pre_ping (a round trip per transaction): SqlUnitOfWork retries, once, a transaction whose
    # pooled connection the server had dropped; any other user sees one error after a server restart, and
    # SQLAlchemy then recycles the whole pool.
    options = f"-c statement_timeout={int(statement_timeout_ms)} -c lock_timeout={int(statement_timeout_ms)}"
    if search_path:
        options += f" -c search_path={search_path}"
    return create_engine(
        url,
        pool_size=5,
        max_overflow=5,
        pool_timeout=5,
        connect_args={"connect_timeout": 5, "options": options},
    )
