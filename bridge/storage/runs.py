"""SqlRunStore: the RunStore contract over SQLAlchemy Core, the same code for SQLite and PostgreSQL.

A ChangeSet costs one Run write, one write per touched Attempt and one multi-row event insert; on
PostgreSQL they travel together in one round trip (pipeline mode), on SQLite there is no round trip. A batch of
new Runs (``apply_many``, the import's) costs one multi-row insert per table, through the same statements and the
same row mappers (bridge/storage/rows.py). The Run's compare-and-set and its event insert are the Run fence
(bridge/storage/run_fence.py), which the StepRun repository shares.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from bridge.domain.aggregate import AttemptWrite, ChangeSet
from bridge.domain.errors import AttemptConflictError, RunVersionConflictError
from bridge.domain.events import RunEvent
from bridge.domain.model import Run, RunAttempt
from bridge.service.ports import ActiveCandidate, MismatchRecord, TaskSnapshot
from bridge.storage.errors import translate_integrity_error
from bridge.storage.rows import (
    ATTEMPT_FIELDS,
    RUN_FIELDS,
    attempt_from_row,
    attempt_values,
    event_from_row,
    run_from_row,
    run_values,
)
from bridge.storage.run_fence import fence_held, insert_events, update_run
from bridge.storage.schema import (
    ACTIVE_STATUS_SQL,
    index_named,
    mismatches_table,
    projection_outbox_table,
    run_attempts_table,
    run_events_table,
    runs_table,
    task_snapshots_table,
)
from bridge.storage.statements import CompiledStatement, Statement, execute_all

# Statements built once and compiled once per dialect (bridge/storage/statements.py). Bind names carry a "b_"
# prefix because the column names are the SET/VALUES parameters.
_r, _a, _e = runs_table, run_attempts_table, run_events_table
_ATTEMPT_FIELDS_NO_ID = [f for f in ATTEMPT_FIELDS if f != "id"]


_SELECT_RUN = CompiledStatement(select(_r).where(_r.c.id == bindparam("b_id")))
_SELECT_RUN_BY_KEY = CompiledStatement(select(_r).where(_r.c.project_id == bindparam("b_project"),
                                                        _r.c.idempotency_key == bindparam("b_key")))
_SELECT_ATTEMPT = CompiledStatement(select(_a).where(_a.c.id == bindparam("b_id")))
_SELECT_ATTEMPTS = CompiledStatement(select(_a).where(_a.c.run_id == bindparam("b_run_id")).order_by(_a.c.attempt))
_HAS_DEDUPE = CompiledStatement(select(exists().where(and_(_e.c.run_id == bindparam("b_run_id"),
                                                           _e.c.dedupe_key == bindparam("b_key")))))
_INSERT_RUN = CompiledStatement(insert(_r), list(RUN_FIELDS))
_INSERT_ATTEMPT = CompiledStatement(insert(_a), list(ATTEMPT_FIELDS))
_UPDATE_ATTEMPT = CompiledStatement(
    update(_a).where(_a.c.id == bindparam("b_id"), _a.c.status == bindparam("b_status"),
                     _a.c.callback_sequence == bindparam("b_sequence")),
    _ATTEMPT_FIELDS_NO_ID)
_LIST_EVENTS = CompiledStatement(
    select(_e).where(_e.c.run_id == bindparam("b_run_id"), _e.c.sequence > bindparam("b_after"))
    .order_by(_e.c.sequence).limit(bindparam("b_limit")))

# A cron's open Runs, newest first, each with its latest Attempt, in one statement. The predicate on status
# is the partial index's own text (schema.ACTIVE_STATUS_SQL), so PostgreSQL's planner reads only the cron's
# open Runs from ix_runs_active_by_cron instead of walking its history; SQLite's, which never has statistics
# here, is held to that index by name.
_a_latest = _a.alias("latest")
_LATEST_ATTEMPT_NO = (select(func.max(_a_latest.c.attempt)).where(_a_latest.c.run_id == _r.c.id)
                      .correlate(_r).scalar_subquery())
_ACTIVE_CANDIDATES = CompiledStatement(
    select(_r, *[_a.c[name].label(f"a__{name}") for name in ATTEMPT_FIELDS])
    .select_from(_r.outerjoin(_a, and_(_a.c.run_id == _r.c.id, _a.c.attempt == _LATEST_ATTEMPT_NO)))
    .where(_r.c.legacy_cron_id == bindparam("b_cron"), text(f"runs.{ACTIVE_STATUS_SQL}"))
    .order_by(_r.c.created_at_ms.desc(), _r.c.id.desc()).limit(bindparam("b_limit")),
    sqlite_index=index_named(_r, "ix_runs_active_by_cron"))
# Whether any open Run has this owner (primary mode asks it before forwarding an end): read from the index of
# open Runs, like the candidates above, so a long closed history is never walked.
_ANY_ACTIVE_OWNED_BY = CompiledStatement(
    select(exists().where(text(f"runs.{ACTIVE_STATUS_SQL}"), _r.c.owner == bindparam("b_owner"))),
    sqlite_index=index_named(_r, "ix_runs_active_by_cron"))
# ON CONFLICT DO NOTHING: concurrent first runs of one revision must not fail each other.
_INSERT_SNAPSHOT_PG = CompiledStatement(postgresql_insert(task_snapshots_table).on_conflict_do_nothing(
    index_elements=["task_revision"]), [c.name for c in task_snapshots_table.columns])
_INSERT_SNAPSHOT_SQLITE = CompiledStatement(sqlite_insert(task_snapshots_table).on_conflict_do_nothing(
    index_elements=["task_revision"]), [c.name for c in task_snapshots_table.columns])


def _latest_attempt_from_row(row: Mapping[str, Any]) -> RunAttempt | None:
    if row["a__id"] is None:
        return None
    return attempt_from_row({name: row[f"a__{name}"] for name in ATTEMPT_FIELDS})


class SqlRunStore:
    """RunStore over one open connection; the unit of work owns the transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def get_run(self, run_id: str) -> Run | None:
        row = _SELECT_RUN.execute(self._conn, {"b_id": run_id}).first()
        return run_from_row(row) if row else None

    def get_run_by_idempotency_key(self, project_id: str, idempotency_key: str) -> Run | None:
        params = {"b_project": project_id, "b_key": idempotency_key}
        row = _SELECT_RUN_BY_KEY.execute(self._conn, params).first()
        return run_from_row(row) if row else None

    def get_attempt(self, attempt_id: str) -> RunAttempt | None:
        row = _SELECT_ATTEMPT.execute(self._conn, {"b_id": attempt_id}).first()
        return attempt_from_row(row) if row else None

    def get_attempts(self, run_id: str) -> list[RunAttempt]:
        return [attempt_from_row(r) for r in _SELECT_ATTEMPTS.execute(self._conn, {"b_run_id": run_id}).rows]

    def has_dedupe_key(self, run_id: str, dedupe_key: str) -> bool:
        return _HAS_DEDUPE.execute(self._conn, {"b_run_id": run_id, "b_key": dedupe_key}).truth()

    def apply(self, change: ChangeSet) -> None:
        """The Run, its touched Attempts and the events, sent together; the CAS counts are checked after."""
        run = change.run
        statements = [self._run_write(run, change.expected_version)]
        statements += [self._attempt_write(write) for write in change.attempt_writes]
        if change.events:
            statements.append(insert_events(change.events))
        try:
            results = execute_all(self._conn, statements)
        except IntegrityError as exc:
            dedupe = next((e.dedupe_key for e in change.events if e.dedupe_key), None)
            raise translate_integrity_error(
                exc, run_id=run.id, dedupe_key=dedupe, project_id=run.project_id,
                idempotency_key=run.idempotency_key if change.expected_version is None else None,
                expected_version=change.expected_version) from exc
        # Any miss rolls the whole transaction back, events included (the unit of work owns it).
        if change.expected_version is not None and not fence_held(results[0]):
            raise RunVersionConflictError(run.id, change.expected_version, None)
        for write, result in zip(change.attempt_writes, results[1:]):
            if not write.is_insert and result.rowcount != 1:
                assert write.expected_status is not None
                expected = f"{write.expected_status.value}#{write.expected_callback_sequence}"
                raise AttemptConflictError(write.attempt.id, expected, "changed concurrently")

    def apply_many(self, changes: Sequence[ChangeSet]) -> None:
        """Brand-new Runs with their Attempts and events (bridge.service.imports.BulkRunWriter): the rows
        ``apply`` writes, through its statements and row mappers, one executemany per table, sent together."""
        if any(c.expected_version is not None or any(not w.is_insert for w in c.attempt_writes) for c in changes):
            raise ValueError("apply_many only inserts new Runs")
        if not changes:
            return
        statements: list[Statement] = [(_INSERT_RUN, [run_values(c.run) for c in changes])]
        attempts = [attempt_values(w.attempt) for c in changes for w in c.attempt_writes]
        if attempts:
            statements.append((_INSERT_ATTEMPT, attempts))
        events = [e for c in changes for e in c.events]
        if events:
            statements.append(insert_events(events))
        try:
            execute_all(self._conn, statements)
        except IntegrityError as exc:
            # Which row it was, neither store's message says reliably: the first Run with a key stands for it.
            first = next((c.run for c in changes if c.run.idempotency_key is not None), changes[0].run)
            dedupe = next((e.dedupe_key for c in changes for e in c.events if e.dedupe_key), None)
            raise translate_integrity_error(exc, run_id=first.id, dedupe_key=dedupe, project_id=first.project_id,
                                            idempotency_key=first.idempotency_key, expected_version=None) from exc

    @staticmethod
    def _run_write(run: Run, expected_version: int | None) -> Statement:
        if expected_version is None:
            return _INSERT_RUN, run_values(run)
        return update_run(run, expected_version)

    @staticmethod
    def _attempt_write(write: AttemptWrite) -> Statement:
        values = attempt_values(write.attempt)
        if write.is_insert:
            return _INSERT_ATTEMPT, values
        assert write.expected_status is not None
        del values["id"]
        values.update(b_id=write.attempt.id, b_status=write.expected_status.value,
                      b_sequence=write.expected_callback_sequence)
        return _UPDATE_ATTEMPT, values

    def list_events(self, run_id: str, after_sequence: int, limit: int) -> list[RunEvent]:
        params = {"b_run_id": run_id, "b_after": after_sequence, "b_limit": limit}
        return [event_from_row(r) for r in _LIST_EVENTS.execute(self._conn, params).rows]

    def active_candidates(self, legacy_cron_id: int, limit: int) -> list[ActiveCandidate]:
        rows = _ACTIVE_CANDIDATES.execute(self._conn, {"b_cron": legacy_cron_id, "b_limit": limit}).rows
        return [ActiveCandidate(run_from_row(row), _latest_attempt_from_row(row)) for row in rows]

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        statement = _INSERT_SNAPSHOT_PG if self._conn.dialect.name == "postgresql" else _INSERT_SNAPSHOT_SQLITE
        statement.execute(self._conn, asdict(snapshot))

    def record_mismatch(self, record: MismatchRecord) -> bool:
        t = mismatches_table
        bumped = self._conn.execute(
            update(t).where(t.c.dedupe_key == record.dedupe_key)
            .values(last_seen_ms=record.seen_at_ms, occurrences=t.c.occurrences + 1, resolved_at_ms=None,
                    expired_reason=None, closed_by_pass=None)
        ).rowcount
        if bumped:
            return False
        self._conn.execute(insert(t).values(
            kind=record.kind, origin=record.origin, legacy_cron_id=record.legacy_cron_id, run_id=record.run_id,
            dedupe_key=record.dedupe_key, first_seen_ms=record.seen_at_ms, last_seen_ms=record.seen_at_ms,
            occurrences=1, diff=json.dumps(record.diff, sort_keys=True, default=str)))
        return True

    def enqueue_projection(self, legacy_cron_id: int, run_id: str, attempt_id: str | None, event: str,
                           at_ms: int) -> None:
        self._conn.execute(insert(projection_outbox_table).values(
            legacy_cron_id=legacy_cron_id, run_id=run_id, attempt_id=attempt_id, event=event, created_at_ms=at_ms,
            state="pending", attempts=0, next_attempt_at_ms=at_ms))

    def has_active_runs_owned_by(self, owner: str) -> bool:
        return _ANY_ACTIVE_OWNED_BY.execute(self._conn, {"b_owner": owner}).truth()
