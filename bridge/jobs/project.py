"""The projector wired up: a daemon thread that drains the projection outbox into 2.x, plus CLI helpers.

Composition level: this module builds SqlOutbox and LegacyStatusWriter and hands them to the pure
Projector. ``notify()`` after a primary commit wakes it; otherwise it polls every interval. A pass that
found rows is followed by the next one no sooner than a tick later, so a stream of callbacks makes one 2.x
transaction per tick for all crons instead of one per callback (2.x's own writers wait behind each of
them), while a lone callback after a quiet spell is projected at once. The tick stretches with what a 2.x
transaction costs on this disk (its syncs, under 2.x's lock), so that the projector holds 2.x's write
lock for at most LOCK_SHARE of the time: on a slow SD card the projection lags more, never 2.x's writers.
While 2.x's database cannot take
the projection (locked, hot journal, missing, damaged, foreign) the thread is halted: it names the state
once, counts every halted pass, leaves the rows pending and tries again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge.domain.errors import BridgeError
from legacy_adapters.database_state import TRANSIENT_STATES, DatabaseState
from legacy_adapters.status_writer import LegacyStatusWriter
from projections.projector import ProjectionHaltedError, ProjectionMetrics, Projector

if TYPE_CHECKING:
    from bridge.service.ports import Clock
    from bridge.storage.outbox import SqlOutbox

log = logging.getLogger("bridge.projection")

HALTED_RETRY_S = 30.0
# A state that clears by itself (2.x releases its lock, its next access rolls a hot journal back, a restore
# lands) is tried again sooner; a read-only or foreign database waits the full HALTED_RETRY_S.
TRANSIENT_RETRY_S = 2.0
_CLEARS_BY_ITSELF = TRANSIENT_STATES - {DatabaseState.READ_ONLY}
LEASE_MS = 10_000
BATCH = 1000  # rows per pass: a whole tick's worth at hundreds of callbacks a second
# At most one pass with rows, so at most one 2.x transaction, per tick while callbacks keep coming: the
# projection lags by up to a tick, and 2.x's writers meet our lock a tick-th as often as at one per callback.
TICK_S = 0.5
# The share of wall time the projector may hold 2.x's write lock. 2.x waits for a busy database in SQLite's
# busy handler, so each of its writes that meets our transaction waits about as long as the transaction
# (rounded up to the handler's next poll); at half a percent, fewer than one 2.x write in two hundred does.
# A transaction costs its syncs (far more on an SD card or a busy disk than on an SSD), so the tick becomes
# hold / LOCK_SHARE, between TICK_S and MAX_TICK_S.
LOCK_SHARE = 0.005
MAX_TICK_S = 5.0
_HOLD_WEIGHT = 0.3  # of the newest transaction in the running estimate of a transaction's hold
# A pass that left due rows behind (a burst) is followed sooner, after a gap that lets 2.x's waiting
# writers in: SQLite's busy handler polls them at 1, 2, 5, ... 50 ms, then every 100 ms.
CATCH_UP_S = 0.1


class ProjectorThread:
    """Runs ``projector.run_once`` when notified or every ``interval_s``, until ``close()``."""

    def __init__(self, projector: Projector, interval_s: float = 0.2, *, tick_s: float = TICK_S,
                 catch_up_s: float = CATCH_UP_S, lock_held: Callable[[], float] | None = None,
                 lock_share: float = LOCK_SHARE, max_tick_s: float = MAX_TICK_S,
                 halted_retry_s: float = HALTED_RETRY_S, lease: Callable[[], bool] | None = None,
                 on_close: Callable[[], None] | None = None, on_unavailable: Callable[[str], None] | None = None,
                 name: str = "bridge-projector") -> None:
        """``lock_held`` returns the seconds the projector has held 2.x's write lock so far (the writer's
        ``held_s``); with it, the tick stretches to keep that share of the time under ``lock_share``."""
        self._projector = projector
        self._interval_s = interval_s
        self._tick_s = tick_s
        self._catch_up_s = catch_up_s
        self._lock_held = lock_held
        self._lock_share = lock_share
        self._max_tick_s = max(tick_s, max_tick_s)
        self._hold_s = 0.0  # running estimate of one 2.x transaction's hold
        self._last_rows_at = float("-inf")  # monotonic time of the last pass that found rows
        self._halted_retry_s = halted_retry_s
        self._lease = lease
        self._on_close = on_close
        self._on_unavailable = on_unavailable  # counts each halted pass by the database's state
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._halted: str | None = None
        self._last_error: str | None = None
        self.passes = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> ProjectorThread:
        self._thread.start()
        return self

    def notify(self) -> None:
        """A primary commit wrote outbox rows: project them now rather than at the next tick."""
        self._wake.set()

    @property
    def halted(self) -> str | None:
        """Why the projector is halted (a LEGACY_DATABASE reason), or None while it runs normally."""
        return self._halted

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._on_close is not None:
            self._on_close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the pass: a notify() during it is not lost
            backlog = self._pass()
            if self._halted is not None:
                self._stop.wait(self._retry_after(self._halted))  # notify() does not hurry a broken database
                continue
            if not backlog:
                self._wake.wait(self._idle_s())
            # Rows committed since the last pass with rows wait for the next tick and go together.
            pause = self._catch_up_s if backlog else self._last_rows_at + self.spacing_s - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)

    def _idle_s(self) -> float:
        """The idle poll, or less when a row this projector retried (2.x was busy) is due sooner: its backoff
        is a fraction of a second at first, and the pause below still spaces the passes by the tick."""
        retry_in = self._projector.retry_due_in_s()
        return self._interval_s if retry_in is None else min(self._interval_s, retry_in)

    @property
    def spacing_s(self) -> float:
        """How long after a pass with rows the next one may come: the tick, or longer where a 2.x
        transaction holds the lock so long that a tick would take more than LOCK_SHARE of the time."""
        return min(self._max_tick_s, max(self._tick_s, self._hold_s / self._lock_share))

    def _pass(self) -> bool:
        held = self._lock_held() if self._lock_held is not None else 0.0
        try:
            if self._lease is not None and not self._lease():
                return False
            counts = self._projector.run_once(BATCH)
            if any(counts.values()):
                self._last_rows_at = time.monotonic()
        except ProjectionHaltedError as exc:
            if self._halted != exc.reason:  # once per state, not every pass
                log.log(logging.WARNING if exc.reason in _CLEARS_BY_ITSELF else logging.ERROR, "%s: %s",
                        exc.code, exc.message)
            self._halted = exc.reason
            if self._on_unavailable is not None:
                self._on_unavailable(exc.reason)
            return False
        except Exception as exc:  # noqa: BLE001 - the thread must survive; the next pass retries
            kind = exc.code if isinstance(exc, BridgeError) else type(exc).__name__
            if kind != self._last_error:
                log.error("projection pass failed: %s (will retry)", kind)  # no message: it may hold paths
            self._last_error = kind
            return False
        finally:
            self.passes += 1
            self._remember_hold(held)
        if self._halted is not None:
            log.warning("projection resumed: the 2.x database accepts writes again (it was %s)", self._halted)
        self._halted = self._last_error = None
        return self._projector.backlog

    def _remember_hold(self, before: float) -> None:
        if self._lock_held is None:
            return
        held = self._lock_held() - before
        if held > 0:
            self._hold_s = held if self._hold_s == 0 else (1 - _HOLD_WEIGHT) * self._hold_s + _HOLD_WEIGHT * held

    def _retry_after(self, state: str) -> float:
        return min(self._halted_retry_s, TRANSIENT_RETRY_S) if state in _CLEARS_BY_ITSELF else self._halted_retry_s


def start_projector_thread(projector: Projector, outbox: SqlOutbox, writer: LegacyStatusWriter, clock: Clock,
                           metrics: ProjectionMetrics, interval_s: float = 2.0,
                           tick_s: float = TICK_S) -> ProjectorThread:
    """The serving ``projector`` (over the bridge store's ``outbox`` and 2.x's ``writer``), started on a thread:
    pass its ``notify`` as the primary path's on-commit hook and its ``close`` to the container's closers. A
    lease row keeps it to one process per store. It is woken on every primary commit, so its idle poll is slow:
    each pass takes the lease with a write, which on SQLite competes with the shadow writes for the one write
    lock."""
    holder = f"projector-{uuid.uuid4().hex[:12]}"

    def close() -> None:
        writer.close()
        outbox.release_lease(holder)

    unavailable = getattr(metrics, "legacy_database_unavailable", None)  # BridgeMetrics counts the states
    thread = ProjectorThread(projector, interval_s, tick_s=tick_s, lock_held=lambda: writer.held_s,
                             lease=lambda: outbox.hold_lease(holder, clock.now_ms(), LEASE_MS), on_close=close,
                             on_unavailable=(lambda state: unavailable(state, "projection")) if unavailable else None)
    return thread.start()


def projection_status(outbox: SqlOutbox, now_ms: int, examples: int = 5) -> dict[str, Any]:
    """Outbox rows by state at ``now_ms``, the age of the oldest pending row, and a few parked rows (ids and codes
    only)."""
    now = now_ms
    oldest = outbox.oldest_pending_created_at_ms()
    return {
        "counts": outbox.counts(),
        "oldest_pending_age_ms": None if oldest is None else max(0, now - oldest),
        "parked": [{"id": row.id, "legacy_cron_id": row.legacy_cron_id, "event": row.event,
                    "attempts": row.attempts, "last_error": row.last_error}
                   for row in outbox.parked(examples)],
    }
