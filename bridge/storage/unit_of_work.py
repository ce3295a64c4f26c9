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
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from bridge.domain.errors import StoreBusyError
from bridge.storage.engine import READ_ONLY, pool_sweep
from bridge.storage.errors import is_sqlite_busy, translate_operational_error
from bridge.storage.runs import SqlRunStore

T = TypeVar("T")


class SqlUnitOfWork:
    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, busy_attempts: int = 4,
                 sleep: Callable[[float], None] = time.sleep, queue_writers: bool = True) -> None:
        """``queue_writers=False`` leaves a SQLite writer's wait to SQLite's busy handler alone (benchmarks)."""
        self.engine = engine
        self._budget_s = busy_budget_ms / 1000
        self._attempts = max(1, busy_attempts)
        self._sleep = sleep
        self._writers = _writer_gate(engine) if queue_writers and engine.dialect.name == "sqlite" else None
        self._sweep = pool_sweep(engine) if engine.dialect.name == "postgresql" else None

    def write(self, work: Callable[[SqlRunStore], T]) -> T:
        return self._run(work, read_only=False)

    def read(self, work: Callable[[SqlRunStore], T]) -> T:
        return self._run(work, read_only=True)

    def _run(self, work: Callable[[SqlRunStore], T], *, read_only: bool) -> T:
        deadline = time.monotonic() + self._budget_s
        if read_only or self._writers is None:
            return self._attempts_until(deadline, work, read_only)
        if not self._writers.acquire(timeout=self._budget_s):
            raise StoreBusyError("the bridge store's other writers held it past the busy-retry budget", attempts=0)
        try:
            return self._attempts_until(deadline, work, read_only)
        finally:
            self._writers.release()

    def _attempts_until(self, deadline: float, work: Callable[[SqlRunStore], T], read_only: bool) -> T:
        reconnected = False
        for attempt in range(1, self._attempts + 1):
            try:
                return self._once(work, read_only)
            except _StaleConnection as stale:
                if reconnected:
                    raise translate_operational_error(stale.error) from stale.error
                reconnected = True  # one fresh try, at once, on a connection opened after the sweep
                if self._sweep is not None:
                    self._sweep.request()
                continue
            except DBAPIError as exc:
                if not is_sqlite_busy(exc):
                    raise translate_operational_error(exc) from exc
                remaining = deadline - time.monotonic()
                if attempt == self._attempts or remaining <= 0:
                    raise StoreBusyError("the bridge store stayed locked past the busy-retry budget",
                                         attempts=attempt) from exc
                # Full jitter, so racing writers spread out instead of colliding again.
                self._sleep(min(remaining, random.uniform(0, self._budget_s / self._attempts)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, work: Callable[[SqlRunStore], T], read_only: bool) -> T:
        with self.engine.connect() as conn:
            if read_only:
                conn = conn.execution_options(**{READ_ONLY: True})
            transaction = conn.begin()
            try:
                result = work(SqlRunStore(conn))
            except DBAPIError as exc:
                transaction.rollback()
                if exc.connection_invalidated:
                    raise _StaleConnection(exc) from exc  # lost before commit: nothing was written
                raise
            except BaseException:
                transaction.rollback()
                raise
            # A connection lost during COMMIT leaves the outcome unknown: that error is never retried.
            transaction.commit()
            return result


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
