"""Read-only summary of the bridge store for `ql-bridge status`: schema revision and run counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.exc import DBAPIError

from bridge.storage.errors import translate_operational_error
from bridge.storage.migrate import refuse_newer_schema, schema_state
from bridge.storage.schema import run_events_table, runs_table


@dataclass(frozen=True)
class StoreSummary:
    backend: str
    revision: str | None
    head: str
    runs_by_status: dict[str, int] = field(default_factory=dict)
    runs_by_origin: dict[str, int] = field(default_factory=dict)
    events: int = 0

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


def summarize(engine: Engine) -> StoreSummary:
    """Raises StoreUnavailableError when the store cannot be reached, and SchemaMismatchError when it is newer
    than this code (its tables may mean something else now: nothing is read from them)."""
    state = schema_state(engine)
    refuse_newer_schema(engine, state)
    head, revision = state.head, state.revision
    try:
        if revision is None or "runs" not in inspect(engine).get_table_names():
            return StoreSummary(engine.dialect.name, revision, head)
        with engine.connect() as conn:
            status = runs_table.c.status
            by_status = dict(conn.execute(select(status, func.count()).group_by(status)).all())
            origin = func.coalesce(runs_table.c.origin, "unknown")
            by_origin = dict(conn.execute(select(origin, func.count()).group_by(origin)).all())
            events = conn.execute(select(func.count()).select_from(run_events_table)).scalar_one()
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc
    return StoreSummary(engine.dialect.name, revision, head, by_status, by_origin, events)
