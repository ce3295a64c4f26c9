"""The statement engine of the bridge store: Core statements compiled once per dialect and run on the DB-API
cursor several at a time, in one round trip on PostgreSQL (psycopg's pipeline mode).

Rebuilding, re-compiling and wrapping results on every call would cost more than the database work itself.
Driver errors are wrapped exactly as SQLAlchemy wraps them, so storage/errors.py sees the same types.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import ClauseElement, Connection, Dialect, Index
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

Params = dict[str, Any]
# A statement and its parameters: one dict, or a list of them for executemany.
Statement = tuple["CompiledStatement", Params | list[Params]]


@dataclass(frozen=True, slots=True)
class StatementResult:
    rowcount: int
    rows: list[dict[str, Any]]

    def first(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    def truth(self) -> bool:
        """The first column of the first row as a bool (an EXISTS), False when there is no row."""
        row = self.first()
        return bool(row and next(iter(row.values())))


def pin_sqlite_index(sql: str, index: Index) -> str:
    """SQLite text that reads the index's table only through that index (``INDEXED BY``), at every FROM of it.

    Nothing runs ANALYZE on a SQLite store, and without statistics SQLite weighs a partial index no lighter
    than a full one: for a cron's open Runs it took ix_runs_cron_created_id, which gives the same order, and
    read the cron's whole history on every callback. INDEXED BY is SQLite's own way to hold a time-critical
    statement to its index; a schema without that index makes the statement fail instead of slowing down.
    """
    table = index.table.name  # type: ignore[union-attr]
    pinned, count = re.subn(rf"\bFROM {table}\b", f"FROM {table} INDEXED BY {index.name}", sql)
    if count == 0:
        raise ValueError(f"no FROM {table} in the statement to pin to {index.name}")
    return pinned


class CompiledStatement:
    """One Core statement, compiled on first use for each dialect into (sql, positional order, defaults).

    ``sqlite_index``: an index of the statement's table that its SQLite text must read (``pin_sqlite_index``).
    """

    def __init__(self, stmt: ClauseElement, column_keys: list[str] | None = None, *,
                 sqlite_index: Index | None = None) -> None:
        self._stmt = stmt
        self._keys = column_keys
        self._sqlite_index = sqlite_index
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None, Params]] = {}
        # Result column names per dialect, taken from the first result: a statement's shape never changes,
        # and psycopg builds a description object per column each time it is asked (a 64-column read
        # spent more time there than in the query).
        self._names: dict[str, list[str] | None] = {}

    def execute(self, conn: Connection, params: Params | list[Params]) -> StatementResult:
        return execute_all(conn, [(self, params)])[0]

    def bind(self, dialect: Dialect, params: Params | list[Params]) -> tuple[str, Any]:
        sql, order, defaults = self._for(dialect)
        if isinstance(params, list):
            return sql, [self._args(p, order, defaults) for p in params]
        return sql, self._args(params, order, defaults)

    @staticmethod
    def _args(params: Params, order: tuple[str, ...] | None, defaults: Params) -> Any:
        if defaults:  # binds the statement fills itself, e.g. SQLite's OFFSET 0 after a LIMIT
            params = {**defaults, **params}
        return params if order is None else tuple(params[k] for k in order)

    def collect(self, dialect: Dialect, cursor: Any) -> StatementResult:
        """The cursor's row count and rows (as dicts by column name) after this statement ran."""
        if dialect.name in self._names:
            names = self._names[dialect.name]
        else:
            description = cursor.description
            names = self._names[dialect.name] = [d[0] for d in description] if description is not None else None
        rows = [dict(zip(names, row)) for row in cursor.fetchall()] if names is not None else []
        return StatementResult(cursor.rowcount, rows)

    def _for(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None, Params]:
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = cast(SQLCompiler, self._stmt.compile(dialect=dialect, column_keys=self._keys))
            order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
            defaults = {name: bind.value for name, bind in compiled.binds.items()
                        if not bind.required and bind.value is not None}
            sql = str(compiled)
            if self._sqlite_index is not None and dialect.name == "sqlite":
                sql = pin_sqlite_index(sql, self._sqlite_index)
            found = self._compiled[dialect.name] = (sql, order, defaults)
        return found


def execute_all(conn: Connection, statements: list[Statement]) -> list[StatementResult]:
    """Run the statements in order and return their results; on PostgreSQL in one round trip where it can.

    Every statement sent to PostgreSQL costs a round trip, and psycopg adds one more for the BEGIN that opens
    the transaction. In pipeline mode (psycopg, libpq 14+) the statements, and a pending BEGIN, go out
    together and the first error aborts the rest, which then raises here; results are read after the sync,
    so a compare-and-set still sees its own row count before anything commits.
    """
    dbapi = conn.dialect.loaded_dbapi
    raw = conn.connection.dbapi_connection
    batched = _pipeline_for(raw, several=len(statements) > 1)
    cursors: list[Any] = []
    sql, args = "", None
    try:
        with batched:
            for statement, params in statements:
                sql, args = statement.bind(conn.dialect, params)
                cursor = conn.connection.cursor()
                cursors.append(cursor)
                (cursor.executemany if isinstance(params, list) else cursor.execute)(sql, args)
        return [statement.collect(conn.dialect, cursor) for (statement, _), cursor in zip(statements, cursors)]
    except dbapi.Error as exc:
        # As Connection._handle_dbapi_exception does: a lost connection is invalidated (so the pool never
        # hands it out again) and the error says so, which lets the unit of work retry on a fresh one.
        lost = conn.dialect.is_disconnect(exc, raw, cursors[-1] if cursors else None)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(sql, args, exc, dbapi.Error, dialect=conn.dialect,
                                  connection_invalidated=lost) from exc
    finally:
        for cursor in cursors:
            cursor.close()


def _pipeline_for(raw: Any, *, several: bool) -> AbstractContextManager[Any]:
    """psycopg's pipeline when it saves a round trip: several statements, or one that opens the transaction."""
    pipeline = getattr(raw, "pipeline", None)
    if pipeline is None or not _pipeline_supported():
        return nullcontext()  # SQLite, or a libpq without pipeline mode
    if several or raw.info.transaction_status == _idle_status():
        return cast(AbstractContextManager[Any], pipeline())
    return nullcontext()


# psycopg is imported only once a PostgreSQL connection exists: on the SQLite default, loading it and
# libpq would cost the worker several MiB for nothing.
@cache
def _pipeline_supported() -> bool:
    import psycopg

    return psycopg.Pipeline.is_supported()


@cache
def _idle_status() -> Any:
    from psycopg.pq import TransactionStatus

    return TransactionStatus.IDLE
