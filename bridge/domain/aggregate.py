"""RunChange: the pure decision half of one command (docs/run-state.md#transaction-boundaries).

A command reads a Run (and the Attempts it touches), asks RunChange for each step, and gets back the new
Run (version + 1, event_sequence + number of events), the Attempt writes with their compare-and-set
expectations, and the events to append. Nothing here does I/O; storage applies the result atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.domain.errors import InvalidAttemptTransitionError, InvalidRunTransitionError
from bridge.domain.events import DEFAULT_PAYLOAD_CAP_BYTES, Actor, ErrorCode, EventType, RunEvent, encode_payload
from bridge.domain.model import (
    RUN_TERMINAL,
    AttemptStatus,
    Run,
    RunAttempt,
    RunStatus,
    attempt_can_go,
    run_can_go,
)

# docs/run-state.md#durable-cancellation, step 5: once a cancel request is committed, a later success or failure
# converges to cancelled, and so does an end whose outcome was not reported (the cancel explains it).
_CONVERGES_TO_CANCELLED_RUN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.ENDED})
_CONVERGES_TO_CANCELLED_ATTEMPT = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.ENDED})


@dataclass(frozen=True, slots=True)
class AttemptWrite:
    """An Attempt to insert (``expected_status`` None) or to compare-and-set."""

    attempt: RunAttempt
    expected_status: AttemptStatus | None
    expected_callback_sequence: int | None

    @property
    def is_insert(self) -> bool:
        return self.expected_status is None


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """Everything one transaction writes: the Run CAS, Attempt writes, and events, in that order."""

    run: Run
    expected_version: int | None  # None: the Run is new and is inserted
    attempt_writes: tuple[AttemptWrite, ...]
    events: tuple[RunEvent, ...]


class RunChange:
    """Accumulates the steps of one command against one Run."""

    def __init__(
        self,
        run: Run,
        *,
        actor: Actor,
        at_ms: int,
        new_id: Callable[[], str],
        dedupe_key: str | None = None,
        is_new: bool = False,
        payload_cap_bytes: int = DEFAULT_PAYLOAD_CAP_BYTES,
    ) -> None:
        self._base = run
        self.run = run
        self._actor = actor
        self._at_ms = at_ms
        self._new_id = new_id
        self._dedupe_key = dedupe_key
        self._is_new = is_new
        self._cap = payload_cap_bytes
        self._attempts: dict[str, AttemptWrite] = {}
        self._events: list[RunEvent] = []

    @classmethod
    def create(cls, run: Run, *, payload: Mapping[str, Any] | None = None, **kwargs: Any) -> RunChange:
        """Start a brand-new Run (status created), appending ``run.created``."""
        change = cls(run, is_new=True, **kwargs)
        change.append(EventType.RUN_CREATED, payload or {})
        return change

    @property
    def at_ms(self) -> int:
        return self._at_ms

    def attempt(self, attempt_id: str) -> RunAttempt | None:
        write = self._attempts.get(attempt_id)
        return write.attempt if write else None

    def append(self, type_: EventType, payload: Mapping[str, Any], *, attempt_id: str | None = None) -> None:
        """Append one event; the first event carries the command's dedupe key."""
        encode_payload(payload, self._cap)
        key = self._dedupe_key
        if key is not None and self._events:
            key = f"{key}#{len(self._events) + 1}"
        self._events.append(RunEvent(
            id=self._new_id(), run_id=self.run.id, sequence=self._base.event_sequence + len(self._events) + 1,
            type=type_, actor_type=self._actor.type, actor_id=self._actor.id, created_at_ms=self._at_ms,
            payload=dict(payload), dedupe_key=key, attempt_id=attempt_id,
        ))

    def move_run(self, to: RunStatus, *, payload: Mapping[str, Any] | None = None, **fields: Any) -> RunStatus:
        """Move the Run to ``to`` (or to cancelled when a cancel request is pending); returns the status reached."""
        current = self.run
        if current.cancel_requested_at_ms is not None and to in _CONVERGES_TO_CANCELLED_RUN:
            to = RunStatus.CANCELLED
            fields.setdefault("error_code", ErrorCode.CANCELLED_BY_USER.value)
        if not run_can_go(current.status, to):
            raise InvalidRunTransitionError(current.id, current.status.value, to.value)
        fields = {**_timestamps_for_run(current, to, self._at_ms), **fields}
        self.run = current.evolve(status=to, **fields)
        self.append(EventType.for_run_status(to), {"from": current.status.value, "to": to.value, **(payload or {})})
        return to

    def add_attempt(self, attempt: RunAttempt, *, payload: Mapping[str, Any] | None = None) -> RunAttempt:
        """Insert a new Attempt in status claimed, appending ``attempt.claimed``."""
        self._attempts[attempt.id] = AttemptWrite(attempt, None, None)
        self.append(EventType.ATTEMPT_CLAIMED, {"attempt": attempt.attempt, **(payload or {})}, attempt_id=attempt.id)
        return attempt

    def move_attempt(
        self, attempt: RunAttempt, to: AttemptStatus, *, payload: Mapping[str, Any] | None = None, **fields: Any
    ) -> RunAttempt:
        """Move an Attempt; each move bumps its callback_sequence. Terminal attempts never move."""
        pending = self._attempts.get(attempt.id)
        current = pending.attempt if pending else attempt
        if self.run.cancel_requested_at_ms is not None and to in _CONVERGES_TO_CANCELLED_ATTEMPT:
            to = AttemptStatus.CANCELLED
            fields.setdefault("error_code", ErrorCode.CANCELLED_BY_USER.value)
        if not attempt_can_go(current.status, to):
            raise InvalidAttemptTransitionError(current.id, current.status.value, to.value)
        fields = {**_timestamps_for_attempt(current, to, self._at_ms), **fields}
        moved = current.evolve(status=to, callback_sequence=current.callback_sequence + 1, **fields)
        if pending is None:
            self._attempts[attempt.id] = AttemptWrite(moved, current.status, current.callback_sequence)
        else:
            self._attempts[attempt.id] = AttemptWrite(moved, pending.expected_status,
                                                      pending.expected_callback_sequence)
        self.append(EventType.for_attempt_status(to),
                    {"from": current.status.value, "to": to.value, **(payload or {})}, attempt_id=attempt.id)
        return moved

    def set_run_fields(self, **fields: Any) -> None:
        """Change non-status fields (cancel request, evidence) as part of this command."""
        self.run = self.run.evolve(**fields)

    @property
    def has_events(self) -> bool:
        return bool(self._events)

    def result(self) -> ChangeSet:
        """Freeze the change: version + 1 (0 for a new Run) and event_sequence + number of events."""
        run = self.run.evolve(
            version=0 if self._is_new else self._base.version + 1,
            event_sequence=self._base.event_sequence + len(self._events),
        )
        return ChangeSet(
            run=run,
            expected_version=None if self._is_new else self._base.version,
            attempt_writes=tuple(self._attempts.values()),
            events=tuple(self._events),
        )


def _timestamps_for_run(run: Run, to: RunStatus, at_ms: int) -> dict[str, Any]:
    if to is RunStatus.QUEUED and run.queued_at_ms is None:
        return {"queued_at_ms": at_ms}
    if to is RunStatus.RUNNING and run.started_at_ms is None:
        return {"started_at_ms": at_ms}
    if to in RUN_TERMINAL and run.finished_at_ms is None:
        return {"finished_at_ms": at_ms}
    return {}


def _timestamps_for_attempt(attempt: RunAttempt, to: AttemptStatus, at_ms: int) -> dict[str, Any]:
    if to is AttemptStatus.RUNNING and attempt.started_at_ms is None:
        return {"started_at_ms": at_ms}
    if to not in (AttemptStatus.STARTING, AttemptStatus.RUNNING) and attempt.finished_at_ms is None:
        return {"finished_at_ms": at_ms}
    return {}
