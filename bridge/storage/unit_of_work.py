"""SqlUnitOfWork: one transaction per call, with a bounded, jittered retry while SQLite is busy.

SQLite lets one transaction write at a time, so this process's writers queue on a gate before they take
a pooled connection: the next one goes the moment the last commits, instead of every waiting lane holding
a connection (and its page cache) while SQLite's busy handler sleeps and polls. Writers in other
processes still meet SQLite's own lock, which the busy retry below waits out.

Only "database is locked" before commit, and a connection the server dropped before commit, are retried:
the whole function runs again on a fresh transaction, re-reading everything, so a CAS decision is never
replayed blindly. A dropped connection first sweeps the whole pool (a server restart dropped its siblings
too), so the one retry runs on a freshly opened connection. A CAS miss (RunVersionConflictError) is a
domain answer and is never retried here; neither is a failure during COMMIT, whose outcome is unknown.

Each write's outcome (committed, or failed in the store) goes to `WriteOutcomes`, which readiness judges
the store on: a full disk or a read-only file fails every write while `SELECT 1` still answers.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.domain.errors import StorageError, StoreBusyError, StoreUnavailableError
from bridge.storage.engine import READ_ONLY, pool_sweep
from bridge.storage.errors import is_sqlite_busy, translate_operational_error
from bridge.storage.runs import SqlRunStore

T = TypeVar("T")
S = TypeVar("S")  # the store a transaction hands out (store_factory's)


class SqlUnitOfWork(Generic[S]):
    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, busy_attempts: int = 4,
                 sleep: Callable[[float], None] = time.sleep, queue_writers: bool = True,
                 outcomes: WriteOutcomes | None = None,
                 store_factory: Callable[[Connection], S] = SqlRunStore) -> None:  # type: ignore[assignment]
        """``queue_writers=False`` leaves a SQLite writer's wait to SQLite's busy handler alone (benchmarks);
        ``store_factory`` builds the store a transaction hands out on its connection (SqlRunStore; the import's
        is bridge.storage.imports.SqlImportStore)."""
        self.engine = engine
        self._store = store_factory
        self.outcomes = outcomes if outcomes is not None else WriteOutcomes()
        self._budget_s = busy_budget_ms / 1000
        self._attempts = max(1, busy_attempts)
        self._sleep = sleep
        self._writers = _writer_gate(engine) if queue_writers and engine.dialect.name == "sqlite" else None
        self._sweep = pool_sweep(engine) if engine.dialect.name == "postgresql" else None

    def write(self, work: Callable[[S], T]) -> T:
        """One write transaction; its outcome is recorded in ``outcomes``."""
        return self._run(lambda conn: work(self._store(conn)), read_only=False, record=True)

    def read(self, work: Callable[[S], T]) -> T:
        return self._run(lambda conn: work(self._store(conn)), read_only=True, record=False)

    def probe_read(self) -> None:
        """One round trip to the store (``SELECT 1`` in a read transaction): it answers, within its deadlines.
        Raises StoreUnavailableError / StoreBusyError. Not recorded."""
        self._run(_select_one, read_only=True, record=False)

    def probe_write(self) -> None:
        """Open a write transaction and commit it empty. Raises StoreBusyError / StoreUnavailableError.

        What it proves: the store is reachable and would let this process write. On SQLite the BEGIN
        IMMEDIATE takes the write lock, which a read-only file or directory, or another process holding
        the lock past the budget, refuses; on PostgreSQL the server says the transaction may write (not a
        standby, not default_transaction_read_only). What it cannot prove: that pages can be written. It
        writes nothing, so a full disk passes; only real commits (``outcomes``) show that. Not recorded.
        """
        self._run(_refuse_read_only, read_only=False, record=False)

    def _run(self, work: Callable[[Connection], T], *, read_only: bool, record: bool) -> T:
        deadline = time.monotonic() + self._budget_s
        if read_only or self._writers is None:
            return self._attempts_until(deadline, work, read_only, record)
        if not self._writers.acquire(timeout=self._budget_s):
            raise self._failed(record, StoreBusyError(
                "the bridge store's other writers held it past the busy-retry budget", attempts=0))
        try:
            return self._attempts_until(deadline, work, read_only, record)
        finally:
            self._writers.release()

    def _attempts_until(self, deadline: float, work: Callable[[Connection], T], read_only: bool,
                        record: bool) -> T:
        reconnected = False
        for attempt in range(1, self._attempts + 1):
            try:
                result = self._once(work, read_only)
            except _StaleConnection as stale:
                # A connection that missed its deadline says the store is silent, not restarted: a new one
                # would only wait again (bridge.storage.pg_deadline).
                if reconnected or getattr(stale.error.orig, "store_deadline", False):
                    raise self._failed(record, translate_operational_error(stale.error)) from stale.error
                reconnected = True  # one fresh try, at once, on a connection opened after the sweep
                if self._sweep is not None:
                    self._sweep.request()
                continue
            except DBAPIError as exc:
                if not is_sqlite_busy(exc):
                    # A constraint the work did not translate is a refusal of this write, not of every write.
                    raise self._failed(record and not isinstance(exc, IntegrityError),
                                       translate_operational_error(exc)) from exc
                remaining = deadline - time.monotonic()
                if attempt == self._attempts or remaining <= 0:
                    raise self._failed(record, StoreBusyError(
                        "the bridge store stayed locked past the busy-retry budget", attempts=attempt)) from exc
                # Full jitter, so racing writers spread out instead of colliding again.
                self._sleep(min(remaining, random.uniform(0, self._budget_s / self._attempts)))
                continue
            if record:
                self.outcomes.succeeded()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _failed(self, record: bool, error: StorageError) -> StorageError:
        if record:
            self.outcomes.failed(error.code)
        return error

    def _once(self, work: Callable[[Connection], T], read_only: bool) -> T:
        with self.engine.connect() as conn:
            if read_only:
                conn = conn.execution_options(**{READ_ONLY: True})
            transaction = conn.begin()
            try:
                result = work(conn)
            except DBAPIError as exc:
                transaction.rollback()
                if exc.connection_invalidated:
                    raise _StaleConnection(exc) from exc  # lost before commit: nothing was written
                raise
            except BaseException:
                transaction.rollback()
                raise
            try:
                transaction.commit()
            except DBAPIError:
                # SQLite may leave the transaction open after a failed COMMIT (SQLITE_FULL, SQLITE_IOERR),
                # and SQLAlchemy pools the connection without a rollback: every later BEGIN on it would
                # fail. Closing it ends that transaction. A connection lost during COMMIT leaves the outcome
                # unknown: that error is never retried (only a busy COMMIT, which committed nothing, is).
                conn.invalidate()
                raise
            return result


def _select_one(conn: Connection) -> None:
    conn.exec_driver_sql("SELECT 1").scalar()


def _refuse_read_only(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        # BEGIN IMMEDIATE alone succeeds on a file opened read-only (mode=ro, immutable=1); a write statement
        # does not, even one that changes no row (SQLITE_READONLY), and it leaves nothing to commit.
        conn.exec_driver_sql("DELETE FROM bridge_settings WHERE 0")
    elif conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on":
        raise StoreUnavailableError("the bridge store accepts no writes (read-only transaction)")


@dataclass(frozen=True)
class WriteSummary:
    """The real commits of the last ``window_s`` seconds (at most the last ``WriteOutcomes.keep``)."""

    window_s: float
    successes: int
    failures: int
    last_ok: bool | None  # None: no write in the window
    last_error: str | None  # the code of the latest failure in the window
    last_age_s: float | None

    @property
    def writable(self) -> bool | None:
        """None without writes; else True when the latest commit succeeded and failures are no majority.

        The majority rule keeps an empty commit (a duplicate callback writes nothing, so it commits even on
        a full disk) from calling a store writable between failures; one failure among successes, or a
        failure followed by as many successes, is a blip, not an unwritable store.
        """
        if self.last_ok is None:
            return None
        return self.last_ok and self.failures <= self.successes


class WriteOutcomes:
    """Outcomes of the last ``keep`` writes through SqlUnitOfWork: committed, or failed in the store.

    Thread-safe (every request thread writes). A domain refusal (a CAS miss, an invalid transition, a
    constraint) says nothing about the store and is not recorded; neither are reads and probes.
    """

    def __init__(self, keep: int = 32, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, str | None]] = deque(maxlen=keep)  # (at, error code or None)

    def succeeded(self) -> None:
        with self._lock:
            self._recent.append((self._clock(), None))

    def failed(self, code: str) -> None:
        with self._lock:
            self._recent.append((self._clock(), code))

    def summary(self, window_s: float) -> WriteSummary:
        now = self._clock()
        with self._lock:
            recent = [(at, code) for at, code in self._recent if now - at <= window_s]
        if not recent:
            return WriteSummary(window_s, 0, 0, None, None, None)
        failures = [code for _, code in recent if code is not None]
        last_at, last_code = recent[-1]
        return WriteSummary(window_s, len(recent) - len(failures), len(failures), last_code is None,
                            failures[-1] if failures else None, round(now - last_at, 3))


class _StaleConnection(Exception):
    """The server closed a pooled connection (a restart, an idle timeout) before this transaction committed.

    The pool is swept and the work retried once on a fresh connection, instead of pinging every connection
    at checkout, which would cost a round trip per transaction on the callback path (SQLAlchemy "Dealing
    with Disconnects", optimistic).
    """

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


_WRITER_GATES: WeakKeyDictionary[Engine, threading.Lock] = WeakKeyDictionary()
_GATES_LOCK = threading.Lock()


def _writer_gate(engine: Engine) -> threading.Lock:
    """One gate per engine (per store file), shared by every unit of work built on it."""
    with _GATES_LOCK:
        gate = _WRITER_GATES.get(engine)
        if gate is None:
            gate = _WRITER_GATES[engine] = threading.Lock()
        return gate
