"""SqlRunStore: the RunStore contract over SQLAlchemy Core, the same code for SQLite and PostgreSQL.

Every statement is one round trip; a ChangeSet costs one Run write, one write per touched Attempt and
one multi-row event insert.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from sqlalchemy import Connection, and_, exists, insert, select, update
from sqlalchemy.exc import IntegrityError

from bridge.domain.aggregate import AttemptWrite, ChangeSet
from bridge.domain.errors import AttemptConflictError, RunVersionConflictError
from bridge.domain.events import ActorType, EventType, RunEvent
from bridge.domain.model import RUN_TERMINAL, AttemptStatus, Run, RunAttempt, RunStatus
from bridge.service.ports import ActiveCandidate, MismatchRecord, TaskSnapshot
from bridge.storage.errors import translate_integrity_error
from bridge.storage.schema import (
    mismatches_table,
    run_attempts_table,
    run_events_table,
    runs_table,
    task_snapshots_table,
)

_RUN_FIELDS = tuple(f.name for f in fields(Run))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(RunAttempt))
_TERMINAL_VALUES = tuple(s.value for s in RUN_TERMINAL)


def run_from_row(row: Mapping[str, Any]) -> Run:
    values = {name: row[name] for name in _RUN_FIELDS}
    values["status"] = RunStatus(values["status"])
    values["synthesized"] = bool(values["synthesized"])
    return Run(**values)


def attempt_from_row(row: Mapping[str, Any]) -> RunAttempt:
    values = {name: row[name] for name in _ATTEMPT_FIELDS}
    values["status"] = AttemptStatus(values["status"])
    values["synthesized"] = bool(values["synthesized"])
    return RunAttempt(**values)


def event_from_row(row: Mapping[str, Any]) -> RunEvent:
    return RunEvent(
        id=row["id"], run_id=row["run_id"], sequence=row["sequence"], type=EventType(row["type"]),
        actor_type=ActorType(row["actor_type"]), created_at_ms=row["created_at_ms"],
        payload=json.loads(row["payload"]), dedupe_key=row["dedupe_key"], actor_id=row["actor_id"],
        attempt_id=row["attempt_id"], step_run_id=row["step_run_id"],
    )


def _run_values(run: Run) -> dict[str, Any]:
    values = asdict(run)
    values["status"] = run.status.value
    return values


def _attempt_values(attempt: RunAttempt) -> dict[str, Any]:
    values = asdict(attempt)
    values["status"] = attempt.status.value
    return values


def _event_values(event: RunEvent) -> dict[str, Any]:
    return {
        "id": event.id, "run_id": event.run_id, "sequence": event.sequence, "type": event.type.value,
        "dedupe_key": event.dedupe_key, "actor_type": event.actor_type.value, "actor_id": event.actor_id,
        "attempt_id": event.attempt_id, "step_run_id": event.step_run_id,
        "payload": json.dumps(dict(event.payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        "created_at_ms": event.created_at_ms,
    }


class SqlRunStore:
    """RunStore over one open connection; the unit of work owns the transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def get_run(self, run_id: str) -> Run | None:
        row = self._conn.execute(select(runs_table).where(runs_table.c.id == run_id)).mappings().first()
        return run_from_row(row) if row else None

    def get_run_by_idempotency_key(self, project_id: str, idempotency_key: str) -> Run | None:
        stmt = select(runs_table).where(runs_table.c.project_id == project_id,
                                        runs_table.c.idempotency_key == idempotency_key)
        row = self._conn.execute(stmt).mappings().first()
        return run_from_row(row) if row else None

    def get_attempt(self, attempt_id: str) -> RunAttempt | None:
        stmt = select(run_attempts_table).where(run_attempts_table.c.id == attempt_id)
        row = self._conn.execute(stmt).mappings().first()
        return attempt_from_row(row) if row else None

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        stmt = (select(run_attempts_table).where(run_attempts_table.c.run_id == run_id)
                .order_by(run_attempts_table.c.attempt))
        return [attempt_from_row(r) for r in self._conn.execute(stmt).mappings()]

    def has_dedupe_key(self, run_id: str, dedupe_key: str) -> bool:
        cond = and_(run_events_table.c.run_id == run_id, run_events_table.c.dedupe_key == dedupe_key)
        return bool(self._conn.execute(select(exists().where(cond))).scalar())

    def apply(self, change: ChangeSet) -> None:
        run = change.run
        try:
            self._write_run(run, change.expected_version)
            for write in change.attempt_writes:
                self._write_attempt(write)
            if change.events:
                self._conn.execute(insert(run_events_table), [_event_values(e) for e in change.events])
        except IntegrityError as exc:
            dedupe = next((e.dedupe_key for e in change.events if e.dedupe_key), None)
            raise translate_integrity_error(
                exc, run_id=run.id, dedupe_key=dedupe, project_id=run.project_id,
                idempotency_key=run.idempotency_key if change.expected_version is None else None,
                expected_version=change.expected_version) from exc

    def _write_run(self, run: Run, expected_version: int | None) -> None:
        if expected_version is None:
            self._conn.execute(insert(runs_table).values(_run_values(run)))
            return
        values = _run_values(run)
        del values["id"]
        stmt = (update(runs_table)
                .where(runs_table.c.id == run.id, runs_table.c.version == expected_version)
                .values(values))
        if self._conn.execute(stmt).rowcount != 1:
            raise RunVersionConflictError(run.id, expected_version, None)

    def _write_attempt(self, write: AttemptWrite) -> None:
        attempt = write.attempt
        if write.is_insert:
            self._conn.execute(insert(run_attempts_table).values(_attempt_values(attempt)))
            return
        assert write.expected_status is not None
        values = _attempt_values(attempt)
        del values["id"]
        t = run_attempts_table
        stmt = (update(t)
                .where(t.c.id == attempt.id, t.c.status == write.expected_status.value,
                       t.c.callback_sequence == write.expected_callback_sequence)
                .values(values))
        if self._conn.execute(stmt).rowcount != 1:
            raise AttemptConflictError(attempt.id, f"{write.expected_status.value}#{write.expected_callback_sequence}",
                                       "changed concurrently")

    def list_events(self, run_id: str, after_sequence: int, limit: int) -> list[RunEvent]:
        t = run_events_table
        stmt = (select(t).where(t.c.run_id == run_id, t.c.sequence > after_sequence)
                .order_by(t.c.sequence).limit(limit))
        return [event_from_row(r) for r in self._conn.execute(stmt).mappings()]

    def active_candidates(self, legacy_cron_id: int, limit: int) -> list[ActiveCandidate]:
        r = runs_table
        stmt = (select(r).where(r.c.legacy_cron_id == legacy_cron_id, r.c.status.notin_(_TERMINAL_VALUES))
                .order_by(r.c.created_at_ms.desc(), r.c.id.desc()).limit(limit))
        runs = [run_from_row(row) for row in self._conn.execute(stmt).mappings()]
        if not runs:
            return []
        a = run_attempts_table
        rows = self._conn.execute(select(a).where(a.c.run_id.in_([run.id for run in runs]))).mappings()
        latest: dict[str, RunAttempt] = {}
        for row in rows:
            attempt = attempt_from_row(row)
            if attempt.run_id not in latest or attempt.attempt > latest[attempt.run_id].attempt:
                latest[attempt.run_id] = attempt
        return [ActiveCandidate(run, latest.get(run.id)) for run in runs]

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        t = task_snapshots_table
        known = self._conn.execute(select(exists().where(t.c.task_revision == snapshot.task_revision))).scalar()
        if not known:
            self._conn.execute(insert(t).values(asdict(snapshot)))

    def record_mismatch(self, record: MismatchRecord) -> bool:
        t = mismatches_table
        bumped = self._conn.execute(
            update(t).where(t.c.dedupe_key == record.dedupe_key)
            .values(last_seen_ms=record.seen_at_ms, occurrences=t.c.occurrences + 1, resolved_at_ms=None)
        ).rowcount
        if bumped:
            return False
        self._conn.execute(insert(t).values(
            kind=record.kind, origin=record.origin, legacy_cron_id=record.legacy_cron_id, run_id=record.run_id,
            dedupe_key=record.dedupe_key, first_seen_ms=record.seen_at_ms, last_seen_ms=record.seen_at_ms,
            occurrences=1, diff=json.dumps(record.diff, sort_keys=True, default=str)))
        return True
