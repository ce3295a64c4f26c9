"""Projector: applies projection outbox rows to 2.x, in order per cron, with bounded retries.

A pass takes the oldest due row of up to ``batch`` crons, writes them in ONE short 2.x transaction (2.x's
commit is the cost, not our statements), then records them applied in one bridge-store transaction. Each
row is re-derived from its cron's *current* Run facts and finds its instance row again through the
Attempt -> instance mapping, so applying a row twice leaves 2.x as applying it once. A busy 2.x database
is retried with capped, fully jittered exponential backoff; a row that keeps failing is parked (never
dropped); a database that is missing, read-only or not 2.x's halts the projector. Nothing here ever
writes Run facts.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.domain.errors import BridgeError
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.status_writer import LegacyBusyError
from projections.legacy_status import (
    CrontabProjection,
    InstanceProjection,
    RunFacts,
    project_crontab,
    project_instance,
)

log = logging.getLogger("bridge.projection")


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One ``projection_outbox`` row."""

    id: int
    legacy_cron_id: int
    run_id: str
    attempt_id: str | None
    event: str  # start | end | cancel
    created_at_ms: int
    state: str  # pending | applied | parked
    attempts: int
    next_attempt_at_ms: int
    last_error: str | None = None
    applied_at_ms: int | None = None


CronFacts = tuple[list[RunFacts], RunFacts | None, RunFacts | None]


@dataclass(frozen=True, slots=True)
class RowInputs:
    """What one row is projected from: its Attempt's facts, its cron's facts, the mapped instance row."""

    facts: RunFacts | None
    cron: CronFacts
    instance_id: int | None


@dataclass(frozen=True, slots=True)
class Applied:
    """A row 2.x has committed: its mapping to remember, then the row to mark applied."""

    row_id: int
    cron_id: int
    attempt_id: str | None
    instance_id: int | None


class OutboxPort(Protocol):
    """The bridge store's side (bridge.storage.outbox.SqlOutbox); each call is its own short transaction."""

    def due(self, now_ms: int, limit: int) -> list[OutboxRow]:
        """Pending rows with next_attempt_at_ms <= now: only the oldest pending row of each cron, by id."""
        ...

    def inputs(self, rows: Sequence[OutboxRow]) -> list[RowInputs]:
        """For each row, from one read transaction: its Attempt's facts (None when the Run or Attempt is
        gone), its cron's (active, latest started, latest terminal) bridge-owned Runs, its mapped instance."""
        ...

    def complete(self, done: Sequence[Applied], at_ms: int) -> None:
        """After 2.x committed: remember each Attempt -> instance mapping and mark each row applied, together."""
        ...

    def mark_retry(self, row_id: int, attempts: int, next_at_ms: int, error_code: str) -> None: ...

    def mark_parked(self, row_id: int, attempts: int, error_code: str, at_ms: int) -> None: ...


Write = tuple[int, CrontabProjection, InstanceProjection | None, int | None]


class WriterPort(Protocol):
    """2.x's side (legacy_adapters.status_writer.LegacyStatusWriter)."""

    def apply(self, cron_id: int, crontab: CrontabProjection, instance: InstanceProjection | None,
              instance_id: int | None, now_ms: int) -> int | None:
        """One 2.x transaction; raises LegacyBusyError (transient) or LegacyDatabaseError (permanent)."""
        ...

    def apply_batch(self, writes: Sequence[Write], now_ms: int) -> list[int | None]:
        """Several crons' writes in ONE 2.x transaction, all or nothing; the same errors as apply."""
        ...


class ProjectionMetrics(Protocol):
    def projection_retry(self, result: str) -> None: ...


class ClockPort(Protocol):
    def now_ms(self) -> int: ...


class ProjectionHaltedError(BridgeError):
    """2.x's database cannot take the projection at all (missing, read-only, not 2.x); nothing was applied."""

    code = "PROJECTION_HALTED"

    def __init__(self, cause: LegacyDatabaseError, row_id: int) -> None:
        super().__init__(
            f"projection halted: {cause.message}; outbox row {row_id} and every later row stay pending "
            f"until the 2.x database is usable again", reason=cause.reason, row_id=row_id)
        self.reason = cause.reason
        self.row_id = row_id


# The Run (or Attempt) an outbox row names does not exist: retrying will not bring it back, so park it.
_RUN_GONE = "RUN_NOT_FOUND"


def _error_code(exc: BaseException) -> str:
    # A stable code or a class name: never a message, which may carry paths or SQL parameters.
    return str(getattr(exc, "code", None) or type(exc).__name__)[:64]


