"""SqlRunStore: the RunStore contract over SQLAlchemy Core, the same code for SQLite and PostgreSQL.

A ChangeSet costs one Run write, one write per touched Attempt and one multi-row event insert; on
PostgreSQL they travel together in one round trip (pipeline mode), on SQLite there is no round trip. A batch of
new Runs (``apply_many``, the import's) costs one multi-row insert per table, through the same statements and the
same row mappers (one per table: ``_run_values``, ``_attempt_values``, ``_event_values``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, fields
from functools import cache
from typing import Any

from sqlalchemy import (
    Connection,
    Dialect,
    Executable,
    Index,
    and_,
    bindparam,
    exists,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.domain.aggregate import AttemptWrite, ChangeSet
from bridge.domain.errors import AttemptConflictError, RunVersionConflictError
from bridge.domain.events import ActorType, EventType, RunEvent
from bridge.domain.model import AttemptStatus, Run, RunAttempt, RunStatus
from bridge.service.ports import ActiveCandidate, MismatchRecord, TaskSnapshot
from bridge.storage.errors import translate_integrity_error
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

_RUN_FIELDS = tuple(f.name for f in fields(Run))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(RunAttempt))

# The hot-path statements are Core statements built once and compiled once per dialect, then run on
# the connection's DB-API cursor inside the transaction SQLAlchemy manages. Rebuilding, re-compiling and
# wrapping results per call cost more than the database work itself (tests/bench/bench_run_service.py).
# Driver errors are wrapped exactly as SQLAlchemy wraps them, so storage/errors.py sees the same types.
# Bind names carry a "b_" prefix because the column names are the SET/VALUES parameters.
_r, _a, _e = runs_table, run_attempts_table, run_events_table
_RUN_FIELDS_NO_ID = [f for f in _RUN_FIELDS if f != "id"]
_ATTEMPT_FIELDS_NO_ID = [f for f in _ATTEMPT_FIELDS if f != "id"]
_EVENT_COLUMNS = [c.name for c in _e.columns]
Params = dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Result:
    rowcount: int
    rows: list[dict[str, Any]]

    def first(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    def truth(self) -> bool:
        """The first column of the first row as a bool (an EXISTS), False when there is no row."""
        row = self.first()
        return bool(row and next(iter(row.values())))


def pin_sqlite_index(sql: str, index: Index) -> str:
    """SQLite text that reads the index's table only through that index (``INDEXED BY``), at every FROM of it.

    Nothing runs ANALYZE on a SQLite store, and without statistics SQLite weighs a partial index no lighter
    than a full one: for a cron's open Runs it took ix_runs_cron_created_id, which gives the same order, and
    read the cron's whole history on every callback. INDEXED BY is SQLite's own way to hold a time-critical
    statement to its index; a schema without that index makes the statement fail instead of slowing down.
    """
    table = index.table.name  # type: ignore[union-attr]
    pinned, count = re.subn(rf"\bFROM {table}\b", f"FROM {table} INDEXED BY {index.name}", sql)
    if count == 0:
        raise ValueError(f"no FROM {table} in the statement to pin to {index.name}")
    return pinned


class _Prepared:
    """One Core statement, compiled on first use for each dialect into (sql, positional order, defaults).

    ``sqlite_index``: an index of the statement's table that its SQLite text must read (``pin_sqlite_index``).
    """

    def __init__(self, stmt: Executable, column_keys: list[str] | None = None, *,
                 sqlite_index: Index | None = None) -> None:
        self._stmt = stmt
        self._keys = column_keys
        self._sqlite_index = sqlite_index
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None, Params]] = {}
        # Result column names per dialect, taken from the first result: a statement's shape never changes,
        # and psycopg builds a description object per column each time it is asked (a 64-column read
        # spent more time there than in the query).
        self._names: dict[str, list[str] | None] = {}

    def execute(self, conn: Connection, params: Params | list[Params]) -> _Result:
        return _execute_all(conn, [(self, params)])[0]

    def bind(self, dialect: Dialect, params: Params | list[Params]) -> tuple[str, Any]:
        sql, order, defaults = self._for(dialect)
        if isinstance(params, list):
            return sql, [self._args(p, order, defaults) for p in params]
        return sql, self._args(params, order, defaults)

    @staticmethod
    def _args(params: Params, order: tuple[str, ...] | None, defaults: Params) -> Any:
        if defaults:  # binds the statement fills itself, e.g. SQLite's OFFSET 0 after a LIMIT
            params = {**defaults, **params}
        return params if order is None else tuple(params[k] for k in order)

    def collect(self, dialect: Dialect, cursor: Any) -> _Result:
        """The cursor's row count and rows (as dicts by column name) after this statement ran."""
        if dialect.name in self._names:
            names = self._names[dialect.name]
        else:
            description = cursor.description
            names = self._names[dialect.name] = [d[0] for d in description] if description is not None else None
        rows = [dict(zip(names, row)) for row in cursor.fetchall()] if names is not None else []
        return _Result(cursor.rowcount, rows)

    def _for(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None, Params]:
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = self._stmt.compile(dialect=dialect, column_keys=self._keys)
            order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
            defaults = {name: bind.value for name, bind in compiled.binds.items()
                        if not bind.required and bind.value is not None}
            sql = str(compiled)
            if self._sqlite_index is not None and dialect.name == "sqlite":
                sql = pin_sqlite_index(sql, self._sqlite_index)
            found = self._compiled[dialect.name] = (sql, order, defaults)
        return found


