"""The storage and infrastructure contracts the service layer depends on (implemented in bridge.storage).

The contract suite in tests/contract runs every implementation (SQLite, PostgreSQL, in-memory) through
the same tests; the docstrings below are that contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from bridge.domain.aggregate import ChangeSet
from bridge.domain.events import RunEvent
from bridge.domain.model import Mode, Run, RunAttempt
from bridge.domain.step_run import StepRun
from bridge.domain.step_run_mutation import MutationRecord, MutationResult, StepRunMutation

T = TypeVar("T")


class DedupeKeyTakenError(Exception):
    """A change carried a dedupe key already committed for that run (the transaction is rolled back)."""

    def __init__(self, run_id: str, dedupe_key: str) -> None:
        super().__init__(f"dedupe key already used on run {run_id}")
        self.run_id = run_id
        self.dedupe_key = dedupe_key


class IdempotencyKeyTakenError(Exception):
    """A new Run's (project_id, idempotency_key) is already taken (the transaction is rolled back)."""

    def __init__(self, project_id: str, idempotency_key: str) -> None:
        super().__init__(f"idempotency key already used in project {project_id}")
        self.project_id = project_id
        self.idempotency_key = idempotency_key


@dataclass(frozen=True, slots=True)
class ActiveCandidate:
    """An active Run of a legacy cron with its latest Attempt, for callback correlation."""

    run: Run
    attempt: RunAttempt | None


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    task_revision: str
    task_id: str
    legacy_cron_id: int | None
    name: str | None
    command: str | None
    schedule: str | None
    work_dir: str | None
    log_name: str | None
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class MismatchRecord:
    """A disagreement or an unplaceable callback; ``diff`` holds only allowlisted, low-sensitivity data."""

    kind: str
    dedupe_key: str
    seen_at_ms: int
    diff: dict[str, object]
    origin: str | None = None
    legacy_cron_id: int | None = None
    run_id: str | None = None


class RunRepository(Protocol):
    """Runs, their Attempts and their append-only events, read and written inside one open transaction.

    The reads raise nothing of their own; ``apply`` names its refusals below. A failure of the store itself
    reaches the caller through the unit of work (StoreBusyError / StoreUnavailableError / StorageError), and
    the whole transaction is rolled back.
    """

    def get_run(self, run_id: str) -> Run | None: ...

    def get_run_by_idempotency_key(self, project_id: str, idempotency_key: str) -> Run | None: ...

    def get_attempt(self, attempt_id: str) -> RunAttempt | None: ...

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        """All attempts of a run, by attempt number."""
        ...

    def has_dedupe_key(self, run_id: str, dedupe_key: str) -> bool: ...

    def apply(self, change: ChangeSet) -> None:
        """Write a ChangeSet: insert or CAS the Run, insert or CAS each Attempt, append the events.

        Raises RunVersionConflictError if the Run's version moved, AttemptConflictError if an
        Attempt's status or callback_sequence moved, DedupeKeyTakenError if an event's dedupe key is
        already committed, IdempotencyKeyTakenError if a new Run's idempotency key is taken. The caller's
        transaction must then be rolled back (the unit of work does this when the error propagates).
        """
        ...

    def list_events(self, run_id: str, after_sequence: int, limit: int) -> list[RunEvent]:
        """Events with sequence > after_sequence, ascending, at most ``limit``."""
        ...

    def active_candidates(self, legacy_cron_id: int, limit: int) -> list[ActiveCandidate]:
        """Non-terminal Runs of the cron with their latest Attempt, newest first, at most ``limit``."""
        ...

    def has_active_runs_owned_by(self, owner: str) -> bool:
        """Whether any non-terminal Run has this owner."""
        ...


class MismatchLog(Protocol):
    """Disagreements and unplaceable callbacks, one row per dedupe key, written in the caller's transaction."""

    def record_mismatch(self, record: MismatchRecord) -> bool:
        """Open a mismatch row, or bump last_seen/occurrences of the one with that dedupe key.

        Returns True when a new row was opened. Raises nothing of its own: a twin that opened the same key
        a moment earlier fails this insert on the unique dedupe key, which the unit of work reports as
        StorageError (the transaction is rolled back).
        """
        ...


class ProjectionQueue(Protocol):
    """Primary mode: the projection outbox rows a change of a bridge-owned Run adds (drained by the projector,
    bridge.service.outbox.OutboxPort)."""

    def enqueue_projection(self, legacy_cron_id: int, run_id: str, attempt_id: str | None, event: str,
                           at_ms: int) -> None:
        """Add a pending projection outbox row, in the caller's transaction. Raises nothing of its own."""
        ...


