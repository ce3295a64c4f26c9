"""The projection outbox's port and the facts that cross it: what storage hands the projector (pure rules in
``projections``) about bridge-owned Runs, and what the projector hands back once 2.x has committed.

Lives in the service layer so that storage implements it and projections consume it without importing
each other. Status values are the domain's enums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.domain.model import ATTEMPT_ACTIVE, RUN_TERMINAL


@dataclass(frozen=True, slots=True)
class RunFacts:
    """One bridge-owned Run with one of its Attempts (the latest, or the one an outbox row names)."""

    run_id: str
    cron_id: int
    status: str  # RunStatus value
    created_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    duration_ms: int | None = None
    attempt_id: str | None = None
    attempt_status: str | None = None  # AttemptStatus value
    pid: int | None = None
    legacy_log_path: str | None = None  # 2.x's raw log_path, primary attempts only
    exit_code: int | None = None
    attempt_started_at_ms: int | None = None
    attempt_finished_at_ms: int | None = None

    @property
    def attempt_active(self) -> bool:
        return self.attempt_status in ATTEMPT_ACTIVE

    @property
    def is_terminal(self) -> bool:
        return self.status in RUN_TERMINAL



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

    def due_by_cron(self, now_ms: int, crons: int, limit: int) -> list[OutboxRow]:
        """Every pending row (by id, at most ``limit``) of the first ``crons`` crons whose oldest pending row
        has next_attempt_at_ms <= now."""
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