def _execute_all(conn: Connection, statements: list[tuple[_Prepared, Params | list[Params]]]) -> list[_Result]:
    """Run the statements in order and return their results; on PostgreSQL in one round trip where it can.

    Every statement sent to PostgreSQL costs a round trip, and psycopg adds one more for the BEGIN that opens
    the transaction. In pipeline mode (psycopg, libpq 14+) the statements, and a pending BEGIN, go out
    together and the first error aborts the rest, which then raises here; results are read after the sync,
    so a compare-and-set still sees its own row count before anything commits.
    """
    dbapi = conn.dialect.loaded_dbapi
    raw = conn.connection.dbapi_connection
    batched = _pipeline_for(raw, several=len(statements) > 1)
    cursors: list[Any] = []
    sql, args = "", None
    try:
        with batched:
            for prepared, params in statements:
                sql, args = prepared.bind(conn.dialect, params)
                cursor = conn.connection.cursor()
                cursors.append(cursor)
                (cursor.executemany if isinstance(params, list) else cursor.execute)(sql, args)
        return [prepared.collect(conn.dialect, cursor) for (prepared, _), cursor in zip(statements, cursors)]
    except dbapi.Error as exc:
        # As Connection._handle_dbapi_exception does: a lost connection is invalidated (so the pool never
        # hands it out again) and the error says so, which lets the unit of work retry on a fresh one.
        lost = conn.dialect.is_disconnect(exc, raw, cursors[-1] if cursors else None)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(sql, args, exc, dbapi.Error, dialect=conn.dialect,
                                  connection_invalidated=lost) from exc
    finally:
        for cursor in cursors:
            cursor.close()


def _pipeline_for(raw: Any, *, several: bool) -> AbstractContextManager[Any]:
    """psycopg's pipeline when it saves a round trip: several statements, or one that opens the transaction."""
    pipeline = getattr(raw, "pipeline", None)
    if pipeline is None or not _pipeline_supported():
        return nullcontext()  # SQLite, or a libpq without pipeline mode
    if several or raw.info.transaction_status == _idle_status():
        return pipeline()
    return nullcontext()


# psycopg is imported only once a PostgreSQL connection exists: on the SQLite default, loading it and
# libpq would cost the worker several MiB for nothing.
@cache
def _pipeline_supported() -> bool:
    import psycopg

    return psycopg.Pipeline.is_supported()


@cache
def _idle_status() -> Any:
    from psycopg.pq import TransactionStatus

    return TransactionStatus.IDLE


_SELECT_RUN = _Prepared(select(_r).where(_r.c.id == bindparam("b_id")))
_SELECT_RUN_BY_KEY = _Prepared(select(_r).where(_r.c.project_id == bindparam("b_project"),
                                                _r.c.idempotency_key == bindparam("b_key")))
_SELECT_ATTEMPT = _Prepared(select(_a).where(_a.c.id == bindparam("b_id")))
_SELECT_ATTEMPTS = _Prepared(select(_a).where(_a.c.run_id == bindparam("b_run_id")).order_by(_a.c.attempt))
_HAS_DEDUPE = _Prepared(select(exists().where(and_(_e.c.run_id == bindparam("b_run_id"),
                                                   _e.c.dedupe_key == bindparam("b_key")))))
_INSERT_RUN = _Prepared(insert(_r), list(_RUN_FIELDS))
_INSERT_ATTEMPT = _Prepared(insert(_a), list(_ATTEMPT_FIELDS))
_INSERT_EVENT = _Prepared(insert(_e), _EVENT_COLUMNS)
_UPDATE_RUN = _Prepared(update(_r).where(_r.c.id == bindparam("b_id"), _r.c.version == bindparam("b_version")),
                        _RUN_FIELDS_NO_ID)
_UPDATE_ATTEMPT = _Prepared(update(_a).where(_a.c.id == bindparam("b_id"), _a.c.status == bindparam("b_status"),
                                             _a.c.callback_sequence == bindparam("b_sequence")),
                            _ATTEMPT_FIELDS_NO_ID)
_LIST_EVENTS = _Prepared(select(_e).where(_e.c.run_id == bindparam("b_run_id"), _e.c.sequence > bindparam("b_after"))
                         .order_by(_e.c.sequence).limit(bindparam("b_limit")))


