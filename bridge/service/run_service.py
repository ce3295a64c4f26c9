"""RunService: the only way run state changes. One command, one transaction (ADR-0001 9.1)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from bridge.domain.aggregate import ChangeSet, RunChange
from bridge.domain.commands import CreateAttempt, CreateRun, RequestCancel, RetryRun, TransitionAttempt, TransitionRun
from bridge.domain.errors import (
    AttemptConflictError,
    BridgeError,
    IdempotencyKeyConflictError,
    InvalidAttemptTransitionError,
    InvalidRunTransitionError,
    RetryNotAllowedError,
    RunNotFoundError,
    RunVersionConflictError,
)
from bridge.domain.events import DEFAULT_PAYLOAD_CAP_BYTES, Actor, EventType, RunEvent
from bridge.domain.model import IMPORTED_MODE, AttemptStatus, Run, RunAttempt, RunStatus
from bridge.service.ids import new_id
from bridge.service.ports import (
    Clock,
    DedupeKeyTakenError,
    IdempotencyKeyTakenError,
    NullMetrics,
    RunStore,
    ServiceMetrics,
    UnitOfWork,
)

R = TypeVar("R")
_REFUSALS = (RunVersionConflictError, AttemptConflictError, InvalidRunTransitionError, InvalidAttemptTransitionError)
# Statuses a user may retry by creating a new Run (ADR-0001 6.3).
_RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT})


class CancelOutcome(StrEnum):
    REQUESTED = "requested"
    ALREADY_REQUESTED = "already_requested"
    ALREADY_TERMINAL = "already_terminal"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command left behind. ``applied`` is False when its dedupe key had already been used."""

    run: Run
    attempt: RunAttempt | None = None
    events: tuple[RunEvent, ...] = ()
    applied: bool = True


@dataclass(frozen=True, slots=True)
class CreateRunResult:
    run: Run
    created: bool  # False: the idempotency key named an existing Run ("existing", HTTP 200)


@dataclass(frozen=True, slots=True)
class CancelResult:
    run: Run
    outcome: CancelOutcome


@dataclass(frozen=True, slots=True)
class EventPage:
    events: tuple[RunEvent, ...]
    next_after_sequence: int | None  # pass back as after_sequence; None on the last page


Mutation = Callable[[RunStore, RunChange], R]


class RunTransaction:
    """One open transaction for handlers that decide across several Runs (the shadow path).

    ``begin``/``create`` give RunChanges bound to this transaction; ``commit`` applies one. Metrics
    are reported by RunService only after the whole transaction has committed.
    """

    def __init__(self, store: RunStore, *, at_ms: int, new_id: Callable[[], str], cap: int) -> None:
        self.store = store
        self.at_ms = at_ms
        self.new_id = new_id
        self._cap = cap
        self.committed: list[ChangeSet] = []

    def begin(self, run: Run, *, actor: Actor, dedupe_key: str | None = None) -> RunChange:
        return RunChange(run, actor=actor, at_ms=self.at_ms, new_id=self.new_id, dedupe_key=dedupe_key,
                         payload_cap_bytes=self._cap)

    def create(self, run: Run, *, actor: Actor, payload: dict[str, Any] | None = None) -> RunChange:
        return RunChange.create(run, actor=actor, at_ms=self.at_ms, new_id=self.new_id,
                                payload_cap_bytes=self._cap, payload=payload)

    def commit(self, change: RunChange) -> ChangeSet:
        """Apply the change (same errors as RunStore.apply); an empty change writes nothing."""
        changes = change.result()
        if changes.events:
            self.store.apply(changes)
            self.committed.append(changes)
        return changes


