"""Projector: applies projection outbox rows to 2.x, in order per cron, with bounded retries.

A pass takes every pending row of up to ``batch`` crons whose oldest pending row is due and writes them in
ONE short 2.x transaction (2.x's commit is the cost, not our statements), then records them applied in one
bridge-store transaction. Each row is re-derived from its cron's *current* Run facts, so a cron's rows
coalesce: its Crontabs row is written once with the latest state and each Attempt's instance row once
(Attempts in the order their first rows were written, so 2.x's row ids follow start order), and a row finds
its instance row again through the Attempt -> instance mapping, so applying a row twice leaves 2.x as
applying it once. A busy 2.x database is retried with capped, fully jittered exponential backoff; a row that
keeps failing is parked (never dropped); a database that is missing, read-only or not 2.x's halts the
projector. Nothing here ever writes Run facts.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from bridge.domain.errors import BridgeError
from bridge.service.outbox import Applied, OutboxPort, OutboxRow
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.status_writer import LegacyBusyError
from projections.legacy_status import CrontabProjection, InstanceProjection, project_crontab, project_instance

log = logging.getLogger("bridge.projection")


Write = tuple[int, CrontabProjection, InstanceProjection | None, int | None]


class WriterPort(Protocol):
    """2.x's side (legacy_adapters.status_writer.LegacyStatusWriter)."""

    def apply(self, cron_id: int, crontab: CrontabProjection, instance: InstanceProjection | None,
              instance_id: int | None, now_ms: int) -> int | None:
        """One 2.x transaction; raises LegacyBusyError (transient) or LegacyDatabaseError (permanent)."""
        ...

    def apply_batch(self, writes: Sequence[Write], now_ms: int) -> list[int | None]:
        """Several crons' writes in at most ONE 2.x transaction (none when nothing would change), all or
        nothing; the same errors as apply."""
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


Unit = tuple[int, str | None]  # (cron id, attempt id): what one write projects


