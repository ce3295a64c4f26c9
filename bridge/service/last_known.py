"""LastKnown: a value read from a store at most once per ``ttl_s``, whose last good read stays in force
while refreshes fail.

The values kept this way are decisions somebody else made (an operator's flags, whether the bridge still owns
an open execution): a transient read error (a dropped connection, a locked file) says nothing about them, so
it must never change them. A failure is counted each time and logged once per episode: when it begins, when the
value's age passes ``max_stale_s`` (it stays in force, and ``stale`` says so for readiness), and when reads
succeed again. Before any read has succeeded there is nothing to keep, and ``fallback`` is used.
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


class LastKnown(Generic[T]):
    def __init__(self, read: Callable[[], T], *, what: str, fallback: T, ttl_s: float = 1.0,
                 max_stale_s: float = 60.0, on_failure: Callable[[str], None] = lambda _error: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``what`` names the value in log lines ("flags"); ``on_failure`` gets the failure's bounded name."""
        self._read = read
        self._what = what
        self._ttl_s = ttl_s
        self.max_stale_s = max_stale_s
        self._on_failure = on_failure
        self._clock = clock
        self._lock = threading.Lock()
        self._value = fallback
        self._read_ok_at: float | None = None  # the last successful read
        self._tried_at = float("-inf")
        self._failures = 0  # failed refreshes in the current episode
        self._stale_logged = False

    def get(self) -> T:
        """The value in force: refreshed when older than ``ttl_s``, kept when the refresh fails."""
        with self._lock:
            now = self._clock()
            if now - self._tried_at >= self._ttl_s:
                self._tried_at = now
                self._refresh(now)
            return self._value

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

    def _refresh(self, now: float) -> None:
        try:
            value = self._read()
        except Exception as exc:  # noqa: BLE001 - any failure keeps the last value; it is counted and logged
            self._failed(now, failure_name(exc))
            return
        if self._failures:
            log.warning("%s readable again after %d failed reads", self._what, self._failures)
        self._value, self._read_ok_at, self._failures, self._stale_logged = value, now, 0, False

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