class RunService:
    def __init__(
        self,
        uow: UnitOfWork,
        *,
        clock: Clock,
        id_factory: Callable[[], str] = new_id,
        metrics: ServiceMetrics | None = None,
        payload_cap_bytes: int = DEFAULT_PAYLOAD_CAP_BYTES,
    ) -> None:
        self._uow = uow
        self._clock = clock
        self._new_id = id_factory
        self._metrics = metrics or NullMetrics()
        self._cap = payload_cap_bytes

    # -- the one write path -------------------------------------------------------------------

    def change(
        self,
        run_id: str,
        mutate: Mutation[R],
        *,
        actor: Actor,
        command: str,
        expected_version: int | None = None,
        dedupe_key: str | None = None,
    ) -> tuple[CommandResult, R | None]:
        """Read the Run, let ``mutate`` decide, CAS-write the result, all in one transaction.

        A repeated ``dedupe_key`` returns the current state and appends nothing. Raises
        RunNotFoundError, RunVersionConflictError, and whatever ``mutate`` raises (nothing is written).
        """
        at_ms = self._clock.now_ms()

        def work(store: RunStore) -> tuple[CommandResult, R | None]:
            run = _load(store, run_id)
            if expected_version is not None and run.version != expected_version:
                raise RunVersionConflictError(run_id, expected_version, run.version)
            change = RunChange(run, actor=actor, at_ms=at_ms, new_id=self._new_id,
                               dedupe_key=dedupe_key, payload_cap_bytes=self._cap)
            value = mutate(store, change)
            changes = change.result()
            if not changes.events:
                return CommandResult(run=run, applied=False), value
            store.apply(changes)
            touched = changes.attempt_writes[-1].attempt if changes.attempt_writes else None
            return CommandResult(changes.run, touched, changes.events), value

        try:
            result, value = self._uow.write(work)
        except DedupeKeyTakenError:
            # A twin with the same key committed first: report the current state, append nothing.
            return CommandResult(run=self.get_run(run_id), applied=False), None
        except _REFUSALS as exc:
            # A repeat of a committed command usually fails on its stale version or on the state it
            # already caused; the dedupe key is looked up only then, keeping the happy path one read short.
            if dedupe_key is not None and self._uow.read(lambda s: s.has_dedupe_key(run_id, dedupe_key)):
                return CommandResult(run=self.get_run(run_id), applied=False), None
            if isinstance(exc, (RunVersionConflictError, AttemptConflictError)):
                self._metrics.conflict(command)
            elif isinstance(exc, InvalidRunTransitionError):
                self._metrics.transition(exc.details["from"], exc.details["to"], "invalid")
            raise
        self._metrics.events_appended(result.events)
        return result, value

    def transaction(self, work: Callable[[RunTransaction], R]) -> R:
        """Run ``work`` in one write transaction; everything it commits lands together or not at all."""
        at_ms = self._clock.now_ms()
        holder: list[RunTransaction] = []

        def run(store: RunStore) -> R:
            tx = RunTransaction(store, at_ms=at_ms, new_id=self._new_id, cap=self._cap)
            holder[:] = [tx]
            return work(tx)

        result = self._uow.write(run)
        for changes in holder[0].committed:
            self._metrics.events_appended(changes.events)
        return result

    def read(self, work: Callable[[RunTransaction], R]) -> R:
        """Run ``work`` in one read-only transaction (it must not commit changes)."""
        at_ms = self._clock.now_ms()
        return self._uow.read(lambda store: work(RunTransaction(store, at_ms=at_ms, new_id=self._new_id,
                                                                cap=self._cap)))

    # -- commands ------------------------------------------------------------------------------

    def create_run(self, cmd: CreateRun, build: Callable[[RunStore, RunChange], None] | None = None) -> CreateRunResult:
        """Create a Run (status created). An idempotency key already used returns that Run.

        ``build`` may add further steps to the same transaction (the shadow path opens queued,
        dispatching, running and Attempt 1 at once). Raises IdempotencyKeyConflictError when the key
        names a Run created by a different request.
        """
        fingerprint = _fingerprint(cmd)
        at_ms = self._clock.now_ms()

        def work(store: RunStore) -> CreateRunResult:
            if cmd.idempotency_key is not None:
                existing = store.get_run_by_idempotency_key(cmd.project_id, cmd.idempotency_key)
                if existing is not None:
                    return _existing(existing, fingerprint, cmd.project_id)
            run = Run(
                id=self._new_id(), project_id=cmd.project_id, task_id=cmd.task_id,
                task_revision=cmd.task_revision, trigger_type=cmd.trigger_type, status=RunStatus.CREATED,
                version=0, event_sequence=0, created_at_ms=at_ms, priority=cmd.priority,
                legacy_cron_id=cmd.legacy_cron_id, trigger_id=cmd.trigger_id, parent_run_id=cmd.parent_run_id,
                idempotency_key=cmd.idempotency_key, request_fingerprint=fingerprint,
                origin=cmd.origin, mode=cmd.mode, owner=cmd.owner,
            )
            change = RunChange.create(run, actor=cmd.actor, at_ms=at_ms, new_id=self._new_id,
                                      payload_cap_bytes=self._cap,
                                      payload={"origin": cmd.origin} if cmd.origin else None)
            if build is not None:
                build(store, change)
            changes = change.result()
            store.apply(changes)
            appended[:] = changes.events  # counted once committed: a busy store runs ``work`` again
            return CreateRunResult(changes.run, created=True)

        appended: list[RunEvent] = []
        try:
            created = self._uow.write(work)
        except IdempotencyKeyTakenError:
            # Lost the race to a twin with the same key: the winner's Run is the answer.
            existing = self._uow.read(lambda s: s.get_run_by_idempotency_key(cmd.project_id, cmd.idempotency_key or ""))
            if existing is None:  # pragma: no cover - the key was committed a moment ago
                raise
            return _existing(existing, fingerprint, cmd.project_id)
        self._metrics.events_appended(appended)
        return created

    def transition_run(self, cmd: TransitionRun) -> CommandResult:
        """Move a Run. Raises InvalidRunTransitionError, RunVersionConflictError, RunNotFoundError."""
        def mutate(store: RunStore, change: RunChange) -> None:
            # Counted from the committed run.<status> event (events_appended), like every other path's moves.
            fields = {k: v for k, v in (("error_code", cmd.error_code), ("error_summary", cmd.error_summary)) if v}
            change.move_run(cmd.to, payload=cmd.payload, **fields)

        result, _ = self.change(cmd.run_id, mutate, actor=cmd.actor, command="transition_run",
                                expected_version=cmd.expected_version,
                                dedupe_key=cmd.dedupe_key or f"run-transition:{cmd.expected_version}:{cmd.to.value}")
        return result

    def create_attempt(self, cmd: CreateAttempt) -> CommandResult:
        """Add the next Attempt (claimed). The Run must be dispatching; the previous Attempt terminal."""
        def mutate(store: RunStore, change: RunChange) -> None:
            attempts = store.get_attempts(cmd.run_id)
            if attempts and not attempts[-1].is_terminal:
                raise AttemptConflictError(attempts[-1].id, "a terminal attempt", attempts[-1].status.value)
            if change.run.status is not RunStatus.DISPATCHING:
                raise InvalidRunTransitionError(cmd.run_id, change.run.status.value, "dispatching (new attempt)")
            change.add_attempt(RunAttempt(
                id=self._new_id(), run_id=cmd.run_id, attempt=len(attempts) + 1, status=AttemptStatus.CLAIMED,
                executor_type=cmd.executor_type, callback_sequence=0, created_at_ms=change.at_ms, pid=cmd.pid,
            ))

        result, _ = self.change(cmd.run_id, mutate, actor=cmd.actor, command="create_attempt",
                                expected_version=cmd.expected_version, dedupe_key=cmd.dedupe_key)
        return result

    def transition_attempt(self, cmd: TransitionAttempt) -> CommandResult:
        """Move an Attempt (CAS on id + status + callback_sequence) and optionally its Run, atomically."""
        def mutate(store: RunStore, change: RunChange) -> None:
            attempt = store.get_attempt(cmd.attempt_id)
            if attempt is None or attempt.run_id != cmd.run_id:
                raise AttemptConflictError(cmd.attempt_id, cmd.expected_status.value, "missing")
            if (attempt.status, attempt.callback_sequence) != (cmd.expected_status, cmd.expected_callback_sequence):
                raise AttemptConflictError(
                    attempt.id, f"{cmd.expected_status.value}#{cmd.expected_callback_sequence}",
                    f"{attempt.status.value}#{attempt.callback_sequence}")
            fields = {k: v for k, v in (("exit_code", cmd.exit_code), ("error_code", cmd.error_code),
                                        ("pid", cmd.pid)) if v is not None}
            moved = change.move_attempt(attempt, cmd.to, payload=_exit_payload(cmd.exit_code), **fields)
            if cmd.run_to is not None:
                run_to = _run_target_after(moved.status, cmd.run_to)
                change.move_run(run_to, **({"error_code": moved.error_code} if moved.error_code else {}))

        result, _ = self.change(cmd.run_id, mutate, actor=cmd.actor, command="transition_attempt",
                                expected_version=cmd.expected_version,
                                dedupe_key=cmd.dedupe_key or
                                f"attempt-transition:{cmd.attempt_id}:{cmd.expected_callback_sequence}:{cmd.to.value}")
        return result

    def retry_run(self, cmd: RetryRun) -> CreateRunResult:
        """Manual retry: a new Run with retry_of_run_id; the original stays as it was."""
        source = self.get_run(cmd.run_id)
        if source.status not in _RETRYABLE or source.mode == IMPORTED_MODE:  # history is read-only
            raise RetryNotAllowedError(source.id, source.status.value)
        create = CreateRun(
            project_id=source.project_id, task_id=source.task_id, task_revision=source.task_revision,
            trigger_type="manual_retry", actor=cmd.actor, idempotency_key=cmd.idempotency_key,
            legacy_cron_id=source.legacy_cron_id, priority=source.priority, origin=source.origin,
            mode=source.mode, owner=source.owner,
        )

        def link(store: RunStore, change: RunChange) -> None:
            change.set_run_fields(retry_of_run_id=source.id)

        return self.create_run(create, build=link)

    def request_cancel(self, cmd: RequestCancel) -> CancelResult:
        """Durable cancellation, ADR-0001 13.4: persist the request before any signal."""
        def mutate(store: RunStore, change: RunChange) -> CancelOutcome:
            run = change.run
            if run.is_terminal:
                return CancelOutcome.ALREADY_TERMINAL
            if run.cancel_requested_at_ms is not None:
                return CancelOutcome.ALREADY_REQUESTED
            change.set_run_fields(cancel_requested_at_ms=change.at_ms, cancel_reason=cmd.reason[:200])
            change.append(EventType.RUN_CANCEL_REQUESTED, {"cancel_reason": cmd.reason[:200]})
            return CancelOutcome.REQUESTED

        result, outcome = self.change(cmd.run_id, mutate, actor=cmd.actor, command="request_cancel")
        return CancelResult(result.run, outcome or CancelOutcome.ALREADY_REQUESTED)

    # -- reads ---------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> Run:
        return self._uow.read(lambda store: _load(store, run_id))

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        return self._uow.read(lambda store: store.get_attempts(run_id))

    def list_events(self, run_id: str, after_sequence: int = 0, limit: int = 100) -> EventPage:
        """Keyset page of events by sequence. Raises RunNotFoundError."""
        def work(store: RunStore) -> EventPage:
            _load(store, run_id)
            events = store.list_events(run_id, after_sequence, limit + 1)
            more = len(events) > limit
            page = tuple(events[:limit])
            return EventPage(page, page[-1].sequence if more and page else None)

        return self._uow.read(work)


