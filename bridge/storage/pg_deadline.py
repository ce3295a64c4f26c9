"""A PostgreSQL connection on which no exchange with the server waits past a deadline.

libpq's own timeouts do not cover a server that stops answering while its TCP peer still acknowledges (a proxy or
a relay holding the bytes, a frozen VM behind a load balancer): ``statement_timeout`` never starts when the query
never arrives, and keepalives and ``tcp_user_timeout`` see a healthy socket. Every exchange psycopg makes (a
query, a pipeline sync, COMMIT, ROLLBACK) goes through ``Connection.wait``; here each one waits at most
``deadline_s``. A connection that missed its deadline is in an unknown state: it is closed at once, so the pool
discards it and nothing reuses it, and the caller gets ``StoreDeadlineError`` (an OperationalError, which the store
translates as unavailable). Imported only once a PostgreSQL store is configured.
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg import errors

RV = TypeVar("RV")


class StoreDeadlineError(psycopg.OperationalError):
    """The server did not answer one exchange within the connection's deadline; the connection is closed."""

    store_deadline = True  # what the unit of work tells apart from a server restart (no retry on a new connection)


class DeadlineConnection(psycopg.Connection[Any]):
    deadline_s = 7.0  # set per engine (make_engine): a little over the server's statement_timeout

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        try:
            return super().wait(gen, interval=interval, timeout=self.deadline_s if timeout is None else timeout)
        except errors._WaitTimeout as exc:  # noqa: SLF001 - psycopg's own signal that the wait ran out
            self.close()
            raise StoreDeadlineError(f"the store did not answer within {self.deadline_s:g} s") from exc


def deadline_connection_class(deadline_s: float) -> type[DeadlineConnection]:
    """A DeadlineConnection class whose exchanges wait at most ``deadline_s`` seconds."""
    return type("DeadlineConnection", (DeadlineConnection,), {"deadline_s": deadline_s})
