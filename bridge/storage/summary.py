"""Read-only summary of the bridge store for `ql-bridge status`: schema revision and Run counts that do not walk
the tables. A store of up to COUNT_EVERY_ROW_UP_TO Runs is counted; a larger one is estimated (PostgreSQL: its
planner's statistics; SQLite, whose planner keeps none per value: a sample of Runs by row id), each estimate
labelled as one, while open Runs and values the statistics call rare are counted from their index."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, bindparam, func, inspect, select, text
from sqlalchemy.exc import DBAPIError

from bridge.domain.model import RUN_ACTIVE, Origin, RunStatus
from bridge.storage.engine import READ_ONLY
from bridge.storage.errors import translate_operational_error
from bridge.storage.migrate import refuse_newer_schema, schema_state
from bridge.storage.schema import run_events_table, runs_table

UNKNOWN_ORIGIN = "unknown"
COUNT_EVERY_ROW_UP_TO = 20_000  # Runs; counting them all costs a few milliseconds
SAMPLE_SIZE = 1_000  # Runs read by row id for SQLite's estimate
RARE_BELOW = 10  # sampled Runs under which a value is counted from its index instead (few, by the sample)
_OPEN = frozenset(s.value for s in RUN_ACTIVE)
_STATUSES = frozenset(s.value for s in RunStatus)
_ORIGINS = frozenset(o.value for o in Origin)


class Estimate(int):
    """A count the store estimated instead of counting; it says so wherever it is shown."""

    def __str__(self) -> str:
        return f"≈ {int(self)} (estimate)"


def estimate(value: float) -> Estimate:
    """``value`` to three significant digits, so it does not read as an exact count."""
    whole = max(0, round(value))
    step = 10 ** max(0, len(str(whole)) - 3)
    return Estimate(round(whole / step) * step)


@dataclass(frozen=True)
class StoreSummary:
    backend: str
    revision: str | None
    head: str
    runs_by_status: dict[str, int] = field(default_factory=dict)
    runs_by_origin: dict[str, int] = field(default_factory=dict)
    events: int = 0
    counted: str = "counted"  # or "estimated": then the large counts are Estimates

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


@dataclass(frozen=True)
class _Counts:
    by_status: dict[str, int]
    by_origin: dict[str, int]
    events: int
    counted: str = "counted"


def summarize(engine: Engine) -> StoreSummary:
    """Raises StoreUnavailableError when the store cannot be reached, and SchemaMismatchError when it is newer
    than this code (its tables may mean something else now: nothing is read from them)."""
    state = schema_state(engine)
    refuse_newer_schema(engine, state)
    head, revision = state.head, state.revision
    try:
        if revision is None or "runs" not in inspect(engine).get_table_names():
            return StoreSummary(engine.dialect.name, revision, head)
        # Read-only (a plain BEGIN on SQLite): counting must never hold the write lock a serving bridge writes under.
        with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            postgres = engine.dialect.name == "postgresql"
            counts = (_estimated(conn) if postgres else _sampled(conn)) or _counted(conn)
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc
    return StoreSummary(engine.dialect.name, revision, head, counts.by_status, counts.by_origin, counts.events,
                        counts.counted)


_r = runs_table
# Counted exactly, from the index on each column (and open Runs from the partial index's rows).
_BY_STATUS_IN = select(_r.c.status, func.count()).where(_r.c.status.in_(bindparam("values", expanding=True))) \
    .group_by(_r.c.status)
_BY_ORIGIN_IN = select(_r.c.origin, func.count()).where(_r.c.origin.in_(bindparam("values", expanding=True))) \
    .group_by(_r.c.origin)
_NO_ORIGIN = select(func.count()).where(_r.c.origin.is_(None))


def _with_exact(conn: Connection, runs: float, status_shares: dict[str, float], origin_shares: dict[str, float],
                no_origin_share: float | None) -> tuple[dict[str, int], dict[str, int]]:
    """Estimates (share × Runs) for the values given a share; open statuses and every other known value counted
    from its index. ``no_origin_share`` None: Runs without an origin are counted too."""
    exact = sorted(_OPEN | (_STATUSES - set(status_shares)))
    by_status: dict[str, int] = {s: estimate(share * runs) for s, share in status_shares.items() if s not in _OPEN}
    by_status |= {s: int(n) for s, n in conn.execute(_BY_STATUS_IN, {"values": exact})}
    by_origin: dict[str, int] = {o: estimate(share * runs) for o, share in origin_shares.items()}
    by_origin |= {o: int(n) for o, n in conn.execute(_BY_ORIGIN_IN, {"values": sorted(_ORIGINS - set(origin_shares))})}
    by_origin[UNKNOWN_ORIGIN] = (conn.execute(_NO_ORIGIN).scalar_one() if no_origin_share is None
                                 else estimate(no_origin_share * runs))
    return {k: v for k, v in by_status.items() if v}, {k: v for k, v in by_origin.items() if v}


# The planner's row counts (ANALYZE, VACUUM and autovacuum keep them); -1 for a table never analyzed.
_PG_ROWS = text("SELECT coalesce(max(reltuples) FILTER (WHERE oid = to_regclass('runs')), -1), "
                "coalesce(max(reltuples) FILTER (WHERE oid = to_regclass('run_events')), -1) FROM pg_class "
                "WHERE oid IN (to_regclass('runs'), to_regclass('run_events'))")
# The most common values of a column and their shares in ANALYZE's sample, for the runs table on the search path.
_PG_COMMON = text("SELECT s.attname, s.null_frac, s.most_common_vals::text::text[], s.most_common_freqs "
                  "FROM pg_stats s JOIN pg_class c ON c.oid = to_regclass('runs') "
                  "JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE s.schemaname = n.nspname AND s.tablename = 'runs' AND s.attname IN ('status', 'origin')")


def _estimated(conn: Connection) -> _Counts | None:
    """PostgreSQL: its planner's statistics as of the last ANALYZE for the common values; the values missing from
    them (seen at most once in ANALYZE's sample, so few) and open Runs counted. None for a small store, or tables
    never analyzed (autovacuum analyzes a table after 50 rows and 10 % more)."""
    runs, events = conn.execute(_PG_ROWS).one()
    common = {name: (null_frac, dict(zip(values or [], freqs or [], strict=True)))
              for name, null_frac, values, freqs in conn.execute(_PG_COMMON)}
    if runs <= COUNT_EVERY_ROW_UP_TO or events < 0 or "status" not in common or "origin" not in common:
        return None
    no_origin, origin_shares = common["origin"]
    by_status, by_origin = _with_exact(conn, runs, common["status"][1], origin_shares,
                                       no_origin if no_origin else None)
    return _Counts(by_status, by_origin, estimate(events), "estimated")


_TOP_RUN = text("SELECT max(rowid) FROM runs")
_TOP_EVENT = text("SELECT max(rowid) FROM run_events")
_SAMPLE_ROWS = text("SELECT status, origin FROM runs WHERE rowid IN :ids").bindparams(
    bindparam("ids", expanding=True))


def _sampled(conn: Connection) -> _Counts | None:
    """SQLite: SAMPLE_SIZE Runs picked at random by row id (its planner keeps no statistics per value, and
    counters kept by triggers would make every Run write dearer). Row ids are handed out
    in order and Runs and events are never deleted, so the highest row id is the count, and a sampled id that
    names no row only thins the sample. None for a small store."""
    top = conn.execute(_TOP_RUN).scalar() or 0
    if top <= COUNT_EVERY_ROW_UP_TO:
        return None
    size = min(SAMPLE_SIZE, top)
    ids = random.Random(top).sample(range(1, top + 1), size)  # the same sample for the same store
    rows = conn.execute(_SAMPLE_ROWS, {"ids": ids}).all()
    if not rows:
        return None
    runs = top * len(rows) / size

    def shares(values: Counter[str]) -> dict[str, float]:
        return {value: hits / len(rows) for value, hits in values.items() if hits >= RARE_BELOW}

    status_shares = shares(Counter(status for status, _ in rows))
    origin_shares = shares(Counter(origin or "" for _, origin in rows))
    no_origin = origin_shares.pop("", None)
    by_status, by_origin = _with_exact(conn, runs, status_shares, origin_shares, no_origin)
    return _Counts(by_status, by_origin, estimate(conn.execute(_TOP_EVENT).scalar() or 0), "estimated")


def _counted(conn: Connection) -> _Counts:
    """Every row counted: a small store, or PostgreSQL tables never analyzed."""
    status = runs_table.c.status
    by_status = {s: int(n) for s, n in conn.execute(select(status, func.count()).group_by(status))}
    origin = func.coalesce(runs_table.c.origin, UNKNOWN_ORIGIN)
    by_origin = {o: int(n) for o, n in conn.execute(select(origin, func.count()).group_by(origin))}
    events = conn.execute(select(func.count()).select_from(run_events_table)).scalar_one()
    return _Counts(by_status, by_origin, int(events))
