"""SqlOutbox: the projection outbox, the Attempt -> 2.x instance mapping and the facts the projector reads.

SQLAlchemy Core on SQLite and PostgreSQL alike; every method is one short transaction. Reads touch only
bridge-owned Runs (owner = 'bridge') and are bounded: the newest rows per status come from the partial
index of bridge-owned Runs (legacy_cron_id, status, created_at_ms), never a scan of a cron's history.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.domain.model import RUN_ACTIVE, RUN_TERMINAL
from bridge.service.outbox import Applied, CronFacts, OutboxRow, RowInputs, RunFacts
from bridge.storage.engine import READ_ONLY
from bridge.storage.errors import is_sqlite_busy
from bridge.storage.schema import (
    BRIDGE_OWNED_SQL,
    index_named,
    job_leases_table,
    legacy_instance_map_table,
    projection_outbox_table,
    run_attempts_table,
    runs_table,
)
from bridge.storage.statements import CompiledStatement

ACTIVE_LIMIT = 64  # docs/run-state.md#correlating-callbacks: bounded lookups
RECENT_LIMIT = 64
STATES = ("pending", "applied", "parked")
_LEASE = "projector"
T = TypeVar("T")
_o, _r, _a, _m = projection_outbox_table, runs_table, run_attempts_table, legacy_instance_map_table


_ROW_FIELDS = tuple(f.name for f in fields(OutboxRow))


def _row(mapping: Any) -> OutboxRow:
    return OutboxRow(**{name: mapping[name] for name in _ROW_FIELDS})


def _facts(run: Any, attempt: Any | None) -> RunFacts:
    a = attempt or {}
    return RunFacts(
        run_id=run["id"], cron_id=int(run["legacy_cron_id"]), status=run["status"],
        created_at_ms=run["created_at_ms"], started_at_ms=run["started_at_ms"],
        finished_at_ms=run["finished_at_ms"], duration_ms=run["duration_ms"],
        attempt_id=a.get("id"), attempt_status=a.get("status"), pid=a.get("pid"),
        legacy_log_path=a.get("legacy_log_path"), exit_code=a.get("exit_code"),
        attempt_started_at_ms=a.get("started_at_ms"), attempt_finished_at_ms=a.get("finished_at_ms"),
    )


_RUN_COLUMNS = [_r.c[name] for name in ("id", "legacy_cron_id", "status", "created_at_ms", "started_at_ms",
                                         "finished_at_ms", "duration_ms")]


def _newest_statement(statuses: Iterable[Any], limit: int) -> CompiledStatement:
    """The newest bridge-owned Runs of ``:cron_id`` in these statuses: one leg per status, each a range scan
    of ix_runs_bridge_owned_by_cron with its own LIMIT, then the newest of all legs. The owner predicate is
    the index's own literal text: with a bind, neither planner could use the partial index, and a cron
    just promoted would walk its whole shadow history for each leg. Built once: constructing a union of
    subqueries costs more than running it. SQLite, which never has statistics here, is held to the index by
    name (``pin_sqlite_index``): without them it took ix_runs_legacy_cron_status and filtered the owner row
    by row."""
    legs = [select(*_RUN_COLUMNS).where(_r.c.legacy_cron_id == bindparam("cron_id"), _r.c.status == status.value,
                                        text(f"runs.{BRIDGE_OWNED_SQL}"))
            .order_by(_r.c.created_at_ms.desc(), _r.c.id.desc()).limit(limit).subquery()
            for status in sorted(statuses)]
    both = union_all(*[select(leg) for leg in legs]).subquery()
    return CompiledStatement(select(both).order_by(both.c.created_at_ms.desc(), both.c.id.desc()).limit(limit),
                             sqlite_index=index_named(_r, "ix_runs_bridge_owned_by_cron"))


_NEWEST_ACTIVE = _newest_statement(RUN_ACTIVE, ACTIVE_LIMIT)
_NEWEST_TERMINAL = _newest_statement(RUN_TERMINAL, RECENT_LIMIT)


def _cron_facts(conn: Connection, cron_id: int) -> CronFacts:
    active = _NEWEST_ACTIVE.execute(conn, {"cron_id": cron_id}).rows
    recent = _NEWEST_TERMINAL.execute(conn, {"cron_id": cron_id}).rows
    started = [r for r in (*active, *recent) if r["started_at_ms"] is not None]
    latest = max(started, key=lambda r: (r["started_at_ms"], r["created_at_ms"], r["id"]), default=None)
    latest_terminal = max(recent, default=None,
                          key=lambda r: (r["finished_at_ms"] or r["created_at_ms"], r["created_at_ms"], r["id"]))
    # Attempts only of the Runs the projection reads: the active ones, the latest started, the latest ended.
    chosen = [r for r in (latest, latest_terminal) if r is not None]
    attempts = _latest_attempts(conn, list({r["id"]: None for r in (*active, *chosen)}))

    def facts(run: dict[str, Any] | None) -> RunFacts | None:
        return None if run is None else _facts(run, attempts.get(run["id"]))

    return [_facts(r, attempts.get(r["id"])) for r in active], facts(latest), facts(latest_terminal)


_ATTEMPTS_OF_RUNS = select(_a).where(_a.c.run_id.in_(bindparam("run_ids", expanding=True)))
_RUNS_BY_ID = select(*_RUN_COLUMNS).where(_r.c.id.in_(bindparam("ids", expanding=True)))
_ATTEMPTS_BY_ID = select(_a).where(_a.c.id.in_(bindparam("ids", expanding=True)))
_MAPPED = select(_m.c.attempt_id, _m.c.legacy_instance_id).where(_m.c.attempt_id.in_(bindparam("ids", expanding=True)))


def _latest_attempts(conn: Connection, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    if not run_ids:
        return latest
    for m in conn.execute(_ATTEMPTS_OF_RUNS, {"run_ids": run_ids}).mappings():
        known = latest.get(m["run_id"])
        if known is None or m["attempt"] > known["attempt"]:
            latest[m["run_id"]] = dict(m)
    return latest


def _attempt_facts(conn: Connection, rows: Sequence[OutboxRow]) -> dict[str, RunFacts]:
    """For each row with an Attempt, its Run with that Attempt, by attempt id; three statements for all rows.
    A row whose Run or Attempt is gone (or whose Attempt is another Run's) has no entry."""
    named = [row for row in rows if row.attempt_id is not None]
    if not named:
        return {}
    runs = {m["id"]: dict(m) for m in conn.execute(_RUNS_BY_ID, {"ids": list({r.run_id for r in named})}).mappings()}
    attempts = {m["id"]: dict(m) for m in conn.execute(_ATTEMPTS_BY_ID,
                                                       {"ids": list({r.attempt_id for r in named})}).mappings()}
    found: dict[str, RunFacts] = {}
    for row in named:
        run, attempt = runs.get(row.run_id), attempts.get(row.attempt_id or "")
        if run is not None and run["legacy_cron_id"] is not None and attempt is not None \
                and attempt["run_id"] == row.run_id:
            found[row.attempt_id or ""] = _facts(run, attempt)
    return found


def _instance_ids(conn: Connection, attempt_ids: list[str]) -> dict[str, int]:
    if not attempt_ids:
        return {}
    found = conn.execute(_MAPPED, {"ids": attempt_ids}).mappings()
    return {m["attempt_id"]: int(m["legacy_instance_id"]) for m in found}


def _run_facts(conn: Connection, run_id: str, attempt_id: str | None) -> RunFacts | None:
    run = conn.execute(select(*_RUN_COLUMNS).where(_r.c.id == run_id)).mappings().first()
    if run is None or run["legacy_cron_id"] is None:
        return None
    if attempt_id is None:
        return _facts(run, _latest_attempts(conn, [run_id]).get(run_id))
    attempt = conn.execute(select(_a).where(_a.c.id == attempt_id, _a.c.run_id == run_id)).mappings().first()
    return _facts(run, attempt) if attempt is not None else None


def _instance_id(conn: Connection, attempt_id: str) -> int | None:
    found = conn.execute(select(_m.c.legacy_instance_id).where(_m.c.attempt_id == attempt_id)).scalar()
    return int(found) if found is not None else None


def _remember(conn: Connection, attempt_id: str, instance_id: int, cron_id: int, at_ms: int) -> None:
    known = _instance_id(conn, attempt_id)
    if known == instance_id:
        return
    owner = conn.execute(select(_m.c.attempt_id).where(_m.c.legacy_instance_id == instance_id)).scalar()
    if owner is not None:
        # Only possible if two Attempts share cron, pid, log_path and start second (adoption cannot tell
        # them apart): the row stays with the Attempt that has it, and this batch is not stalled for it.
        return
    if known is None:
        conn.execute(insert(_m).values(attempt_id=attempt_id, legacy_instance_id=instance_id,
                                       legacy_cron_id=cron_id, created_at_ms=at_ms))
    else:
        conn.execute(update(_m).where(_m.c.attempt_id == attempt_id).values(legacy_instance_id=instance_id))


class SqlOutbox:
    """The projector's OutboxPort over one engine."""

    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, busy_attempts: int = 4) -> None:
        self.engine = engine
        self._budget_s = busy_budget_ms / 1000
        self._attempts = max(1, busy_attempts)

    def _write(self, work: Callable[[Connection], T]) -> T:
        """One write transaction, run again (bounded, jittered) while SQLite reports the store locked.

        Marking rows applied must not fail just because a callback holds the store's write lock for a
        moment: a failed ``complete`` means the whole batch is written to 2.x again on the next pass."""
        deadline = time.monotonic() + self._budget_s
        for attempt in range(1, self._attempts + 1):
            try:
                with self.engine.begin() as conn:
                    return work(conn)
            except DBAPIError as exc:
                remaining = deadline - time.monotonic()
                if not is_sqlite_busy(exc) or attempt == self._attempts or remaining <= 0:
                    raise
                time.sleep(min(remaining, random.uniform(0, self._budget_s / self._attempts)))
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                yield conn

    # -- what to apply -------------------------------------------------------------------------------

    def due(self, now_ms: int, limit: int) -> list[OutboxRow]:
        """Pending rows due by ``now_ms``, only the oldest pending row of each cron, ordered by id.

        A later row of a cron waits while an older one is pending (in backoff, say), so each cron's rows
        land strictly in order. Parked rows do not block: the projection is derived from current facts.
        """
        older = _o.alias("older")
        oldest_pending = (select(func.min(older.c.id))
                          .where(older.c.legacy_cron_id == _o.c.legacy_cron_id, older.c.state == "pending")
                          .scalar_subquery())
        stmt = (select(_o).where(_o.c.state == "pending", _o.c.next_attempt_at_ms <= now_ms,
                                 _o.c.id == oldest_pending)
                .order_by(_o.c.id).limit(limit))
        with self._read() as conn:
            return [_row(m) for m in conn.execute(stmt).mappings()]

    def due_by_cron(self, now_ms: int, crons: int, limit: int) -> list[OutboxRow]:
        """Every pending row (by id, at most ``limit``) of the first ``crons`` crons, by their oldest pending
        row, whose oldest pending row is due by ``now_ms``.

        The cron is the unit of ordering: while its oldest pending row waits out a backoff, none of its rows
        is due; once it is, all of them are, so the projector writes the cron's latest state once. Walks
        ix_projection_outbox_cron_state for each cron."""
        older = _o.alias("older")
        oldest_pending = (select(func.min(older.c.id))
                          .where(older.c.legacy_cron_id == _o.c.legacy_cron_id, older.c.state == "pending")
                          .scalar_subquery())
        due_crons = (select(_o.c.legacy_cron_id).where(_o.c.state == "pending", _o.c.next_attempt_at_ms <= now_ms,
                                                       _o.c.id == oldest_pending)
                     .order_by(_o.c.id).limit(crons))
        stmt = (select(_o).where(_o.c.state == "pending", _o.c.legacy_cron_id.in_(due_crons.scalar_subquery()))
                .order_by(_o.c.id).limit(limit))
        with self._read() as conn:
            return [_row(m) for m in conn.execute(stmt).mappings()]

    def facts_for_cron(self, cron_id: int) -> CronFacts:
        """(active Runs newest first, latest started Run, latest terminal Run), bridge-owned only."""
        with self._read() as conn:
            return _cron_facts(conn, cron_id)

    def run_facts(self, run_id: str, attempt_id: str | None) -> RunFacts | None:
        """The Run with the named Attempt (or its latest); None when either does not exist."""
        with self._read() as conn:
            return _run_facts(conn, run_id, attempt_id)

    def instance_id(self, attempt_id: str) -> int | None:
        """The 2.x RunningInstances row id mapped to the Attempt, or None."""
        with self._read() as conn:
            return _instance_id(conn, attempt_id)

    def inputs(self, rows: Sequence[OutboxRow]) -> list[RowInputs]:
        """run_facts, facts_for_cron and instance_id for each row, from one consistent read transaction: each
        cron's facts once, and the rows' Runs, Attempts and mappings in one statement each."""
        with self._read() as conn:
            crons = {cron_id: _cron_facts(conn, cron_id) for cron_id in dict.fromkeys(r.legacy_cron_id for r in rows)}
            facts = _attempt_facts(conn, rows)
            mapped = _instance_ids(conn, list({r.attempt_id: None for r in rows if r.attempt_id is not None}))
        return [RowInputs(facts=facts.get(row.attempt_id) if row.attempt_id is not None else None,
                          cron=crons[row.legacy_cron_id],
                          instance_id=mapped.get(row.attempt_id) if row.attempt_id is not None else None)
                for row in rows]

    # -- the instance mapping ------------------------------------------------------------------------

    def remember_instance(self, attempt_id: str, instance_id: int, cron_id: int, at_ms: int) -> None:
        """Map the Attempt to its 2.x row; a no-op when already mapped there (repointed if that row vanished)."""
        self._write(lambda conn: _remember(conn, attempt_id, instance_id, cron_id, at_ms))

    def complete(self, done: Sequence[Applied], at_ms: int) -> None:
        """After 2.x committed: remember each mapping and mark each row applied, in one transaction."""
        def work(conn: Connection) -> None:
            for item in done:
                if item.attempt_id is not None and item.instance_id is not None:
                    _remember(conn, item.attempt_id, item.instance_id, item.cron_id, at_ms)
            conn.execute(update(_o).where(_o.c.id.in_([item.row_id for item in done]), _o.c.state == "pending")
                         .values(state="applied", applied_at_ms=at_ms, last_error=None))

        self._write(work)

    # -- row states ----------------------------------------------------------------------------------

    def _set(self, row_id: int, **values: Any) -> None:
        self._write(lambda conn: conn.execute(update(_o).where(_o.c.id == row_id, _o.c.state == "pending")
                                              .values(**values)))

    def mark_applied(self, row_id: int, at_ms: int) -> None:
        self._set(row_id, state="applied", applied_at_ms=at_ms, last_error=None)

    def mark_retry(self, row_id: int, attempts: int, next_at_ms: int, error_code: str) -> None:
        self._set(row_id, attempts=attempts, next_attempt_at_ms=next_at_ms, last_error=error_code[:200])

    def mark_parked(self, row_id: int, attempts: int, error_code: str, at_ms: int) -> None:
        # next_attempt_at_ms keeps when it was parked; requeue_parked resets it.
        self._set(row_id, state="parked", attempts=attempts, next_attempt_at_ms=at_ms, last_error=error_code[:200])

    def requeue_parked(self, now_ms: int) -> int:
        """Give every parked row a fresh retry budget, due now; returns how many."""
        return self._write(lambda conn: conn.execute(
            update(_o).where(_o.c.state == "parked").values(state="pending", attempts=0, next_attempt_at_ms=now_ms)
        ).rowcount)

    def prune_applied(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` rows applied before ``before_ms``: 2.x has them and nothing reads them again.

        Walks ix_projection_outbox_state_due from the oldest due time (a row is applied at or after it is
        due), so each call reads about as many rows as it deletes, however large the table."""
        oldest = (select(_o.c.id).where(_o.c.state == "applied", _o.c.next_attempt_at_ms < before_ms,
                                        _o.c.applied_at_ms < before_ms)
                  .order_by(_o.c.next_attempt_at_ms).limit(limit))

        def work(conn: Connection) -> int:
            ids = [row[0] for row in conn.execute(oldest)]
            return conn.execute(delete(_o).where(_o.c.id.in_(ids))).rowcount if ids else 0

        return self._write(work)

    # -- for reports and `bridge status` -------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute(select(_o.c.state, func.count()).group_by(_o.c.state)).all()
        found = {state: 0 for state in STATES}
        found.update({state: int(n) for state, n in rows})
        return found

    def parked(self, limit: int = 20) -> list[OutboxRow]:
        stmt = select(_o).where(_o.c.state == "parked").order_by(_o.c.id).limit(limit)
        with self._read() as conn:
            return [_row(m) for m in conn.execute(stmt).mappings()]

    def oldest_pending_created_at_ms(self) -> int | None:
        with self._read() as conn:
            return conn.execute(select(func.min(_o.c.created_at_ms)).where(_o.c.state == "pending")).scalar()

    # -- one projector at a time ---------------------------------------------------------------------

    def hold_lease(self, holder: str, now_ms: int, lease_ms: int) -> bool:
        """Take or extend the projector lease; False while another live holder has it."""
        t = job_leases_table
        values = {"holder": holder, "expires_at_ms": now_ms + lease_ms}
        with self.engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: one taker at a time
            taken = conn.execute(update(t).where(t.c.name == _LEASE, or_(t.c.holder == holder,
                                                                         t.c.expires_at_ms <= now_ms))
                                 .values(**values)).rowcount
            if taken:
                return True
            if conn.execute(select(t.c.name).where(t.c.name == _LEASE)).first() is not None:
                return False
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(t).values(name=_LEASE, **values))
        except IntegrityError:  # another process inserted it first
            return False
        return True

    def release_lease(self, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(job_leases_table).where(job_leases_table.c.name == _LEASE,
                                                        job_leases_table.c.holder == holder))
