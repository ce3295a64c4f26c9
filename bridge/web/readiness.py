"""ReadinessWatch: the readiness checks that wait on the store or on 2.x, run off the request, so that `/readyz`
answers at once whatever they do.

Two loops, each on a thread of its own, run their checks every ``interval_s`` and keep what they found: the
store's (one round trip, then the write check, the reconciler's last pass and the seam: bridge.web.health) and
2.x's (the request its release's backend serves: `/api/health`, or `/api/system` before v2.19). A loop still
waiting past its deadline says so itself: the store is then STORE_UNREACHABLE, 2.x UPSTREAM_UNREACHABLE, while
the wait goes on in the background. So a store that goes silent is reported within ``interval_s`` +
``store_deadline_s`` (3 s by default), and one that answers again within ``interval_s`` of its first answer.
The loops run only while somebody asks (for ``WANTED_S`` after each `/readyz`), so a bridge nobody probes sends
neither the store nor 2.x anything; the first request after a quiet spell waits for a fresh result, at most a
deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.bootstrap import Container

log = logging.getLogger("bridge.readiness")
WANTED_S = 30.0  # how long after a /readyz the loops go on checking (probes poll every few seconds)
Checks = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class _Found:
    checks: Checks
    at: float  # monotonic, when the loop finished computing them


class _Loop:
    """One group of checks, computed again every ``interval_s`` on a daemon thread."""

    def __init__(self, name: str, compute: Callable[[], Checks], interval_s: float, deadline_s: float,
                 unknown: Callable[[str, float], Checks], clock: Callable[[], float]) -> None:
        """``unknown(reason, waited_s)``: the checks to report while nothing can be said (pending, overdue)."""
        self._name, self._compute, self._interval_s, self._deadline_s = name, compute, interval_s, deadline_s
        self._unknown, self._clock = unknown, clock
        self._lock = threading.Lock()
        self._found: _Found | None = None
        self._started_at: float | None = None  # the computation under way, if any
        self._stop = threading.Event()
        self._wanted = threading.Event()  # somebody asked lately
        self._wanted_until = 0.0
        self._fresh = threading.Event()  # set when a computation ends, cleared when a quiet spell ends
        self._last_failure: str | None = None  # logged once until the checks run cleanly again
        self._thread = threading.Thread(target=self._run, name=f"readiness-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def checks(self) -> Checks:
        """What the loop found last, unless a computation has waited past the deadline, or none has ended since
        the loop woke (that one is waited for, within the deadline)."""
        with self._lock:
            self._wanted_until = self._clock() + WANTED_S
        self._wanted.set()
        self._fresh.wait(self._deadline_s)
        with self._lock:
            found, started = self._found, self._started_at
        waited = 0.0 if started is None else self._clock() - started
        if waited > self._deadline_s:
            return self._unknown("overdue", waited)
        return self._unknown("pending", waited) if found is None else found.checks

    def close(self) -> None:
        self._stop.set()
        self._wanted.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._still_wanted():
                self._wanted.wait()  # a quiet spell: nobody asks, nothing is checked
                continue
            with self._lock:
                self._started_at = self._clock()
            try:
                checks = self._compute()
            except Exception as exc:  # noqa: BLE001 - the checks report failures; one that raised is a bug, logged
                if type(exc).__name__ != self._last_failure:
                    log.error("readiness %s checks failed: %s", self._name, type(exc).__name__)
                self._last_failure = type(exc).__name__
                checks = self._unknown("failed", 0.0)
            else:
                self._last_failure = None
            with self._lock:
                self._found, self._started_at = _Found(checks, self._clock()), None
            self._fresh.set()
            self._stop.wait(self._interval_s)

    def _still_wanted(self) -> bool:
        with self._lock:
            if self._clock() < self._wanted_until:
                return True
            # Quiet from here: what was found is old by the time somebody asks again, who waits for a fresh one.
            self._wanted.clear()
            self._fresh.clear()
            self._found = None
            return False


class ReadinessWatch:
    def __init__(self, container: Container, *, interval_s: float = 1.0, store_deadline_s: float = 2.0,
                 upstream_deadline_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        from bridge.web.health import check_reconciler, check_seam, check_store_now, check_upstream

        def store_checks() -> Checks:
            return {"store": check_store_now(container.store),
                    "reconciler": check_reconciler(container.store, container.settings),
                    "seam": check_seam(container.store, container.settings)}

        def upstream_checks() -> Checks:
            return {"upstream": check_upstream(container.http, container.settings.legacy_url, container.release)}

        self._loops = [
            _Loop("store", store_checks, interval_s, store_deadline_s, _store_unknown, clock),
            _Loop("upstream", upstream_checks, interval_s, upstream_deadline_s, _upstream_unknown, clock),
        ]

    def start(self) -> ReadinessWatch:
        for loop in self._loops:
            loop.start()
        return self

    def checks(self) -> Checks:
        """The store, reconciler, seam and upstream checks as last found (or overdue), without waiting."""
        found: Checks = {}
        for loop in self._loops:
            found.update(loop.checks())
        return found

    def close(self) -> None:
        for loop in self._loops:
            loop.close()


_WHY = {"overdue": "STORE_UNREACHABLE", "pending": "STORE_CHECK_PENDING", "failed": "STORE_CHECK_FAILED"}


def _store_unknown(why: str, waited_s: float) -> Checks:
    """The store's checks while the loop can say nothing: not ready (an error), with why."""
    code = _WHY[why]
    return {"store": {"status": "error", "reason": code, "waited_s": round(waited_s, 1)},
            "reconciler": {"status": "warn", "reason": "RECONCILER_UNREADABLE", "error": code},
            "seam": {"status": "warn", "reason": "SEAM_UNKNOWN", "error": code}}


def _upstream_unknown(why: str, waited_s: float) -> Checks:
    reason = "UPSTREAM_UNREACHABLE" if why == "overdue" else f"UPSTREAM_CHECK_{why.upper()}"
    return {"upstream": {"status": "error", "reason": reason, "waited_s": round(waited_s, 1)}}