class TaskSnapshotStore(Protocol):
    """What a 2.x task was at a revision, stored once per revision and never changed."""

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        """Insert the snapshot unless that revision is already stored. Raises nothing of its own (a stored
        revision, also one a twin stored meanwhile, is left as it is)."""
        ...


class RunStore(RunRepository, MismatchLog, ProjectionQueue, TaskSnapshotStore, Protocol):
    """What one open transaction hands out (UnitOfWork.write / read): the four ports above on one connection,
    so that everything they write commits or rolls back together. Each port states its own errors."""


class UnitOfWork(Protocol):
    """Runs a function inside one transaction and commits it, or rolls it all back."""

    def write(self, work: Callable[[RunStore], T]) -> T:
        """One write transaction (SQLite: BEGIN IMMEDIATE with a bounded, jittered busy retry).

        ``work`` may run more than once when the store was busy before anything was decided, so it
        must do nothing outside the database. Raises StoreBusyError / StoreUnavailableError.
        """
        ...

    def read(self, work: Callable[[RunStore], T]) -> T:
        """One read-only transaction."""
        ...


class ModeSource(Protocol):
    """The mode of each execution origin (off / shadow / primary); unknown or unreadable means off."""

    def mode_for(self, origin: str) -> Mode: ...

    def any_enabled(self) -> bool:
        """True when some origin is not off (otherwise the bridge is a pure pass-through)."""
        ...


class StaticModes:
    """Modes fixed at start, from BRIDGE_SHADOW_ORIGINS."""

    def __init__(self, shadow_origins: frozenset[str]) -> None:
        self._shadow = shadow_origins

    def mode_for(self, origin: str) -> Mode:
        return Mode.SHADOW if origin in self._shadow else Mode.OFF

    def any_enabled(self) -> bool:
        return bool(self._shadow)


class Clock(Protocol):
    def now_ms(self) -> int: ...


class ServiceMetrics(Protocol):
    """What the service layer counts; implemented over prometheus_client in the web layer."""

    def transition(self, from_status: str, to_status: str, result: str) -> None: ...

    def conflict(self, command: str) -> None: ...

    def events_appended(self, events: Sequence[RunEvent]) -> None: ...


class NullMetrics:
    def transition(self, from_status: str, to_status: str, result: str) -> None:
        return None

    def conflict(self, command: str) -> None:
        return None

    def events_appended(self, events: Sequence[RunEvent]) -> None:
        return None


# --- StepRuns (docs/stepruns.md) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepRunPage:
    """A keyset page of a Run's StepRuns, oldest first by (created_at_ms, id)."""

    step_runs: tuple[StepRun, ...]
    next_after: tuple[int, str] | None  # (created_at_ms, id) to pass back as ``after``; None on the last page


class StepRunReader(Protocol):
    """Read-only StepRun views: what the v3 API and reports may hold (no write access)."""

    def get(self, step_run_id: str) -> StepRun | None:
        """The StepRun as stored now. Raises StepRunIntegrityError if its record fails its digest."""
        ...

    def page(self, run_id: str, after: tuple[int, str] | None, limit: int) -> StepRunPage:
        """At most ``limit`` StepRuns of the Run strictly after ``after``. Raises RunNotFoundError."""
        ...


class StepRunRepository(StepRunReader, Protocol):
    """The StepRun storage capability (docs/run-state.md#storage-capability-only): mutate with replay, get, get a
    mutation, keyset pages. Nothing else: no execute API, no delete, no update outside a mutation."""

    def mutate(self, command: StepRunMutation, *, at_ms: int, new_id: Callable[[], str]) -> MutationResult:
        """One short transaction, in MUTATION_STEPS order: serialise on the Run; return the committed result of an
        exact replay of ``command.mutation_id`` (``applied`` False, nothing written); check the fence and refuse a
        terminal Run; create or compare-and-set the StepRun; advance the Run's version and Event sequence by one;
        append the step_run.* RunEvent; append the ledger row; commit, and only then return ``applied``.

        Raises StepRunValidationError before any transaction; RunNotFoundError; StepMutationConflictError (the
        mutation id names another request); RunFenceConflictError (a RUN_VERSION_CONFLICT); RunTerminalError;
        StepRunLimitError; StepRunNotFoundError; StepRunVersionConflictError; InvalidStepRunTransitionError;
        StepAttemptLimitError; StoreBusyError / StoreUnavailableError / StorageError. Every refusal writes nothing.
        """
        ...

    def get_mutation(self, mutation_id: str) -> MutationRecord | None:
        """The ledger row of a committed mutation, or None."""
        ...
