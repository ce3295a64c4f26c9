"""SqlRunQueries: the v3 read model (bridge.service.queries.RunQueries) over SQLAlchemy Core.

Every call is one read-only connection (a plain deferred BEGIN on SQLite, so it never takes the write
lock) and reads at most ``limit + 1`` rows: the extra row only says whether another page exists.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Select, and_, exists, or_, select

from bridge.domain.errors import RunNotFoundError
from bridge.service.flags import storable_text
from bridge.service.queries import (
    EventsPage,
    InvalidQueryError,
    PageRequest,
    RunCursor,
    RunFilters,
    RunsPage,
    event_view,
    run_detail_view,
    run_view,
)
from bridge.storage.errors import translated_read
from bridge.storage.rows import attempt_from_row, event_from_row, run_from_row
from bridge.storage.schema import run_attempts_table, run_events_table, runs_table

_r, _a, _e = runs_table, run_attempts_table, run_events_table


def run_conditions(filters: RunFilters, after: RunCursor | None) -> list[ColumnElement[bool]]:
    """The WHERE terms of a Run listing: equality filters first, then the keyset bound."""
    terms: list[ColumnElement[bool]] = []
    if filters.cron_id is not None:
        terms.append(_r.c.legacy_cron_id == filters.cron_id)
    if filters.status is not None:
        terms.append(_r.c.status == filters.status)
    if filters.origin is not None:
        terms.append(_r.c.origin == filters.origin)
    if filters.since_ms is not None:
        terms.append(_r.c.created_at_ms >= filters.since_ms)
    if after is not None:
        # The plain range term lets an index ending in created_at_ms bound the scan (an OR alone is
        # not sargable everywhere); the OR then breaks ties on equal milliseconds by id.
        terms.append(_r.c.created_at_ms <= after.created_at_ms)
        terms.append(or_(_r.c.created_at_ms < after.created_at_ms,
                         and_(_r.c.created_at_ms == after.created_at_ms, _r.c.id < after.id)))
    return terms


def run_list_statement(filters: RunFilters, page: PageRequest) -> Select[Any]:
    """One page of a Run listing, newest first by (created_at_ms, id), with one extra row that only says
    whether another page exists."""
    return (select(_r).where(*run_conditions(filters, page.after))
            .order_by(_r.c.created_at_ms.desc(), _r.c.id.desc()).limit(page.limit + 1))


def _no_such_run_unless_storable(run_id: str) -> None:
    """An id no store can hold names no Run, and is never sent: PostgreSQL would refuse a NUL with an error
    where SQLite answers "not found", and neither driver can send an unpaired surrogate."""
    if not storable_text(run_id):
        raise RunNotFoundError(run_id)


class SqlRunQueries:
    """RunQueries over one engine; safe to share between threads (each call takes its own connection)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list_runs(self, filters: RunFilters, page: PageRequest) -> RunsPage:
        if page.after is not None and not storable_text(page.after.id):
            raise InvalidQueryError("cursor", "is not a cursor this API returned")
        with self._read() as conn:
            rows = conn.execute(run_list_statement(filters, page)).mappings().all()
        runs = [run_from_row(row) for row in rows[: page.limit]]
        more = len(rows) > page.limit
        next_cursor = RunCursor(runs[-1].created_at_ms, runs[-1].id).encode() if more else None
        return RunsPage([run_view(run) for run in runs], next_cursor)

    def get_run(self, run_id: str) -> dict[str, Any]:
        _no_such_run_unless_storable(run_id)
        with self._read() as conn:
            row = conn.execute(select(_r).where(_r.c.id == run_id)).mappings().first()
            if row is None:
                raise RunNotFoundError(run_id)
            attempts = conn.execute(select(_a).where(_a.c.run_id == run_id).order_by(_a.c.attempt)).mappings().all()
        return run_detail_view(run_from_row(row), [attempt_from_row(a) for a in attempts])

    def list_events(self, run_id: str, after: int, limit: int) -> EventsPage:
        _no_such_run_unless_storable(run_id)
        stmt = (select(_e).where(_e.c.run_id == run_id, _e.c.sequence > after)
                .order_by(_e.c.sequence).limit(limit + 1))
        with self._read() as conn:
            if not conn.execute(select(exists().where(_r.c.id == run_id))).scalar():
                raise RunNotFoundError(run_id)
            rows = conn.execute(stmt).mappings().all()
        events = [event_from_row(row) for row in rows[:limit]]
        next_after = events[-1].sequence if len(rows) > limit else None
        return EventsPage(run_id, [event_view(e) for e in events], next_after)

    def _read(self) -> AbstractContextManager[Connection]:
        return translated_read(self._engine)
