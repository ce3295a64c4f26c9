"""The reads every callback makes do not grow with the store's history (SQLite, as the bridge runs it).

A cron's history grows forever, and nothing runs ANALYZE on a SQLite store, so its planner picks an index
without statistics. The work is counted in SQLite's own virtual-machine instructions (the progress handler,
called every ``STEP`` of them), not in time: a read that walks the history runs instructions for every
closed Run, one that stays on the index of open Runs runs about the same few whatever the history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, event

from bridge.service.callback_facts import ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.runs import _ANY_ACTIVE_OWNED_BY
from tests.conftest import Backend
from tests.contract.test_shadow_recorder import CTX, end, facts

STEP = 100
PRIMARY = ExecutionContext(origin="scheduled_node", evidence="test", task_revision="rev", mode="primary")


@contextmanager
def vm_steps(engine: Engine) -> Iterator[list[int]]:
    """Hundreds of instructions the store's connections run meanwhile (counted while checked out)."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0  # go on

    def on_checkout(dbapi_connection: object, _record: object, _proxy: object) -> None:
        dbapi_connection.set_progress_handler(tick, STEP)  # type: ignore[attr-defined]

    def on_checkin(dbapi_connection: object, _record: object) -> None:
        dbapi_connection.set_progress_handler(None, 0)  # type: ignore[attr-defined]

    event.listen(engine, "checkout", on_checkout)
    event.listen(engine, "checkin", on_checkin)
    try:
        yield counted
    finally:
        event.remove(engine, "checkout", on_checkout)
        event.remove(engine, "checkin", on_checkin)


def closed_history(recorder: ShadowRecorder, pids: range) -> None:
    """Closed Runs of cron 1: shadow ones 2.x owns and primary ones the bridge owns, alternately."""
    for pid in pids:
        context = PRIMARY if pid % 2 else CTX
        recorder.record_start(facts(pid), context)
        recorder.record_end(end(pid), lambda context=context: context)  # type: ignore[misc]


READS: dict[str, Callable[[ShadowRecorder], object]] = {
    "any open bridge-owned Run (primary mode, before each end is forwarded)":
        lambda recorder: recorder.has_active_bridge_runs(),
    "a cron's open Runs (correlating each callback)": lambda recorder: recorder.read_ahead_end(1),
}


@pytest.mark.parametrize("read", list(READS), ids=["open-bridge-runs", "open-runs-of-a-cron"])
def test_a_hot_read_costs_the_same_over_a_short_and_a_long_history(sqlite_backend: Backend, read: str) -> None:
    assert sqlite_backend.engine is not None
    recorder = ShadowRecorder(RunService(sqlite_backend.uow, clock=SystemClock()))  # type: ignore[arg-type]
    recorder.record_start(facts(1), CTX)  # one open Run, so the correlation read has something to find
    closed_history(recorder, range(100, 110))
    with vm_steps(sqlite_backend.engine) as short:
        READS[read](recorder)
    closed_history(recorder, range(110, 510))
    with vm_steps(sqlite_backend.engine) as long:
        READS[read](recorder)
    # Forty times the history: a walk of it runs some forty times the instructions; a read of open Runs,
    # the same few (a deeper B-tree at most).
    assert long[0] <= short[0] + 3, (short, long)


def test_the_open_bridge_run_check_reads_the_index_of_open_runs(sql_backend: Backend) -> None:
    """The same check by its plan, on every store and over the store's life (with statistics and without)."""
    recorder = ShadowRecorder(RunService(sql_backend.uow, clock=SystemClock()))  # type: ignore[arg-type]
    closed_history(recorder, range(100, 220))
    recorder.record_start(facts(1), PRIMARY)
    assert recorder.has_active_bridge_runs() is True
    assert sql_backend.engine is not None
    sql, args = _ANY_ACTIVE_OWNED_BY.bind(sql_backend.engine.dialect, {"b_owner": "bridge"})  # as it runs
    for plan in sql_backend.plans_in_use(sql, args):
        assert "ix_runs_active_by_cron" in plan, plan
