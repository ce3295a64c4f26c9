"""The one place where driver exceptions become bridge errors (ADR-0001: no driver error leaks upward)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from bridge.domain.errors import RunVersionConflictError, StorageError, StoreBusyError, StoreUnavailableError
from bridge.service.ports import DedupeKeyTakenError, IdempotencyKeyTakenError

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
