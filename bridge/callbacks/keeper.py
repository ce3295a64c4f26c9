"""FactKeeper: what 2.x accepted is not lost to a store that does not take it.

A command the store did not take (unavailable, busy past its budget, silent past its deadline) is kept in the
local fact journal (bridge.service.journal) and executed again, in order, once the store takes it
(``replay_once``, driven by ``JournalReplayer``). While the journal holds anything, new commands join it instead of
going to the store (``hold``), so a cron's facts are replayed in the order 2.x accepted them, through the same rules
as at once. Replaying is idempotent: a command carries its callback's own times and keys, so one that reached the
store after all is a duplicate, and a late start or a replayed end is what it would have been. A journal that is
full, or a disk that fails, drops the command: counted and logged, never silent.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from bridge.callbacks.commands import FactCommand, from_json, to_json
from bridge.domain.errors import StoreBusyError, StoreUnavailableError
from bridge.metrics import BridgeMetrics
from bridge.service.journal import FactJournal
from bridge.service.ports import Clock

log = logging.getLogger("bridge.journal")
# What "the store did not take it" is: the store's own refusals to answer, not a domain's answer.
STORE_DID_NOT_TAKE = (StoreUnavailableError, StoreBusyError)
REPLAY_BATCH = 100


class StoreStillOut(Exception):
    """A replayed command met the store still not taking writes: replay stops, the entry stays first."""


class FactKeeper:
    def __init__(self, journal: FactJournal, metrics: BridgeMetrics, clock: Clock) -> None:
        self._journal = journal
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()  # orders holds and keeps against the replayer's "drained"
        self._holding = journal.size() > 0  # facts kept by an earlier process are replayed first
        self._full_logged = False

    @property
    def holding(self) -> bool:
        """Whether the journal holds facts (new ones join it until it is drained)."""
        return self._holding

    def hold(self, command: FactCommand) -> bool:
        """Keep ``command`` behind the facts the journal holds (True); False: nothing is held, run it now."""
        if not self._holding:
            # Read without the lock: a cron's facts all pass through its one lane, so one kept before this one
            # set the flag on this very thread; a fact of another cron kept meanwhile needs no order with it.
            return False
        with self._lock:
            if not self._holding:
                return False
            self._append(command, "queued")
            return True

    def keep(self, command: FactCommand, reason: str) -> None:
        """Keep a command the store did not take (``reason``: why), behind everything kept before it."""
        with self._lock:
            if not self._holding:
                log.warning("the store did not take a write (%s): facts are kept in the local journal until it "
                            "does", reason)
            self._append(command, reason)

    def size(self) -> int:
        return self._journal.size()

    def oldest_age_s(self) -> float:
        """Seconds since the oldest fact kept was kept; 0 when the journal is empty."""
        oldest = self._journal.oldest_kept_at_ms()
        return 0.0 if oldest is None else max(0.0, (self._clock.now_ms() - oldest) / 1000)

    def replay_once(self, execute: Callable[[FactCommand], object], batch: int = REPLAY_BATCH) -> int:
        """Execute the oldest kept facts in order and forget each one done; returns how many. Raises
        StoreStillOut when the store still does not take them (what is left stays, in order)."""
        done: list[int] = []
        try:
            for entry in self._journal.oldest(batch):
                try:
                    command = from_json(json.loads(entry.document))
                except (ValueError, KeyError, TypeError):
                    self._metrics.journal_replayed("undecodable")
                    log.error("a kept fact could not be read back: dropped (entry %d)", entry.id)
                    done.append(entry.id)
                    continue
                try:
                    execute(command)
                except STORE_DID_NOT_TAKE as exc:
                    raise StoreStillOut(exc.code) from exc
                except Exception as exc:  # noqa: BLE001 - refused by the rules or a bug: it can never succeed
                    self._metrics.journal_replayed("failed")
                    log.error("a kept fact was refused on replay: %s", getattr(exc, "code", type(exc).__name__))
                else:
                    self._metrics.journal_replayed("ok")
                    self._metrics.journal_replay_lag_seconds.observe((self._clock.now_ms() - entry.kept_at_ms) / 1000)
                done.append(entry.id)
        finally:
            self._journal.remove(done)
            with self._lock:
                if self._holding and self._journal.size() == 0:
                    self._holding = False
                    log.warning("the local journal is drained: facts go to the store again")
        return len(done)

    def _append(self, command: FactCommand, reason: str) -> None:
        try:
            kept = self._journal.append(json.dumps(to_json(command), separators=(",", ":")), self._clock.now_ms())
        except Exception as exc:  # noqa: BLE001 - a local disk that fails: the fact is lost, counted and logged
            self._metrics.journal_dropped("error")
            log.error("a fact could not be kept in the local journal: %s", type(exc).__name__)
            return
        if not kept:
            self._metrics.journal_dropped("full")
            if not self._full_logged:
                log.error("the local journal is full: facts the store does not take are dropped until it drains")
            self._full_logged = True
            return
        self._full_logged = False
        self._holding = True
        self._metrics.journal_kept(reason)


class JournalReplayer:
    """Drains the journal on a thread of its own whenever it holds facts, in order, backing off while the store
    still does not take them."""

    def __init__(self, keeper: FactKeeper, execute: Callable[[FactCommand], object], *, interval_s: float = 1.0,
                 max_backoff_s: float = 5.0) -> None:
        self._keeper, self._execute = keeper, execute
        self._interval_s, self._max_backoff_s = interval_s, max_backoff_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="journal-replay", daemon=True)

    def start(self) -> JournalReplayer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        wait_s = self._interval_s
        while not self._stop.wait(wait_s):
            if not self._keeper.holding:
                wait_s = self._interval_s
                continue
            try:
                while self._keeper.holding and not self._stop.is_set():
                    self._keeper.replay_once(self._execute)
                wait_s = self._interval_s
            except StoreStillOut:
                wait_s = min(self._max_backoff_s, wait_s * 2)
            except Exception as exc:  # noqa: BLE001 - the thread must survive (the journal's disk failing)
                log.error("journal replay failed: %s (will retry)", type(exc).__name__)
                wait_s = self._max_backoff_s
