"""InMemoryUnitOfWork: the RunStore contract in plain dicts, for fast unit tests.

It runs through the same contract suite as the SQL stores. Transactions are serialised by one lock
and work on a copy that replaces the state only on success, so a failure leaves nothing behind.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bridge.domain.aggregate import ChangeSet
from bridge.domain.errors import AttemptConflictError, RunVersionConflictError
from bridge.domain.events import RunEvent
from bridge.domain.model import Run, RunAttempt
from bridge.service.ports import (
    ActiveCandidate,
    DedupeKeyTakenError,
    IdempotencyKeyTakenError,
    MismatchRecord,
    TaskSnapshot,
)

T = TypeVar("T")


@dataclass
class _State:
    runs: dict[str, Run] = field(default_factory=dict)
    attempts: dict[str, RunAttempt] = field(default_factory=dict)
    events: dict[str, list[RunEvent]] = field(default_factory=dict)
    snapshots: dict[str, TaskSnapshot] = field(default_factory=dict)
    mismatches: dict[str, dict[str, object]] = field(default_factory=dict)
    outbox: list[dict[str, object]] = field(default_factory=list)


class InMemoryRunStore:
    def __init__(self, state: _State) -> None:
        self._s = state

    def get_run(self, run_id: str) -> Run | None:
        return self._s.runs.get(run_id)

    def get_run_by_idempotency_key(self, project_id: str, idempotency_key: str) -> Run | None:
        return next((r for r in self._s.runs.values()
                     if r.project_id == project_id and r.idempotency_key == idempotency_key), None)

    def get_attempt(self, attempt_id: str) -> RunAttempt | None:
        return self._s.attempts.get(attempt_id)

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        return sorted((a for a in self._s.attempts.values() if a.run_id == run_id), key=lambda a: a.attempt)

    def has_dedupe_key(self, run_id: str, dedupe_key: str) -> bool:
        return any(e.dedupe_key == dedupe_key for e in self._s.events.get(run_id, ()))

    def apply(self, change: ChangeSet) -> None:
        run = change.run
        if change.expected_version is None:
            if run.idempotency_key and self.get_run_by_idempotency_key(run.project_id, run.idempotency_key):
                raise IdempotencyKeyTakenError(run.project_id, run.idempotency_key)
        else:
            current = self._s.runs.get(run.id)
            if current is None or current.version != change.expected_version:
                raise RunVersionConflictError(run.id, change.expected_version, current.version if current else None)
        self._s.runs[run.id] = run
        for write in change.attempt_writes:
            stored = self._s.attempts.get(write.attempt.id)
            if not write.is_insert and (stored is None or (stored.status, stored.callback_sequence)
                                        != (write.expected_status, write.expected_callback_sequence)):
                raise AttemptConflictError(write.attempt.id, str(write.expected_status), "changed concurrently")
            self._s.attempts[write.attempt.id] = write.attempt
        log = self._s.events.setdefault(run.id, [])
        for event in change.events:
            if event.dedupe_key is not None and self.has_dedupe_key(run.id, event.dedupe_key):
                raise DedupeKeyTakenError(run.id, event.dedupe_key)
            if log and event.sequence != log[-1].sequence + 1:
                raise RunVersionConflictError(run.id, change.expected_version or 0, None)
            log.append(event)

    def apply_many(self, changes: Sequence[ChangeSet]) -> None:
        """Brand-new Runs, each as ``apply`` writes it (bridge.service.imports.BulkRunWriter)."""
        if any(c.expected_version is not None or any(not w.is_insert for w in c.attempt_writes) for c in changes):
            raise ValueError("apply_many only inserts new Runs")
        for change in changes:
            self.apply(change)

    def list_events(self, run_id: str, after_sequence: int, limit: int) -> list[RunEvent]:
        return [e for e in self._s.events.get(run_id, []) if e.sequence > after_sequence][:limit]

    def active_candidates(self, legacy_cron_id: int, limit: int) -> list[ActiveCandidate]:
        runs = sorted((r for r in self._s.runs.values() if r.legacy_cron_id == legacy_cron_id and not r.is_terminal),
                      key=lambda r: (r.created_at_ms, r.id), reverse=True)[:limit]
        return [ActiveCandidate(r, _latest(self.get_attempts(r.id))) for r in runs]

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        self._s.snapshots.setdefault(snapshot.task_revision, snapshot)

    def has_active_runs_owned_by(self, owner: str) -> bool:
        return any(r.owner == owner and not r.is_terminal for r in self._s.runs.values())

    def enqueue_projection(self, legacy_cron_id: int, run_id: str, attempt_id: str | None, event: str,
                           at_ms: int) -> None:
        self._s.outbox.append({"id": len(self._s.outbox) + 1, "legacy_cron_id": legacy_cron_id, "run_id": run_id,
                               "attempt_id": attempt_id, "event": event, "created_at_ms": at_ms, "state": "pending"})

    def record_mismatch(self, record: MismatchRecord) -> bool:
        row = self._s.mismatches.get(record.dedupe_key)
        if row is not None:
            row.update(last_seen_ms=record.seen_at_ms, occurrences=int(row["occurrences"]) + 1,  # type: ignore[call-overload]
                       resolved_at_ms=None, expired_reason=None, closed_by_pass=None)
            return False
        self._s.mismatches[record.dedupe_key] = {
            "kind": record.kind, "origin": record.origin, "legacy_cron_id": record.legacy_cron_id,
            "run_id": record.run_id, "first_seen_ms": record.seen_at_ms, "last_seen_ms": record.seen_at_ms,
            "occurrences": 1, "diff": dict(record.diff), "resolved_at_ms": None,
            "expired_reason": None, "closed_by_pass": None}
        return True


class InMemoryUnitOfWork:
    def __init__(self) -> None:
        self._state = _State()
        self._lock = threading.RLock()

    def write(self, work: Callable[[InMemoryRunStore], T]) -> T:
        with self._lock:
            staged = copy.deepcopy(self._state)
            result = work(InMemoryRunStore(staged))
            self._state = staged
            return result

    def read(self, work: Callable[[InMemoryRunStore], T]) -> T:
        with self._lock:
            return work(InMemoryRunStore(self._state))


def _latest(attempts: list[RunAttempt]) -> RunAttempt | None:
    return attempts[-1] if attempts else None
