"""Counts behind the seam check (projections/seam.py): per origin, open `missing` mismatches and the
shadow Runs recorded in the same recent window. Imported history is left out: it never came through
the bridge."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import IMPORTED_MODE
from bridge.service.seam import OriginCoverage
from bridge.storage.engine import READ_ONLY
from bridge.storage.schema import mismatches_table, runs_table


def recent_coverage(engine: Engine, since_ms: int) -> list[OriginCoverage]:
    m, r = mismatches_table, runs_table
    missing_q = (select(m.c.origin, func.count())
                 .where(m.c.kind == MismatchKind.MISSING.value, m.c.resolved_at_ms.is_(None),
                        m.c.last_seen_ms >= since_ms, m.c.origin.is_not(None))
                 .group_by(m.c.origin))
    # Grouped by an expression, not the column: SQLite would otherwise walk all of ix_runs_origin_created to
    # group, where this reads only the window's range of ix_runs_created_id.
    origin = func.coalesce(r.c.origin, "")
    recorded_q = (select(origin, func.count()).where(r.c.created_at_ms >= since_ms, r.c.origin.is_not(None),
                                                     r.c.mode != IMPORTED_MODE)
                  .group_by(origin))
    with engine.connect().execution_options(**{READ_ONLY: True}) as conn:  # never the SQLite write lock
        missing = {origin: count for origin, count in conn.execute(missing_q)}
        recorded = {origin: count for origin, count in conn.execute(recorded_q)}
    return [OriginCoverage(origin, int(missing.get(origin, 0)), int(recorded.get(origin, 0)))
            for origin in sorted(set(missing) | set(recorded))]
