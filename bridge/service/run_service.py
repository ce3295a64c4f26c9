"""RunService: the only way run state changes. One write API (docs/run-state.md#transaction-boundaries): ``change``
reads one Run, lets the caller's mutation decide and CAS-writes the result; ``transaction`` lets a handler decide across
several Runs; ``read`` and the getters only read. Each call is one transaction. The rules that decide a command live in
the domain (bridge.domain.aggregate, bridge.domain.commands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from bridge.domain.aggregate import ChangeSet, RunChange
from bridge.domain.errors import (
    AttemptConflictError,
    BridgeError,
    InvalidAttemptTransitionError,
    InvalidRunTransitionError,
    RunNotFoundError,
    RunVersionConflictError,
)
from bridge.domain.events import DEFAULT_PAYLOAD_CAP_BYTES, Actor, RunEvent
from bridge.domain.model import Run, RunAttempt
from bridge.service.ids import new_id
from bridge.service.ports import (
    Clock,
    DedupeKeyTakenError,
    NullMetrics,
    RunRepository,
    RunStore,
    ServiceMetrics,
    UnitOfWork,
)

R = TypeVar("R")
_REFUSALS = (RunVersionConflictError, AttemptConflictError, InvalidRunTransitionError, InvalidAttemptTransitionError)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command left behind. ``applied`` is False when its dedupe key had already been used."""

    run: Run
    attempt: RunAttempt | None = None
    events: tuple[RunEvent, ...] = ()
    applied: bool = True


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
        """Apply the change (same errors as RunRepository.apply); an empty change writes nothing."""
        changes = change.result()
        if changes.events:
            self.store.apply(changes)
            self.committed.append(changes)
        return changes


class RunService:
    """Every write of a Run goes through ``change`` or ``transaction``, each one transaction of the unit of work."""

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

    # -- the one write API ---------------------------------------------------------------------

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
        """Run ``work`` in one write transaction; everything it commits lands together or not at all.

        Raises whatever ``work`` raises, RunRepository.apply's refusals included (nothing is written).
        """
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

    # -- reads ---------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> Run:
        return self._uow.read(lambda store: _load(store, run_id))

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        return self._uow.read(lambda store: store.get_attempts(run_id))

    def list_events(self, run_id: str, after_sequence: int = 0, limit: int = 100) -> EventPage:
        """Keyset page of events by sequence. Raises RunNotFoundError."""
        def work(store: RunRepository) -> EventPage:
            _load(store, run_id)
            events = store.list_events(run_id, after_sequence, limit + 1)
            more = len(events) > limit
            page = tuple(events[:limit])
            return EventPage(page, page[-1].sequence if more and page else None)

        return self._uow.read(work)


def _load(store: RunRepository, run_id: str) -> Run:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    return run


__all__ = ["BridgeError", "CommandResult", "EventPage", "RunService", "RunTransaction"]