class Projector:
    def __init__(self, outbox: OutboxPort, writer: WriterPort, metrics: ProjectionMetrics, clock: ClockPort, *,
                 max_attempts: int = 8, base_backoff_ms: int = 100, max_backoff_ms: int = 30_000,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 batch: int = 32) -> None:
        self._outbox = outbox
        self._writer = writer
        self._metrics = metrics
        self._clock = clock
        self._max_attempts = max(1, max_attempts)
        self._base_ms = max(1, base_backoff_ms)
        self._max_ms = max(self._base_ms, max_backoff_ms)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._batch = max(1, batch)
        self._waiting: set[int] = set()  # rows this projector put into backoff and has not seen land

    def run_once(self, limit: int = 100) -> dict[str, int]:
        """Apply up to ``limit`` due rows; returns counts by result. Raises ProjectionHaltedError."""
        counts = {"applied": 0, "retried": 0, "parked": 0}
        while (done := sum(counts.values())) < limit:
            rows = self._outbox.due(self._clock.now_ms(), min(self._batch, limit - done))
            if not rows:
                break
            for result in self._apply_rows(rows):
                counts[result] += 1
        return counts

    def drain(self, timeout_s: float = 10.0, poll_s: float = 0.05) -> dict[str, int]:
        """Pass after pass until nothing is due and no row this projector retried is still waiting out its
        backoff, or ``timeout_s`` has passed; sleeps ``poll_s`` between idle passes. For the CLI and tests."""
        total = {"applied": 0, "retried": 0, "parked": 0}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            counts = self.run_once()
            for key, value in counts.items():
                total[key] += value
            if not any(counts.values()):
                if not self._waiting:
                    break
                self._sleep(poll_s)
        return total

    def _apply_rows(self, rows: list[OutboxRow]) -> list[str]:
        """One batch: the oldest due row of up to ``batch`` crons, in one 2.x transaction."""
        # Store reads sit outside the retry accounting: a bridge-store hiccup is not the rows' fault.
        results: list[str] = []
        ready: list[tuple[OutboxRow, Write]] = []
        for row, inputs in zip(rows, self._outbox.inputs(rows)):
            if row.attempt_id is not None and inputs.facts is None:
                results.append(self._park(row, row.attempts, _RUN_GONE))
                continue
            try:
                instance = project_instance(inputs.facts) if inputs.facts is not None else None
                ready.append((row, (row.legacy_cron_id, project_crontab(*inputs.cron), instance, inputs.instance_id)))
            except Exception as exc:  # noqa: BLE001 - facts the projection cannot express: retried, then parked
                results.append(self._retry(row, exc))
        if not ready:
            return results
        try:
            found = self._writer.apply_batch([write for _, write in ready], self._clock.now_ms())
        except LegacyDatabaseError as exc:
            self._metrics.projection_retry("failed")
            raise ProjectionHaltedError(exc, ready[0][0].id) from exc
        except LegacyBusyError as exc:  # 2.x's lock, not the rows: every row waits its own backoff
            return results + [self._retry(row, exc) for row, _ in ready]
        except Exception as exc:  # noqa: BLE001 - retried; in a batch, first find the row that fails
            if len(ready) == 1:
                return results + [self._retry(ready[0][0], exc)]
            return results + [result for row, _ in ready for result in self._apply_rows([row])]
        done = [Applied(row.id, row.legacy_cron_id, row.attempt_id, got) for (row, _), got in zip(ready, found)]
        # If the process dies here, 2.x is already written: the rows stay pending, are applied again, and
        # find their instance rows through the mapping or, failing that, by adoption (no duplicates).
        self._outbox.complete(done, self._clock.now_ms())
        self._waiting.difference_update(item.row_id for item in done)
        for _ in done:
            self._metrics.projection_retry("applied")
        return results + ["applied"] * len(done)

    def _retry(self, row: OutboxRow, exc: Exception) -> str:
        attempts = row.attempts + 1
        code = _error_code(exc)
        if attempts >= self._max_attempts:
            return self._park(row, attempts, code)
        self._outbox.mark_retry(row.id, attempts, self._clock.now_ms() + self.backoff_ms(attempts), code)
        self._waiting.add(row.id)
        self._metrics.projection_retry("retried")
        return "retried"

    def _park(self, row: OutboxRow, attempts: int, code: str) -> str:
        self._outbox.mark_parked(row.id, attempts, code, self._clock.now_ms())
        self._waiting.discard(row.id)
        self._metrics.projection_retry("parked")
        # One line, ids and codes only: never a command, a log path or a token.
        log.warning("projection outbox row %s (cron %s, %s) parked after %d attempts: %s",
                    row.id, row.legacy_cron_id, row.event, attempts, code)
        return "parked"

    def backoff_ms(self, attempts: int) -> int:
        """Full jitter over a capped exponential: uniform(0, min(max, base * 2^(attempts-1))), at least 1 ms."""
        ceiling = min(self._max_ms, self._base_ms * (2 ** min(attempts - 1, 30)))
        return max(1, int(self._rng.uniform(0, ceiling)))
