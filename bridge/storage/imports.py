"""SqlImportStore: bridge.service.imports.ImportStore over one transaction's connection, for `import-legacy`.

The Runs are written by SqlRunStore.apply_many, i.e. through the statements and row mappers of the normal path
(bridge/storage/runs.py); this module only adds what the import alone reads and writes in the same transaction:
which keys are taken, and the import cursor in ``bridge_settings``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, Engine, insert, select, update

from bridge.domain.aggregate import ChangeSet
from bridge.service.imports import CURSOR_KEY
from bridge.service.ports import TaskSnapshot
from bridge.storage.runs import SqlRunStore
from bridge.storage.schema import bridge_settings_table, runs_table
from bridge.storage.unit_of_work import SqlUnitOfWork


class SqlImportStore:
    """ImportStore on the connection of one unit-of-work transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._runs = SqlRunStore(conn)

    def apply_many(self, changes: Sequence[ChangeSet]) -> None:
        self._runs.apply_many(changes)

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        self._runs.put_task_snapshot(snapshot)

    def existing_keys(self, project_id: str, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        r = runs_table
        stmt = select(r.c.idempotency_key).where(r.c.project_id == project_id, r.c.idempotency_key.in_(list(keys)))
        return {row[0] for row in self._conn.execute(stmt)}

    def existing_log_refs(self, project_id: str, refs: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
        wanted = set(refs)
        if not wanted:
            return set()
        r = runs_table
        stmt = (select(r.c.legacy_cron_id, r.c.log_ref)
                .where(r.c.project_id == project_id, r.c.legacy_cron_id.in_(sorted({c for c, _ in wanted})),
                       r.c.log_ref.in_(sorted({ref for _, ref in wanted}))))
        return {(row[0], row[1]) for row in self._conn.execute(stmt)} & wanted

    def import_cursor(self) -> int:
        t = bridge_settings_table
        value = self._conn.execute(select(t.c.value).where(t.c.key == CURSOR_KEY)).scalar()
        try:
            return max(int(value), 0) if value is not None else 0
        except ValueError:
            return 0  # unreadable: start over, the idempotency keys keep it safe

    def advance_import_cursor(self, last_id: int, at_ms: int) -> None:
        if last_id <= self.import_cursor():
            return
        t = bridge_settings_table
        values = {"value": str(last_id), "updated_at_ms": at_ms}
        if self._conn.execute(update(t).where(t.c.key == CURSOR_KEY).values(**values)).rowcount == 0:
            self._conn.execute(insert(t).values(key=CURSOR_KEY, **values))


def import_unit_of_work(engine: Engine, *, busy_budget_ms: int, busy_attempts: int) -> SqlUnitOfWork[SqlImportStore]:
    """bridge.service.imports.ImportUnitOfWork on ``engine``: SqlUnitOfWork's transactions (the writer gate shared
    with every unit of work on the engine, the busy retry) handing out a SqlImportStore."""
    return SqlUnitOfWork(engine, busy_budget_ms=busy_budget_ms, busy_attempts=busy_attempts,
                         store_factory=SqlImportStore)
