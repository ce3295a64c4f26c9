"""What `ql-bridge demo` shows of the store it filled: every Run counted by origin and status, events by type,
and the mismatch rows. Whole-table counts, for the demo's small throwaway store only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Engine, func, select

from bridge.storage.engine import READ_ONLY
from bridge.storage.schema import mismatches_table, run_events_table, runs_table


@dataclass(frozen=True)
class DemoTally:
    """The demo store's rows, counted."""

    runs: Mapping[str | None, Mapping[str, int]]  # origin (None: not known) → status → Runs
    events: Mapping[str, int]  # event type → events
    mismatches: int


def tally(engine: Engine) -> DemoTally:
    """Counts of the whole store in one read-only transaction (never the SQLite write lock)."""
    origin, status = runs_table.c.origin, runs_table.c.status
    with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
        runs: dict[str | None, dict[str, int]] = {}
        for name, state, count in conn.execute(select(origin, status, func.count()).group_by(origin, status)):
            runs.setdefault(name, {})[state] = int(count)
        events = {kind: int(count) for kind, count in conn.execute(
            select(run_events_table.c.type, func.count()).group_by(run_events_table.c.type))}
        mismatches = int(conn.execute(select(func.count()).select_from(mismatches_table)).scalar_one())
    return DemoTally(runs, events, mismatches)
