"""A PostgreSQL connection on which no exchange with the server waits past a deadline.

libpq's own timeouts do not cover a server that stops answering while its TCP peer still acknowledges (a proxy or
a relay holding the bytes, a frozen VM behind a load balancer): ``statement_timeout`` never starts when the query
never arrives, and keepalives and ``tcp_user_timeout`` see a healthy socket. Every exchange psycopg makes (a
query, a pipeline sync, COMMIT, ROLLBACK) goes through ``Connection.wait``; here each one is watched, and one
still waiting at its deadline has its socket shut down by the watchdog, which wakes the wait with an error. A
connection that missed its deadline is in an unknown state: it is closed at once, so the pool discards it and
nothing reuses it, and the caller gets ``StoreDeadlineError`` (an OperationalError, which the store translates as
unavailable). This relies only on ``Connection.wait`` existing, not on how a psycopg release waits.
Imported only once a PostgreSQL store is configured.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import Any

import psycopg

WATCH_TICK_S = 0.1  # how late past its deadline a wait may be cut


class StoreDeadlineError(psycopg.OperationalError):
    """The server did not answer one exchange within the connection's deadline; the connection is closed."""

    store_deadline = True  # what the unit of work tells apart from a server restart (no retry on a new connection)


class _Watchdog:
    """One thread for the process: shuts down the socket of every exchange still waiting past its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, int]] = {}  # token -> (deadline, socket fd)
        self._cut: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, fd: int, deadline: float) -> int:
        token = next(self._tokens)
        with self._lock:
            self._watched[token] = (deadline, fd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="store-deadlines", daemon=True)
                self._thread.start()
        return token

    def release(self, token: int) -> bool:
        """Stop watching; True when the watchdog cut this exchange at its deadline."""
        with self._lock:
            self._watched.pop(token, None)
            if token in self._cut:
                self._cut.discard(token)
                return True
            return False

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_TICK_S)
            now = time.monotonic()
            with self._lock:
                overdue = [(token, fd) for token, (deadline, fd) in self._watched.items() if deadline <= now]
                for token, _fd in overdue:
                    del self._watched[token]
                    self._cut.add(token)
            for _token, fd in overdue:
                _shut_down(fd)


def _shut_down(fd: int) -> None:
    """Shut the connection's socket down (a duplicate descriptor, so psycopg's own stays its to close)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the wait has ended by itself


_WATCHDOG = _Watchdog()


class DeadlineConnection(psycopg.Connection[Any]):
    deadline_s = 7.0  # set per engine (make_engine): a little over the server's statement_timeout

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        token = _WATCHDOG.watch(self.pgconn.socket, time.monotonic() + self.deadline_s)
        cut = False
        try:
            return super().wait(gen, *args, **kwargs)
        except Exception as exc:  # whatever a shut-down socket makes psycopg raise, when the watchdog shut it
            cut = _WATCHDOG.release(token)
            if not cut:
                raise
            self.close()
            raise StoreDeadlineError(f"the store did not answer within {self.deadline_s:g} s") from exc
        finally:
            if not cut:
                _WATCHDOG.release(token)


def deadline_connection_class(deadline_s: float) -> type[DeadlineConnection]:
    """A DeadlineConnection class whose exchanges wait at most ``deadline_s`` seconds."""
    return type("DeadlineConnection", (DeadlineConnection,), {"deadline_s": deadline_s})
