"""The one place where driver exceptions become bridge errors (docs/run-state.md#transaction-boundaries: no driver error
leaks upward)."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic.util import CommandError
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from bridge.domain.errors import (
    RunVersionConflictError,
    SchemaMismatchError,
    StorageError,
    StoreBusyError,
    StoreUnavailableError,
)
from bridge.service.ports import DedupeKeyTakenError, IdempotencyKeyTakenError
from bridge.storage.engine import READ_ONLY
from legacy_adapters.errors import LegacyDatabaseError

_BUSY_MARKERS = ("database is locked", "database table is locked", "database is busy")
_SQLSTATE_UNAVAILABLE = ("08", "25006")  # connection exceptions; a read-only server (a standby, a failover)
_SQLSTATE_TRANSIENT = ("40001", "40P01", "55P03", "57014")  # serialization, deadlock, lock/statement timeout


def is_sqlite_busy(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and any(m in str(exc.orig).lower() for m in _BUSY_MARKERS)


def translate_integrity_error(exc: IntegrityError, *, run_id: str, dedupe_key: str | None,
                              project_id: str | None, idempotency_key: str | None,
                              expected_version: int | None) -> Exception:
    """Name the constraint a racing write hit; the names carry the column names on both backends."""
    text = str(exc.orig)
    if "dedupe_key" in text and dedupe_key is not None:
        return DedupeKeyTakenError(run_id, dedupe_key)
    if "idempotency_key" in text and project_id is not None and idempotency_key is not None:
        return IdempotencyKeyTakenError(project_id, idempotency_key)
    if "sequence" in text:
        # Another transaction appended at our sequence numbers first: a lost version race.
        return RunVersionConflictError(run_id, expected_version if expected_version is not None else -1, None)
    return StorageError("the store refused a write (constraint)", constraint=_constraint_name(text))


def translate_operational_error(exc: DBAPIError) -> StorageError:
    if is_sqlite_busy(exc):
        return StoreBusyError("the bridge store stayed locked past the busy-retry budget")
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    if sqlstate.startswith(_SQLSTATE_TRANSIENT):
        return StoreBusyError("the bridge store timed out waiting for a lock", sqlstate=sqlstate)
    if isinstance(exc, OperationalError) or sqlstate.startswith(_SQLSTATE_UNAVAILABLE):
        return StoreUnavailableError("the bridge store is unavailable", driver_error=type(exc.orig).__name__)
    return StorageError("the bridge store failed", driver_error=type(exc.orig).__name__)


def _constraint_name(text: str) -> str:
    # Constraint names only (never values): keep the part before any DETAIL line.
    return text.splitlines()[0][:120] if text else "unknown"


def store_location(url: str | URL) -> str:
    """Where a store is, for a message: the SQLite file's path, or host:port/database (never a password)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return str(sqlite_file(parsed) or ":memory:")
    return f"{parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"


def sqlite_file(url: str | URL) -> Path | None:
    """The file of a sqlite:/// URL (also ``sqlite:///file:PATH?mode=ro&uri=true``); None for memory."""
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    return Path(database.removeprefix("file:").split("?", 1)[0])


def store_failure_cause(exc: BaseException, url: str | URL) -> str | None:
    """Which failure the driver error behind ``exc`` (``exc`` or its causes) is, in a few words, or None.

    libpq puts no SQLSTATE on a failed connection, so its message tells refused / no such database /
    authentication apart; SQLite's "unable to open" is told apart by looking at the file and its folder.
    """
    driver = _driver_error(exc)
    if driver is None:
        return None
    text = str(driver).lower()
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_cause(text, sqlite_file(parsed))
    sqlstate = getattr(driver, "sqlstate", None) or ""
    if sqlstate == "3D000" or re.search(r'database ".*" does not exist', text):
        return f"database {parsed.database!r} does not exist on the server"
    if sqlstate.startswith("28") or "authentication failed" in text or re.search(r'role ".*" does not exist', text):
        return f"the server refused user {parsed.username!r} (authentication failed or no such role)"
    if "connection refused" in text:
        return "nothing accepts connections there (connection refused: is PostgreSQL running?)"
    if "resolve host" in text or "translate host name" in text:
        return "the host name does not resolve"
    if "timeout" in text or "timed out" in text:
        return "the connection timed out"
    if sqlstate == "25006" or "read-only transaction" in text:
        return "the server accepts no writes (a standby, or default_transaction_read_only)"
    if sqlstate.startswith("57P"):
        return "the server is starting up or shutting down"
    return None