# A cron's open Runs, newest first, each with its latest Attempt, in one statement. The predicate on status
# is the partial index's own text (schema.ACTIVE_STATUS_SQL), so PostgreSQL's planner reads only the cron's
# open Runs from ix_runs_active_by_cron instead of walking its history; SQLite's, which never has statistics
# here, is held to that index by name.
_a_latest = _a.alias("latest")
_LATEST_ATTEMPT_NO = (select(func.max(_a_latest.c.attempt)).where(_a_latest.c.run_id == _r.c.id)
                      .correlate(_r).scalar_subquery())
_ACTIVE_CANDIDATES = _Prepared(
    select(_r, *[_a.c[name].label(f"a__{name}") for name in _ATTEMPT_FIELDS])
    .select_from(_r.outerjoin(_a, and_(_a.c.run_id == _r.c.id, _a.c.attempt == _LATEST_ATTEMPT_NO)))
    .where(_r.c.legacy_cron_id == bindparam("b_cron"), text(f"runs.{ACTIVE_STATUS_SQL}"))
    .order_by(_r.c.created_at_ms.desc(), _r.c.id.desc()).limit(bindparam("b_limit")),
    sqlite_index=index_named(_r, "ix_runs_active_by_cron"))
# Whether any open Run has this owner (primary mode asks it before forwarding an end): read from the index of
# open Runs, like the candidates above, so a long closed history is never walked.
_ANY_ACTIVE_OWNED_BY = _Prepared(
    select(exists().where(text(f"runs.{ACTIVE_STATUS_SQL}"), _r.c.owner == bindparam("b_owner"))),
    sqlite_index=index_named(_r, "ix_runs_active_by_cron"))
# ON CONFLICT DO NOTHING: concurrent first runs of one revision must not fail each other.
_INSERT_SNAPSHOT_PG = _Prepared(postgresql_insert(task_snapshots_table).on_conflict_do_nothing(
    index_elements=["task_revision"]), [c.name for c in task_snapshots_table.columns])
_INSERT_SNAPSHOT_SQLITE = _Prepared(sqlite_insert(task_snapshots_table).on_conflict_do_nothing(
    index_elements=["task_revision"]), [c.name for c in task_snapshots_table.columns])


def _latest_attempt_from_row(row: Mapping[str, Any]) -> RunAttempt | None:
    if row["a__id"] is None:
        return None
    return attempt_from_row({name: row[f"a__{name}"] for name in _ATTEMPT_FIELDS})


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
    values = {name: getattr(run, name) for name in _RUN_FIELDS}
    values["status"] = run.status.value
    return values


def _attempt_values(attempt: RunAttempt) -> dict[str, Any]:
    values = {name: getattr(attempt, name) for name in _ATTEMPT_FIELDS}
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
            statements.append((_INSERT_EVENT, [_event_values(e) for e in change.events]))
        try:
            results = _execute_all(self._conn, statements)
        except IntegrityError as exc:
            dedupe = next((e.dedupe_key for e in change.events if e.dedupe_key), None)
            raise translate_integrity_error(
                exc, run_id=run.id, dedupe_key=dedupe, project_id=run.project_id,
                idempotency_key=run.idempotency_key if change.expected_version is None else None,
                expected_version=change.expected_version) from exc
        # Any miss rolls the whole transaction back, events included (the unit of work owns it).
        if change.expected_version is not None and results[0].rowcount != 1:
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
        statements: list[tuple[_Prepared, Params | list[Params]]] = [
            (_INSERT_RUN, [_run_values(c.run) for c in changes])]
        attempts = [_attempt_values(w.attempt) for c in changes for w in c.attempt_writes]
        if attempts:
            statements.append((_INSERT_ATTEMPT, attempts))
        events = [_event_values(e) for c in changes for e in c.events]
        if events:
            statements.append((_INSERT_EVENT, events))
        try:
            _execute_all(self._conn, statements)
        except IntegrityError as exc:
            # Which row it was, neither store's message says reliably: the first Run with a key stands for it.
            first = next((c.run for c in changes if c.run.idempotency_key is not None), changes[0].run)
            dedupe = next((e.dedupe_key for c in changes for e in c.events if e.dedupe_key), None)
            raise translate_integrity_error(exc, run_id=first.id, dedupe_key=dedupe, project_id=first.project_id,
                                            idempotency_key=first.idempotency_key, expected_version=None) from exc

    @staticmethod
    def _run_write(run: Run, expected_version: int | None) -> tuple[_Prepared, Params]:
        values = _run_values(run)
        if expected_version is None:
            return _INSERT_RUN, values
        del values["id"]
        values.update(b_id=run.id, b_version=expected_version)
        return _UPDATE_RUN, values

    @staticmethod
    def _attempt_write(write: AttemptWrite) -> tuple[_Prepared, Params]:
        values = _attempt_values(write.attempt)
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
        prepared = _INSERT_SNAPSHOT_PG if self._conn.dialect.name == "postgresql" else _INSERT_SNAPSHOT_SQLITE
        prepared.execute(self._conn, asdict(snapshot))

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
