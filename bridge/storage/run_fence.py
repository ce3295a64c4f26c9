"""The Run fence: a change to a Run's history moves the Run's version by compare-and-set and inserts its events in
the same batch of statements. A compare-and-set that missed (another writer moved the Run first) makes the caller
raise, and its unit of work rolls the whole batch back, events included.

SqlRunStore writes the whole Run row (``update_run``); the StepRun repository, which holds only the Run's fence
(status, version, event sequence), moves the version and the event sequence alone (``advance_run``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, insert, update

from bridge.domain.events import RunEvent
from bridge.domain.model import Run
from bridge.storage.rows import RUN_FIELDS, event_values, run_values
from bridge.storage.schema import run_events_table, runs_table
from bridge.storage.statements import CompiledStatement, Statement, StatementResult

_r, _e = runs_table, run_events_table
# Bind names carry a "b_" prefix because the column names are the SET/VALUES parameters.
_UPDATE_RUN = CompiledStatement(
    update(_r).where(_r.c.id == bindparam("b_id"), _r.c.version == bindparam("b_version")),
    [f for f in RUN_FIELDS if f != "id"])
_ADVANCE_RUN = CompiledStatement(
    update(_r).where(_r.c.id == bindparam("b_id"), _r.c.version == bindparam("b_version"),
                     _r.c.event_sequence == bindparam("b_sequence")),
    ["version", "event_sequence"])
INSERT_EVENT = CompiledStatement(insert(_e), [c.name for c in _e.columns])


def update_run(run: Run, expected_version: int) -> Statement:
    """The whole Run row, where the stored Run is still at ``expected_version``."""
    values = run_values(run)
    del values["id"]
    values.update(b_id=run.id, b_version=expected_version)
    return _UPDATE_RUN, values


def advance_run(run_id: str, *, expected_version: int, expected_sequence: int, version: int,
                event_sequence: int) -> Statement:
    """Only the Run's version and event sequence, where both are still the expected ones."""
    return _ADVANCE_RUN, {"version": version, "event_sequence": event_sequence, "b_id": run_id,
                          "b_version": expected_version, "b_sequence": expected_sequence}


def insert_events(events: Sequence[RunEvent]) -> Statement:
    """The events of a change as one executemany (also for one event)."""
    return INSERT_EVENT, [event_values(event) for event in events]


def insert_event(event: RunEvent) -> Statement:
    """One event as one statement."""
    return INSERT_EVENT, event_values(event)


def fence_held(result: StatementResult) -> bool:
    """Whether a Run compare-and-set found the Run where it expected it: exactly one row moved."""
    return result.rowcount == 1