def url_without_password(url: str | URL) -> str:
    """A store URL as it may be shown: everything but its password."""
    return make_url(url).render_as_string(hide_password=True)


# What describe_store_failure describes: the bridge's own StorageError, any SQLAlchemy error (the drivers'
# arrive wrapped in DBAPIError), sqlite3's own (raised while a SQLite file is looked at before an engine
# connects) and Alembic's refusal of a revision. A caller catches exactly these to hand them over.
STORE_FAILURES: tuple[type[Exception], ...] = (StorageError, SQLAlchemyError, sqlite3.Error, CommandError)


@dataclass(frozen=True)
class StoreFailure:
    """A failure of the bridge store told in one line. ``code`` is the bridge error code (what a log or a
    recorded result keeps); None for Alembic's refusal, which is not a bridge error."""

    code: str | None
    line: str


def describe_store_failure(exc: BaseException, database_url: str | URL) -> StoreFailure | None:
    """``exc`` as a failure of the store at ``database_url``: its code, then one line naming the store (never
    its password) and, when the driver says, the cause (`store_failure_cause`). None when ``exc`` is not one
    of STORE_FAILURES, so a caller can fall back to its own wording.

    A driver error gets the code `translate_operational_error` gives it (STORE_BUSY, STORE_UNAVAILABLE,
    STORAGE_ERROR); another SQLAlchemy error or a bare sqlite3 one is STORAGE_ERROR. A caller for whom a
    bare sqlite3 error means some other file (2.x's database) must tell that apart before calling.
    """
    if isinstance(exc, CommandError):  # raised before anything changed: an unknown or unreachable revision
        return StoreFailure(None, f"alembic: {exc}; the bridge store at {store_location(database_url)} is unchanged")
    if isinstance(exc, SchemaMismatchError):  # its message names the store and both revisions itself
        return StoreFailure(exc.code, f"{exc.code}: {exc.message}")
    if isinstance(exc, StorageError):
        error = exc
    elif isinstance(exc, DBAPIError):
        error = translate_operational_error(exc)
    elif isinstance(exc, (SQLAlchemyError, sqlite3.Error)):
        error = StorageError("the bridge store failed", driver_error=type(exc).__name__)
    else:
        return None
    where = store_location(database_url)
    message = (error.message.replace("the bridge store", f"the bridge store at {where}", 1)
               if "the bridge store" in error.message else f"{error.message} ({where})")
    cause = store_failure_cause(exc, database_url)
    return StoreFailure(error.code, f"{error.code}: {message}" + (f": {cause}" if cause else ""))


def _driver_error(exc: BaseException) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError):
            return current.orig
        if isinstance(current, sqlite3.Error) or type(current).__module__.startswith("psycopg"):
            return current
        current = current.__cause__ or current.__context__
    return None


def _sqlite_cause(text: str, path: Path | None) -> str | None:
    if "readonly" in text or "read-only" in text:
        return "the store is read-only (the file, or how it was opened)"
    if "unable to open" in text and path is not None:
        folder = path.parent
        if not folder.is_dir():
            return f"its folder {folder} does not exist"
        if not os.access(folder, os.W_OK):
            return f"its folder {folder} is read-only (SQLite writes its -wal and -shm files beside the store)"
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            return "the file cannot be read and written"
        return "the file cannot be opened"
    for marker, cause in (("not a database", "the file is not an SQLite database"),
                          ("malformed", "the file is damaged (malformed)"),
                          ("disk is full", "the disk is full"), ("disk i/o", "a disk I/O error")):
        if marker in text:
            return cause
    return None


@contextmanager
def translated_read(engine: Engine) -> Iterator[Connection]:
    """One read-only transaction (a deferred BEGIN on SQLite, never the write lock), rolled back on exit;
    driver errors become StorageErrors."""
    try:
        with engine.connect() as conn:
            yield conn.execution_options(**{READ_ONLY: True})
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc


def reconcile_failure_code(exc: BaseException) -> str | None:
    """The code a failed reconcile pass records for a driver error (the store's, translated as every store call
    is, or 2.x's file read outside LegacyReader); None when ``exc`` is no driver error."""
    if isinstance(exc, DBAPIError):  # SQLAlchemy's own ``code`` is a documentation link id, not a cause
        return translate_operational_error(exc).code
    if isinstance(exc, sqlite3.Error):  # the store's driver errors arrive wrapped: a bare one is 2.x's file
        return LegacyDatabaseError.code
    return None
