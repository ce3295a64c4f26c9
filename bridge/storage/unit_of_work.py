"""SqlUnitOfWork: one transaction per call, with a bounded, jittered retry while SQLite is busy.

Only "database is locked" before commit, and a connection the server dropped before commit, are retried:
the whole function runs again on a fresh transaction, re-reading everything, so a CAS decision is never
replayed blindly. A CAS miss
(RunVersionConflictError) is a domain answer and is never retried here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from bridge.domain.errors import StoreBusyError
from bridge.storage.engine import READ_ONLY
from bridge.storage.errors import is_sqlite_busy, translate_operational_error
from bridge.storage.runs import SqlRunStore

T = TypeVar("T")


class SqlUnitOfWork:
    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, busy_attempts: int = 4,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.engine = engine
        self._budget_s = busy_budget_ms / 1000
        self._attempts = max(1, busy_attempts)
        self._sleep = sleep

    def write(self, work: Callable[[SqlRunStore], T]) -> T:
        return self._run(work, read_only=False)

    def read(self, work: Callable[[SqlRunStore], T]) -> T:
        return self._run(work, read_only=True)

    def _run(self, work: Callable[[SqlRunStore], T], *, read_only: bool) -> T:
        deadline = time.monotonic() + self._budget_s
        reconnected = False
        for attempt in range(1, self._attempts + 1):
            try:
                return self._once(work, read_only)
            except _StaleConnection as stale:
                if reconnected:
                    raise translate_operational_error(stale.error) from stale.error
                reconnected = True  # the pool dropped that connection; one fresh try, at once
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

    Retried once on a fresh connection instead of pinging every connection at checkout, which would cost
    a round trip per transaction on the callback path (SQLAlchemy "Dealing with Disconnects", optimistic).
    """

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error
