"""The v3 read model of StepRuns: ``GET /v3/runs/<id>/step-runs`` query parsing and the JSON-ready shapes.

Read-only: it shapes what a StepRunReader returns and never reaches the repository's write path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.domain.step_run import StepRun
from bridge.service.ports import StepRunPage
from bridge.service.queries import RunCursor, optional_value, page_limit, single_values, with_times

STEP_RUNS_LIMIT_DEFAULT, STEP_RUNS_LIMIT_MAX = 50, 128  # a page can hold every StepRun of a Run
STEP_RUN_LIST_PARAMETERS = frozenset({"cursor", "limit"})


def parse_step_run_query(args: Mapping[str, Sequence[str]]) -> tuple[tuple[int, str] | None, int]:
    """(after, limit) of the listing. Raises InvalidQueryError naming the bad parameter.

    The cursor is the v3 API's one opaque (created_at_ms, id) token, as ``next_cursor`` returns it.
    """
    values = single_values(args, STEP_RUN_LIST_PARAMETERS)
    cursor = optional_value(values, "cursor", RunCursor.decode)
    after = None if cursor is None else (cursor.created_at_ms, cursor.id)
    return after, page_limit(values, STEP_RUNS_LIMIT_DEFAULT, STEP_RUNS_LIMIT_MAX)


def step_run_view(step_run: StepRun) -> dict[str, Any]:
    """The v1 record's fields (digest included), each ``*_ms`` instant also in RFC 3339."""
    return with_times({**step_run.body(), "digest": step_run.digest})


def step_runs_page_view(run_id: str, page: StepRunPage) -> dict[str, Any]:
    after = page.next_after
    return {"run_id": run_id, "step_runs": [step_run_view(s) for s in page.step_runs],
            "next_cursor": None if after is None else RunCursor(after[0], after[1]).encode()}
