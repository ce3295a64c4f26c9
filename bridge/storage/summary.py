"""Read-only summary of the bridge store for `ql-bridge status`: schema revision and Run counts that do not walk
the tables: kept counts on SQLite, the planner's estimates on PostgreSQL (each labelled as one), and every row
counted only where neither exists (a SQLite store behind revision 0012, PostgreSQL tables never analyzed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, inspect, select, text
from sqlalchemy.exc import DBAPIError

from bridge.domain.model import RUN_ACTIVE, Origin, RunStatus
from bridge.storage.errors import translate_operational_error
from bridge.storage.migrate import refuse_newer_schema, schema_state
from bridge.storage.schema import run_counts_table, run_events_table, runs_table

UNKNOWN_ORIGIN = "unknown"
_OPEN_STATUSES = frozenset(s.value for s in RUN_ACTIVE)
_ALL_STATUSES = frozenset(s.value for s in RunStatus)
_ALL_ORIGINS = frozenset(o.value for o in Origin)


class Estimate(int):
    """A count the store estimated instead of counting; it says so wherever it is shown."""

    def __str__(self) -> str:
        return f"≈ {int(self)} (estimate)"


def estimate(value: float) -> Estimate:
    """``value`` to three significant digits, so it does not read as an exact count."""
    whole = max(0, round(value))
    digits = len(str(whole))
    step = 10 ** max(0, digits - 3)
    return Estimate(round(whole / step) * step)


@dataclass(frozen=True)
class StoreSummary:
    backend: str
    revision: str | None
    head: str
    runs_by_status: dict[str, int] = field(default_factory=dict)
    runs_by_origin: dict[str, int] = field(default_factory=dict)
    events: int = 0
    counted: str = "counted"  # "kept" (SQLite's counters), "estimated" (PostgreSQL's planner), or "counted"

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


@dataclass(frozen=True)
class _Counts:
    by_status: dict[str, int]
    by_origin: dict[str, int]
    events: int
    counted: str


def summarize(engine: Engine) -> StoreSummary:
    """Raises StoreUnavailableError when the store cannot be reached, and SchemaMismatchError when it is newer
    than this code (its tables may mean something else now: nothing is read from them)."""
    state = schema_state(engine)
    refuse_newer_schema(engine, state)
    head, revision = state.head, state.revision
    try:
        tables = set(inspect(engine).get_table_names()) if revision is not None else set()
        if "runs" not in tables:
            return StoreSummary(engine.dialect.name, revision, head)
        with engine.connect() as conn:
            if run_counts_table.name in tables:
                counts = _kept(conn)
            elif engine.dialect.name == "postgresql":
                counts = _estimated(conn) or _counted(conn)
            else:
                counts = _counted(conn)
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc
    return StoreSummary(engine.dialect.name, revision, head, counts.by_status, counts.by_origin, counts.events,
                        counts.counted)


def _kept(conn: Connection) -> _Counts:
    """SQLite from revision 0012: the counters its triggers keep with every write of a Run."""
    c = run_counts_table
    by_status: dict[str, int] = {}
    by_origin: dict[str, int] = {}
    events = 0
    for status, origin, runs, group_events in conn.execute(select(c.c.status, c.c.origin, c.c.runs, c.c.events)):
        events += group_events
        if runs:
            by_status[status] = by_status.get(status, 0) + runs
            by_origin[origin or UNKNOWN_ORIGIN] = by_origin.get(origin or UNKNOWN_ORIGIN, 0) + runs
    return _Counts(by_status, by_origin, events, "kept")


# The planner's row counts (ANALYZE, VACUUM and autovacuum keep them); -1 for a table never analyzed.
_PG_ROWS = text("SELECT coalesce(max(reltuples) FILTER (WHERE oid = to_regclass('runs')), -1), "
                "coalesce(max(reltuples) FILTER (WHERE oid = to_regclass('run_events')), -1) FROM pg_class "
                "WHERE oid IN (to_regclass('runs'), to_regclass('run_events'))")
# The most common values of a column and their shares in ANALYZE's sample, for the runs table on the search path.
_PG_COMMON = text("SELECT s.attname, s.null_frac, s.most_common_vals::text::text[], s.most_common_freqs "
                  "FROM pg_stats s JOIN pg_class c ON c.oid = to_regclass('runs') "
                  "JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE s.schemaname = n.nspname AND s.tablename = 'runs' AND s.attname IN ('status', 'origin')")
_r = runs_table
# Counted exactly, from the index on each column: values the statistics call rare, and open Runs.
_BY_STATUS_IN = select(_r.c.status, func.count()).where(_r.c.status.in_(bindparam("values", expanding=True))) \
    .group_by(_r.c.status)
_BY_ORIGIN_IN = select(_r.c.origin, func.count()).where(_r.c.origin.in_(bindparam("values", expanding=True))) \
    .group_by(_r.c.origin)
_NO_ORIGIN = select(func.count()).where(_r.c.origin.is_(None))


def _estimated(conn: Connection) -> _Counts | None:
    """PostgreSQL: its planner's estimates as of the last ANALYZE for the common values; open Runs and the values
    the statistics call rare (seen at most once in ANALYZE's sample, so few) counted exactly from their index.
    None for tables never analyzed."""
    runs, events = conn.execute(_PG_ROWS).one()
    common = {name: (null_frac, dict(zip(values or [], freqs or [], strict=True)))
              for name, null_frac, values, freqs in conn.execute(_PG_COMMON)}
    if runs < 0 or events < 0 or "status" not in common or "origin" not in common:
        return None  # never analyzed: a new, small store (autovacuum analyzes after 50 rows and 10 % more)
    _none, shares = common["status"]
    exact = sorted(_OPEN_STATUSES | (_ALL_STATUSES - set(shares)))
    by_status: dict[str, int] = {s: estimate(share * runs) for s, share in shares.items() if s not in exact}
    by_status |= {s: int(n) for s, n in conn.execute(_BY_STATUS_IN, {"values": exact})}
    null_frac, shares = common["origin"]
    by_origin: dict[str, int] = {o: estimate(share * runs) for o, share in shares.items()}
    rare = sorted(_ALL_ORIGINS - set(shares))
    by_origin |= {o: int(n) for o, n in conn.execute(_BY_ORIGIN_IN, {"values": rare})}
    by_origin[UNKNOWN_ORIGIN] = estimate(null_frac * runs) if null_frac else conn.execute(_NO_ORIGIN).scalar_one()
    return _Counts({k: v for k, v in by_status.items() if v}, {k: v for k, v in by_origin.items() if v},
                   estimate(events), "estimated")


def _counted(conn: Connection) -> _Counts:
    """Every row counted: a SQLite store behind revision 0012, or PostgreSQL tables never analyzed."""
    status = runs_table.c.status
    by_status = {s: int(n) for s, n in conn.execute(select(status, func.count()).group_by(status))}
    origin = func.coalesce(runs_table.c.origin, UNKNOWN_ORIGIN)
    by_origin = {o: int(n) for o, n in conn.execute(select(origin, func.count()).group_by(origin))}
    events: Any = conn.execute(select(func.count()).select_from(run_events_table)).scalar_one()
    return _Counts(by_status, by_origin, int(events), "counted")
