"""Each v3 list filter reads one range of an index ending in the sort key, however rare or common its value.

The store is ANALYZEd first (Backend.query_plan), so each planner knows that most Runs share one status,
origin and cron: the state in which a planner used to walk ix_runs_created_id filtering row by row, which for
a rare value means the whole table.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import insert

from bridge.service.queries import PageRequest, RunCursor, RunFilters
from bridge.storage.queries import run_list_statement
from bridge.storage.schema import runs_table
from tests.conftest import Backend

T0 = 1_796_216_400_000
RARE_CRON = 99


def _run(i: int, *, status: str = "succeeded", origin: str = "scheduled_system",
         cron: int | None = None) -> dict[str, Any]:
    return {"id": f"run-{i:05d}", "project_id": "default", "task_id": f"legacy-cron:{cron}", "task_revision": "rev",
            "trigger_type": "legacy", "status": status, "version": 1, "event_sequence": 0, "origin": origin,
            "legacy_cron_id": cron if cron is not None else 1 + i % 5, "created_at_ms": T0 + i * 1000}


@pytest.fixture
def history(sql_backend: Backend) -> Backend:
    """400 Runs: most succeeded scheduled_system Runs of five crons; ten failed, ten manual of a cron of their own."""
    rows = [_run(i) for i in range(380)]
    rows += [_run(380 + i, status="failed", cron=1) for i in range(10)]
    rows += [_run(390 + i, origin="manual", cron=RARE_CRON) for i in range(10)]
    for i, row in enumerate(rows[380:]):  # spread through the history, not all newest
        row["created_at_ms"] = T0 + i * 38_000 + 500
    assert sql_backend.engine is not None
    with sql_backend.engine.begin() as conn:
        conn.execute(insert(runs_table), rows)
    return sql_backend


def _as_at_scale(backend: Backend) -> Backend:
    """enable_seqscan=off's companions for a planner that takes settings: over a test's few rows, sorting them
    or collecting them in a bitmap first would be cheapest too, which over 100,000 Runs it is not. SQLite's
    planner (no settings) plans from ANALYZE's statistics alone."""
    if not backend.explain_setup:
        return backend
    return replace(backend, explain_setup=(*backend.explain_setup, "SET LOCAL enable_sort = off",
                                           "SET LOCAL enable_bitmapscan = off"))


def _plan(backend: Backend, filters: RunFilters, after: RunCursor | None = None) -> str:
    """The plan of the v3 list's statement as it runs: compiled for the store, with the driver's parameters."""
    backend = _as_at_scale(backend)
    assert backend.engine is not None
    compiled = run_list_statement(filters, PageRequest(limit=50, after=after)).compile(dialect=backend.engine.dialect)
    params = compiled.construct_params()
    args = tuple(params[k] for k in compiled.positiontup or ()) if compiled.positional else params
    return backend.query_plan(str(compiled), args)


def _reads_one_ordered_range(plan: str, index: str) -> None:
    assert index in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan  # SQLite's and PostgreSQL's sort steps


@pytest.mark.parametrize(("filters", "index"), [
    (RunFilters(status="failed"), "ix_runs_status_created_id"),
    (RunFilters(origin="manual"), "ix_runs_origin_created"),
    (RunFilters(cron_id=RARE_CRON), "ix_runs_cron_created_id"),
    (RunFilters(cron_id=1, status="failed"), "ix_runs_legacy_cron_status"),
    (RunFilters(status="failed", since_ms=T0 + 100_000), "ix_runs_status_created_id"),
], ids=["status", "origin", "cron", "cron-and-status", "status-since"])
def test_a_filter_matching_few_runs_reads_only_them_from_its_index_in_order(
        history: Backend, filters: RunFilters, index: str) -> None:
    _reads_one_ordered_range(_plan(history, filters), index)
    _reads_one_ordered_range(_plan(history, filters, after=RunCursor(T0 + 200_000, "run-00200")), index)


@pytest.mark.parametrize("filters", [
    RunFilters(), RunFilters(status="succeeded"), RunFilters(origin="scheduled_system"), RunFilters(cron_id=2),
    RunFilters(cron_id=2, status="succeeded"),
], ids=["none", "status", "origin", "cron", "cron-and-status"])
def test_a_filter_matching_most_runs_still_reads_an_index_in_order_and_stops_at_the_page(
        history: Backend, filters: RunFilters) -> None:
    plan = _plan(history, filters)
    assert "ix_runs_" in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan
