"""LastKnown: a value read from a store at most once per ``ttl_s``, whose last good read stays in force
while refreshes fail, and which never makes its reader wait for the store.

The values kept this way are decisions somebody else made (an operator's flags, whether the bridge still owns
an open execution): a transient read error (a dropped connection, a locked file) says nothing about them, so
it must never change them. A failure is counted each time and logged once per episode: when it begins, when the
value's age passes ``max_stale_s`` (it stays in force, and ``stale`` says so for readiness), and when reads
succeed again. The first read is made when the value is built (at start-up, never on a callback); before any read
has succeeded, ``fallback`` is in force. After that ``get`` answers at once from what is held: a refresh that is
due runs off the caller's thread, one at a time, so a store that stops answering holds that refresh alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("bridge.last_known")


def failure_name(exc: BaseException) -> str:
    """A bounded name for a failure: a BridgeError's code, else the exception's type (never its message,
    which may quote a URL, a path or a value)."""
    return str(getattr(exc, "code", None) or type(exc).__name__)


def in_background(what: str) -> Callable[[Callable[[], None]], None]:
    """Runs each refresh on a daemon thread of its own, named for the value (at most one runs at a time)."""
    def start(refresh: Callable[[], None]) -> None:
        threading.Thread(target=refresh, name=f"refresh-{what}", daemon=True).start()

    return start


def inline(refresh: Callable[[], None]) -> None:
    """Runs a refresh on the caller's thread: for a caller that may wait (a command, a test's fixed clock)."""
    refresh()


class LastKnown(Generic[T]):
    def __init__(self, read: Callable[[], T], *, what: str, fallback: T, ttl_s: float = 1.0,
                 max_stale_s: float = 60.0, on_failure: Callable[[str], None] = lambda _error: None,
                 clock: Callable[[], float] = time.monotonic,
                 refresh_in: Callable[[Callable[[], None]], None] | None = None) -> None:
        """``what`` names the value in log lines ("flags"); ``on_failure`` gets the failure's bounded name;
        ``refresh_in`` runs a due refresh (on a thread of its own by default). The first read happens here."""
        self._read = read
        self._what = what
        self._ttl_s = ttl_s
        self.max_stale_s = max_stale_s
        self._on_failure = on_failure
        self._clock = clock
        self._lock = threading.Lock()
        self._value = fallback
        self._read_ok_at: float | None = None  # the last successful read
        self._failures = 0  # failed refreshes in the current episode
        self._stale_logged = False
        self._refreshing = False
        self._refresh_in = refresh_in or in_background(what)
        self._tried_at = self._clock()
        self._refresh()

    def get(self) -> T:
        """The value in force, at once. When it is older than ``ttl_s`` and no refresh is running, one is
        started; the value it reads (or keeps, when it fails) is in force for the next caller."""
        with self._lock:
            now = self._clock()
            due = not self._refreshing and now - self._tried_at >= self._ttl_s
            if due:
                self._tried_at, self._refreshing = now, True
            if not due:
                return self._value
        self._refresh_in(self._refresh)
        with self._lock:  # what the refresh read when it ran inline; the value held so far when it runs apart
            return self._value

    def keep_fresh(self, every_s: float) -> Callable[[], None]:
        """Ask for the value every ``every_s`` on a daemon thread, so that a refresh is due and started within
        that long of the value turning ``ttl_s`` old, whether or not anybody reads it (an idle bridge's first
        callback after an operator's change sees the change). Returns the function that stops it."""
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(every_s):
                self.get()

        threading.Thread(target=tick, name=f"fresh-{self._what}", daemon=True).start()
        return stop.set

    def put(self, value: T) -> None:
        """A value known first-hand (this process just wrote it): in force now, as if just read."""
        with self._lock:
            now = self._clock()
            self._value, self._read_ok_at, self._tried_at = value, now, now

    def age_s(self) -> float | None:
        """Seconds since the value in force was read; None before any read succeeded."""
        with self._lock:
            return None if self._read_ok_at is None else self._clock() - self._read_ok_at

    @property
    def failing(self) -> bool:
        """Whether the latest refresh failed."""
        with self._lock:
            return self._failures > 0

    @property
    def stale(self) -> bool:
        """The latest refresh failed and the value in force is older than ``max_stale_s`` (or was never read)."""
        with self._lock:
            return self._failures > 0 and (self._read_ok_at is None
                                           or self._clock() - self._read_ok_at > self.max_stale_s)

    @property
    def refreshing(self) -> bool:
        """Whether a refresh is running now."""
        with self._lock:
            return self._refreshing

    def _refresh(self) -> None:
        """One read, outside the lock (readers keep the value in force meanwhile); its outcome under it."""
        try:
            value, error = self._read(), None
        except Exception as exc:  # noqa: BLE001 - any failure keeps the last value; it is counted and logged
            value, error = None, failure_name(exc)
        with self._lock:
            self._refreshing = False
            now = self._clock()
            if error is not None:
                self._failed(now, error)
                return
            if self._failures:
                log.warning("%s readable again after %d failed reads", self._what, self._failures)
            self._value, self._read_ok_at, self._failures, self._stale_logged = value, now, 0, False  # type: ignore[assignment]

    def _failed(self, now: float, error: str) -> None:
        self._failures += 1
        self._on_failure(error)
        never_read = self._read_ok_at is None
        if self._failures == 1:
            kept = "using the default" if never_read else "keeping the last read in force"
            log.warning("%s unreadable (%s): %s", self._what, error, kept)
        age = None if never_read else now - self._read_ok_at  # type: ignore[operator]
        if not self._stale_logged and age is not None and age > self.max_stale_s:
            self._stale_logged = True
            log.error("%s still unreadable (%s) after %.0f s: the last read stays in force; readiness reports "
                      "it stale until a read succeeds", self._what, error, age)
