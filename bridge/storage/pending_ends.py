"""SqlPendingEnds: the end callbacks kept while the stop-decision window runs (table ``pending_ends``).

Each call is one short transaction through its own SqlUnitOfWork on the store's engine, so on SQLite it queues
behind the callback path's writers on the same gate and shares their busy retry.

An end with no exit code (every end before v2.21 without the seam block) keeps NULL, and an end the shell's
signal trap sent says so in ``trapped`` (revision 0016).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, delete, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from bridge.service.callback_facts import CallbackFacts
from bridge.service.pending_ends import PendingEnd
from bridge.storage.schema import pending_ends_table
from bridge.storage.unit_of_work import SqlUnitOfWork, WriteOutcomes

_T = pending_ends_table
R = TypeVar("R")


class SqlPendingEnds:
    """bridge.service.shadow.PendingEndStore over SQLite or PostgreSQL."""

    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, outcomes: WriteOutcomes | None = None) -> None:
        # Each transaction hands out its bare connection: the pending ends are one table, not the Run store.
        self._uow: SqlUnitOfWork[Connection] = SqlUnitOfWork(engine, busy_budget_ms=busy_budget_ms, outcomes=outcomes,
                                                             store_factory=_connection)
        self._insert = postgresql_insert if engine.dialect.name == "postgresql" else sqlite_insert

    def add(self, end: PendingEnd) -> bool:
        facts = end.facts
        row = {"dedupe_key": end.dedupe_key, "run_id": end.run_id, "trapped": facts.trapped,
               "run_created_at_ms": end.run_created_at_ms, "legacy_cron_id": facts.cron_id, "pid": facts.pid,
               "log_ref": facts.log_ref, "started_at_ms": facts.started_at_ms, "duration_ms": facts.duration_ms,
               "exit_code": facts.exit_code,
               "received_at_ms": facts.received_at_ms, "due_at_ms": end.due_at_ms}
        stmt = self._insert(_T).values(**row).on_conflict_do_nothing(index_elements=["dedupe_key"]).returning(_T.c.id)
        return self._write(lambda conn: conn.execute(stmt).first() is not None)  # rowcount is -1 on psycopg here

    def due(self, now_ms: int, limit: int) -> list[PendingEnd]:
        stmt = select(_T).where(_T.c.due_at_ms <= now_ms).order_by(_T.c.due_at_ms, _T.c.id).limit(limit)
        return self._rows(stmt)

    def for_cron(self, cron_id: int, received_since_ms: int) -> list[PendingEnd]:
        stmt = (select(_T).where(_T.c.legacy_cron_id == cron_id, _T.c.received_at_ms >= received_since_ms)
                .order_by(_T.c.id))
        return self._rows(stmt)

    def waiting_runs(self, run_ids: Collection[str]) -> set[str]:
        if not run_ids:
            return set()
        stmt = select(_T.c.run_id).where(_T.c.run_id.in_(sorted(set(run_ids))))
        return set(self._uow.read(lambda conn: [r[0] for r in conn.execute(stmt)]))

    def postpone(self, end_id: int, due_at_ms: int) -> None:
        stmt = update(_T).where(_T.c.id == end_id).values(due_at_ms=due_at_ms, attempts=_T.c.attempts + 1)
        self._write(lambda conn: conn.execute(stmt))

    def remove(self, end_ids: Sequence[int]) -> None:
        if end_ids:
            stmt = delete(_T).where(_T.c.id.in_(list(end_ids)))
            self._write(lambda conn: conn.execute(stmt))

    def _write(self, work: Callable[[Connection], R]) -> R:
        return self._uow.write(work)

    def _rows(self, stmt: Any) -> list[PendingEnd]:
        return self._uow.read(lambda conn: [_end(dict(r._mapping)) for r in conn.execute(stmt)])


def _connection(conn: Connection) -> Connection:
    return conn


def _end(row: dict[str, Any]) -> PendingEnd:
    facts = CallbackFacts(cron_id=row["legacy_cron_id"], pid=row["pid"], log_ref=row["log_ref"],
                          started_at_ms=row["started_at_ms"], duration_ms=row["duration_ms"],
                          exit_code=row["exit_code"], received_at_ms=row["received_at_ms"],
                          trapped=bool(row["trapped"]))
    return PendingEnd(facts=facts, run_id=row["run_id"], run_created_at_ms=row["run_created_at_ms"],
                      due_at_ms=row["due_at_ms"], id=row["id"], attempts=row["attempts"])