def _load(store: RunStore, run_id: str) -> Run:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    return run


def _existing(run: Run, fingerprint: str, project_id: str) -> CreateRunResult:
    if run.request_fingerprint is not None and run.request_fingerprint != fingerprint:
        raise IdempotencyKeyConflictError(project_id, run.id)
    return CreateRunResult(run, created=False)


def _fingerprint(cmd: CreateRun) -> str:
    """What makes two create requests "the same request" for idempotency (the actor is not part of it)."""
    body: dict[str, Any] = {
        "task_id": cmd.task_id, "task_revision": cmd.task_revision, "trigger_type": cmd.trigger_type,
        "trigger_id": cmd.trigger_id, "parent_run_id": cmd.parent_run_id, "legacy_cron_id": cmd.legacy_cron_id,
        "priority": cmd.priority,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def _exit_payload(exit_code: int | None) -> dict[str, Any]:
    return {} if exit_code is None else {"exit_code": exit_code}


def _run_target_after(attempt_status: AttemptStatus, requested: RunStatus) -> RunStatus:
    """A cancel that converged the Attempt to cancelled takes the Run there too."""
    if attempt_status is AttemptStatus.CANCELLED and requested in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        return RunStatus.CANCELLED
    return requested


__all__ = [
    "BridgeError", "CancelOutcome", "CancelResult", "CommandResult", "CreateRunResult", "EventPage", "RunService",
]
