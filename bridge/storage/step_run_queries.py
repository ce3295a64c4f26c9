"""SqlStepRunReader: read-only StepRun views over SQLAlchemy Core (the v3 API's and the repository's reads).

It cannot write: the web layer may hold it, never the repository (pyproject's import-linter contract). Every
record read is checked whole against its digest (StepRun.from_json), so a hand-edited row is reported, not served.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Engine, and_, exists, or_, select

from bridge.domain.errors import RunNotFoundError
from bridge.domain.step_run import StepRun
from bridge.domain.step_run_mutation import MutationRecord
from bridge.service.flags import storable_text
from bridge.service.ports import StepRunPage
from bridge.storage.errors import translated_read
from bridge.storage.schema import runs_table, step_run_mutations_table, step_runs_table

_s, _m = step_runs_table, step_run_mutations_table


def step_run_from_record(record: str, step_run_id: str) -> StepRun:
    """Raises StepRunIntegrityError naming the row if the record is not an intact v1 record."""
    return StepRun.from_json(record, where=f"step_runs {step_run_id}")


def mutation_from_row(row: Mapping[Any, Any]) -> MutationRecord:
    return MutationRecord(
        mutation_id=row["mutation_id"], op=row["op"], run_id=row["run_id"], step_run_id=row["step_run_id"],
        request_digest=row["request_digest"],
        step_run=StepRun.from_json(row["result_record"], where=f"step_run_mutations {row['mutation_id']}"),
        run_version=row["run_version"], event_sequence=row["event_sequence"], event_id=row["event_id"],
        created_at_ms=row["created_at_ms"])


class SqlStepRunReader:
    """StepRunReader over one engine; safe to share between threads (each call takes its own connection)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, step_run_id: str) -> StepRun | None:
        if not storable_text(step_run_id):
            return None
        with self._read() as conn:
            record = conn.execute(select(_s.c.record).where(_s.c.id == step_run_id)).scalar()
        return None if record is None else step_run_from_record(record, step_run_id)

    def get_mutation(self, mutation_id: str) -> MutationRecord | None:
        if not storable_text(mutation_id):
            return None
        with self._read() as conn:
            row = conn.execute(select(_m).where(_m.c.mutation_id == mutation_id)).mappings().first()
        return None if row is None else mutation_from_row(row)

    def page(self, run_id: str, after: tuple[int, str] | None, limit: int) -> StepRunPage:
        if not storable_text(run_id) or (after is not None and not storable_text(after[1])):
            raise RunNotFoundError(run_id)
        terms = [_s.c.run_id == run_id]
        if after is not None:
            # The plain range term bounds the index scan; the OR breaks ties on equal milliseconds by id.
            terms += [_s.c.created_at_ms >= after[0],
                      or_(_s.c.created_at_ms > after[0], and_(_s.c.created_at_ms == after[0], _s.c.id > after[1]))]
        stmt = (select(_s.c.id, _s.c.record).where(*terms).order_by(_s.c.created_at_ms, _s.c.id)
                .limit(limit + 1))
        with self._read() as conn:
            if not conn.execute(select(exists().where(runs_table.c.id == run_id))).scalar():
                raise RunNotFoundError(run_id)
            rows = conn.execute(stmt).all()
        step_runs = tuple(step_run_from_record(record, id_) for id_, record in rows[:limit])
        more = len(rows) > limit and step_runs
        return StepRunPage(step_runs, (step_runs[-1].created_at_ms, step_runs[-1].id) if more else None)

    def _read(self) -> AbstractContextManager[Connection]:
        return translated_read(self._engine)