class Projector:
    def __init__(self, outbox: OutboxPort, writer: WriterPort, metrics: ProjectionMetrics, clock: ClockPort, *,
                 max_attempts: int = 8, base_backoff_ms: int = 100, max_backoff_ms: int = 30_000,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 batch: int = 64, max_writes: int = 256) -> None:
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
        self._max_writes = max(1, max_writes)
        self._waiting: set[int] = set()  # rows this projector put into backoff and has not seen land
        self._next_retry_ms: int | None = None  # the earliest a row it put into backoff is due again
        self.backlog = False  # the last pass left due rows for the next one

    def run_once(self, limit: int = 100) -> dict[str, int]:
        """One pass: up to ``limit`` due rows in at most one 2.x transaction (a batch that fails for one of its
        crons is split, cron by cron); returns counts by result. Raises ProjectionHaltedError."""
        counts = {"applied": 0, "retried": 0, "parked": 0}
        now_ms = self._clock.now_ms()
        if self._next_retry_ms is not None and self._next_retry_ms <= now_ms:
            self._next_retry_ms = None  # due now: this pass reads it
        rows = self._outbox.due_by_cron(now_ms, self._batch, max(1, limit))
        units = _units(rows)
        taken = dict(list(units.items())[:self._max_writes])
        self.backlog = len(taken) < len(units) or len(rows) >= limit or len({c for c, _ in units}) >= self._batch
        if taken:
            for result in self._apply_units(taken):
                counts[result] += 1
        return counts

    def retry_due_in_s(self) -> float | None:
        """Seconds until the earliest row this projector put into backoff is due again (0 when it is due
        now), or None when it is waiting for none: a thread that idles comes back for that row then."""
        if self._next_retry_ms is None:
            return None
        return max(0.0, (self._next_retry_ms - self._clock.now_ms()) / 1000)

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

    def _apply_units(self, units: dict[Unit, list[OutboxRow]]) -> list[str]:
        """One 2.x transaction for these units: each cron's Crontabs row and each Attempt's instance row."""
        results, ready = self._writes(units)
        if not ready:
            return results
        try:
            found = self._writer.apply_batch([write for _, write in ready], self._clock.now_ms())
        except LegacyDatabaseError as exc:
            self._metrics.projection_retry("failed")
            raise ProjectionHaltedError(exc, ready[0][0][0].id) from exc
        except LegacyBusyError as exc:  # 2.x's lock, not the rows: every row waits its own backoff
            return results + [self._retry(row, exc) for rows, _ in ready for row in rows]
        except Exception as exc:  # noqa: BLE001 - retried; in a batch, first find the cron that fails
            crons = list(dict.fromkeys(write[0] for _, write in ready))
            if len(crons) == 1:
                return results + [self._retry(row, exc) for rows, _ in ready for row in rows]
            for cron_id in crons:
                results += self._apply_units({(cron_id, rows[0].attempt_id): rows
                                              for rows, write in ready if write[0] == cron_id})
            return results
        # The mapping is remembered once per Attempt (its first row); every row of the unit is applied.
        done = [Applied(row.id, row.legacy_cron_id, row.attempt_id, got if i == 0 else None)
                for (rows, _), got in zip(ready, found) for i, row in enumerate(rows)]
        # If the process dies here, 2.x is already written: the rows stay pending, are applied again, and
        # find their instance rows through the mapping or, failing that, by adoption (no duplicates).
        self._outbox.complete(done, self._clock.now_ms())
        self._waiting.difference_update(item.row_id for item in done)
        for _ in done:
            self._metrics.projection_retry("applied")
        return results + ["applied"] * len(done)

    def _writes(self, units: dict[Unit, list[OutboxRow]]) -> tuple[list[str], list[tuple[list[OutboxRow], Write]]]:
        """Each unit's write, from its cron's current facts; a unit that cannot be written is parked (its Run
        or Attempt is gone) or retried (facts the projection cannot express) here, with all its rows."""
        # Store reads sit outside the retry accounting: a bridge-store hiccup is not the rows' fault.
        results: list[str] = []
        ready: list[tuple[list[OutboxRow], Write]] = []
        crontabs: dict[int, CrontabProjection] = {}  # one projection per cron: its rows share the facts
        for ((cron_id, attempt_id), rows), inputs in zip(units.items(),
                                                         self._outbox.inputs([r[-1] for r in units.values()])):
            if attempt_id is not None and inputs.facts is None:
                results += [self._park(row, row.attempts, _RUN_GONE) for row in rows]
                continue
            try:
                instance = project_instance(inputs.facts) if inputs.facts is not None else None
                if cron_id not in crontabs:
                    crontabs[cron_id] = project_crontab(*inputs.cron)
            except Exception as exc:  # noqa: BLE001 - facts the projection cannot express: retried, then parked
                results += [self._retry(row, exc) for row in rows]
                continue
            ready.append((rows, (cron_id, crontabs[cron_id], instance, inputs.instance_id)))
        return results, ready

    def _retry(self, row: OutboxRow, exc: Exception) -> str:
        attempts = row.attempts + 1
        code = _error_code(exc)
        if attempts >= self._max_attempts:
            return self._park(row, attempts, code)
        due_ms = self._clock.now_ms() + self.backoff_ms(attempts)
        self._outbox.mark_retry(row.id, attempts, due_ms, code)
        self._waiting.add(row.id)
        self._next_retry_ms = due_ms if self._next_retry_ms is None else min(self._next_retry_ms, due_ms)
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


def _units(rows: Sequence[OutboxRow]) -> dict[Unit, list[OutboxRow]]:
    """Rows by (cron, Attempt), each unit in the order of its first row: all a cron's rows of one Attempt
    project to the same instance row, so only the latest state is written, once."""
    units: dict[Unit, list[OutboxRow]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        units.setdefault((row.legacy_cron_id, row.attempt_id), []).append(row)
    return units
