"""Pending ends and 2.x's stopped rows, in-process on each store: startup recovery decides what a stopped bridge
left, deciding twice changes nothing, an unreadable 2.x puts the decision off, and the reconciler and recovery
name each stop by its source."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from bridge.bootstrap import Store
from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.routes import StopRoute
from bridge.config import Settings
from bridge.jobs.stop_decisions import StopDecisions
from bridge.service.callback_facts import Outcome
from bridge.service.ports import StaticModes
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.pending_ends import SqlPendingEnds
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import pending_ends_table
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.support import wiring
from tests.support.node_ticks import next_tick
from tests.support.routes import SHELL_STATUS

ORIGINS = frozenset({"manual", "boot", "scheduled_node", "scheduled_system", "script"})


@dataclass
class World:
    data: LegacyDataDir
    double: Legacy2xDouble
    runs: RunService
    store: SqlReconcileStore
    pending: SqlPendingEnds
    reader: LegacyReader
    interceptor: ShadowInterceptor
    http: httpx.Client
    settings: Settings
    bridge: Store  # the store as the composition root hands it out (``runs`` is its RunService)

    def via_bridge(self, cron: int, status: int, pid: int, log: str, begin: int, exit_code: int | None = None) -> None:
        body = render_status_body(cron, status, pid, log, begin, 3 if status else 0, exit_code)
        prepared = self.interceptor.before_forward(SHELL_STATUS, body)
        reply = self.http.put("/open/crons/status", content=body, headers={
            "Authorization": f"Bearer {self.data.system_token}", "Content-Type": "application/json"})
        self.interceptor.after_forward(prepared, reply.status_code)

    def run(self, cron: int, pid: int, log: str, begin: int) -> dict[str, Any]:
        (row,) = self.store.runs_by_keys([f"legacy:{cron}:{pid}:{log_path_digest(log)}:{begin * 1000}"]).values()
        run = self.runs.get_run(row.id)
        return {**asdict(row), "error_code": run.error_code, "cancel_reason": run.cancel_reason,
                "events": len(self.runs.list_events(run.id, 0, 500).events)}

    def kept(self) -> int:
        with self.store.read() as conn:
            return int(conn.execute(select(func.count()).select_from(pending_ends_table)).scalar_one())

    def decisions(self) -> StopDecisions:
        return wiring.stop_decisions(self.settings, self.bridge, reader=self.reader)

    def reconcile(self) -> dict[str, int]:
        reconciler = wiring.reconciler(self.settings, self.bridge, StaticModes(frozenset()), reader=self.reader,
                                       reconcile_store=self.store)
        result = reconciler.run_once()
        assert result.result == "ok", result.reason
        return result.stats


def make_world(backend: Backend, tmp_path: Path, window_s: int) -> Iterator[World]:
    data = create_legacy_data_dir(tmp_path / "ql")
    settings = wiring.legacy_settings(data.root, BRIDGE_STOP_DECISION_WINDOW_S=str(window_s),
                                      BRIDGE_RECONCILE_GRACE_S="0")
    bridge = wiring.store_on(backend.engine, backend.uow)  # type: ignore[arg-type]
    reader = LegacyReader(data.database_path)
    interceptor = wiring.interceptor(settings, bridge, StaticModes(ORIGINS), reader=reader)
    with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
        yield World(data, double, bridge.runs, SqlReconcileStore(backend.engine),  # type: ignore[arg-type]
                    SqlPendingEnds(backend.engine), reader, interceptor, http, settings, bridge)  # type: ignore[arg-type]
    interceptor.close()


@pytest.fixture
def world(sql_backend: Backend, tmp_path: Path) -> Iterator[World]:
    yield from make_world(sql_backend, tmp_path, window_s=0)  # every pending end is due at once


@pytest.fixture
def slow_world(sql_backend: Backend, tmp_path: Path) -> Iterator[World]:
    yield from make_world(sql_backend, tmp_path, window_s=600)


def replaced(world: World, begin: int) -> int:
    """A single-instance cron whose execution (pid 41) runCron killed at the next fire; its trap reported 143
    and the next execution (pid 42) started."""
    cron = world.data.add_cron("single", "task single.sh", "*/5 * * * * *", allow_multiple_instances=0)
    fired = next_tick()  # runCron kills at the fire and spawns the next execution then: no later than the kill + 5 s
    world.via_bridge(cron, 0, 41, "a.log", begin)
    assert world.double.simulate_run_cron(cron)
    world.via_bridge(cron, 1, 41, "a.log", begin, 143)
    world.via_bridge(cron, 0, 42, "b.log", fired)
    world.via_bridge(cron, 1, 42, "b.log", fired, 0)
    return cron


def test_an_end_kept_when_the_bridge_stopped_is_decided_by_startup_recovery_with_its_exit_code(world: World) -> None:
    begin = int(time.time()) - 5
    cron = replaced(world, begin)
    assert world.kept() == 1 and world.run(cron, 41, "a.log", begin)["status"] == "running"

    # A new process: nothing in memory.
    outcomes = wiring.recover_over(world.store, world.runs, world.reader, world.pending)

    assert outcomes == {"stop_decision:replaced_by_next_run": 1}
    run = world.run(cron, 41, "a.log", begin)
    assert (run["status"], run["error_code"], run["cancel_reason"], run["exit_code"]) == (
        "cancelled", "replaced_by_next_run", "replaced_by_next_run", 143)
    assert world.kept() == 0
    assert wiring.recover_over(world.store, world.runs, world.reader, world.pending) == {}


def test_deciding_a_pending_end_twice_changes_nothing(slow_world: World) -> None:
    world, begin = slow_world, int(time.time()) - 5
    cron = replaced(world, begin)
    (end,) = world.pending.due(2**62, 10)
    recorder = ShadowRecorder(world.runs)
    verdict = world.decisions().verdict(end)

    assert recorder.close_pending_end(end, verdict).outcome is Outcome.CANCELLED
    events = world.run(cron, 41, "a.log", begin)["events"]
    assert recorder.close_pending_end(end, verdict).outcome is Outcome.DUPLICATE
    world.pending.postpone(end.id or 0, 0)  # the row outlived its decision (a crash before the delete)
    assert world.decisions().decide_due() == {"replaced_by_next_run": 1}
    assert world.run(cron, 41, "a.log", begin)["events"] == events and world.kept() == 0


def test_a_relayed_stop_after_the_decision_adds_nothing(world: World) -> None:
    cron, begin = world.data.add_cron("plain", "task plain.sh", "0 * * * *"), int(time.time()) - 5
    world.via_bridge(cron, 0, 51, "p.log", begin)
    world.via_bridge(cron, 1, 51, "p.log", begin, 143)  # a kill -TERM: 2.x says error 143
    assert world.decisions().decide_due() == {"exit": 1}
    run = world.run(cron, 51, "p.log", begin)
    assert (run["status"], run["error_code"], run["exit_code"]) == ("failed", "process_exit_error", 143)
    assert world.interceptor.stop_decisions.relayed_stop(cron, int(time.time() * 1000)) == []
    assert world.run(cron, 51, "p.log", begin)["events"] == run["events"]


def test_an_unreadable_2x_puts_the_decision_off_until_it_reads(world: World) -> None:
    cron, begin = world.data.add_cron("locked", "task locked.sh", "0 * * * *"), int(time.time()) - 5
    world.via_bridge(cron, 0, 61, "l.log", begin)
    world.via_bridge(cron, 1, 61, "l.log", begin, 130)
    blocker = sqlite3.connect(world.data.database_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # 2.x in the middle of a long write
    try:
        assert world.decisions().decide_due() == {"deferred:locked": 1}
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert world.run(cron, 61, "l.log", begin)["status"] == "running" and world.kept() == 1
    (end,) = world.pending.due(2**62, 10)
    assert end.attempts == 1 and end.due_at_ms > time.time() * 1000  # tried again a few seconds later
    world.pending.postpone(end.id or 0, 0)
    assert world.decisions().decide_due() == {"exit": 1}
    assert world.run(cron, 61, "l.log", begin)["exit_code"] == 130


def test_the_reconciler_leaves_a_run_whose_end_is_kept_to_the_decider(slow_world: World) -> None:
    world, begin = slow_world, int(time.time()) - 5
    cron = replaced(world, begin)

    assert world.reconcile()["cancelled"] == 0
    assert world.run(cron, 41, "a.log", begin)["status"] == "running"
    assert wiring.recover_over(world.store, world.runs, world.reader, world.pending)["awaiting_stop_decision"] == 1
    assert world.run(cron, 41, "a.log", begin)["status"] == "running"


def test_the_reconciler_names_a_replacement_and_a_boot_reset_by_their_source(world: World) -> None:
    begin, later = int(time.time()) - 5, next_tick()
    single = world.data.add_cron("single", "task s.sh", "*/5 * * * * *", allow_multiple_instances=0)
    world.via_bridge(single, 0, 71, "r.log", begin)
    assert world.double.simulate_run_cron(single)  # the killed shell's end never came (the shell was gone)
    world.via_bridge(single, 0, 72, "r2.log", later)
    booted = world.data.add_cron("booted", "task b.sh", "0 * * * *")
    world.via_bridge(booted, 0, 73, "b.log", begin)
    world.double.simulate_boot_reset()  # 2.x restarted: 72 and 73 stopped, without finish time or exit code
    time.sleep(max(0.0, later + 0.2 - time.time()))  # a pass judges an execution once its begin second is past

    assert world.reconcile()["cancelled"] == 3

    codes = {pid: world.run(cron, pid, log, b)["error_code"] for cron, pid, log, b in
             ((single, 71, "r.log", begin), (single, 72, "r2.log", later), (booted, 73, "b.log", begin))}
    assert codes == {71: "replaced_by_next_run", 72: "legacy_boot_reset", 73: "legacy_boot_reset"}
    assert world.reconcile()["findings"] == 0  # the stop's finish time is 2.x's: no finish_time finding
    assert wiring.recover_over(world.store, world.runs, world.reader, world.pending) == {}


def test_a_relayed_stop_takes_only_the_ends_that_reached_the_bridge_after_it(slow_world: World) -> None:
    world, begin = slow_world, int(time.time()) - 5
    cron = world.data.add_cron("multi", "task m.sh", "0 * * * *", allow_multiple_instances=1)
    world.via_bridge(cron, 0, 81, "m1.log", begin)
    world.via_bridge(cron, 0, 82, "m2.log", begin + 1)
    world.via_bridge(cron, 0, 83, "m3.log", begin + 2)
    world.via_bridge(cron, 1, 81, "m1.log", begin, 143)  # a kill -TERM by someone else, before the stop
    asked = int(time.time() * 1000) + 1
    time.sleep(0.01)
    world.via_bridge(cron, 1, 82, "m2.log", begin + 1, 143)  # the stop's own kill

    world.interceptor.stop_decisions.relayed_stop(cron, asked)

    first, second = world.run(cron, 81, "m1.log", begin), world.run(cron, 82, "m2.log", begin + 1)
    third = world.run(cron, 83, "m3.log", begin + 2)
    assert (second["status"], second["error_code"], second["exit_code"]) == ("cancelled", "cancelled_by_user", 143)
    assert (third["status"], third["error_code"], third["exit_code"]) == ("cancelled", "cancelled_by_user", None)
    assert first["status"] == "running" and world.kept() == 1  # 81 had ended before: decided on its own
    (end,) = world.pending.due(2**62, 10)
    world.pending.postpone(end.id or 0, 0)
    assert world.decisions().decide_due() == {"exit": 1}
    first = world.run(cron, 81, "m1.log", begin)
    assert (first["status"], first["exit_code"]) == ("failed", 143)  # 2.x: error 143, as the end said


def test_a_reconcile_pass_inside_the_window_finds_nothing_to_say_about_a_pending_end(slow_world: World) -> None:
    world, begin = slow_world, int(time.time()) - 600  # a long execution, judged by any pass
    cron = world.data.add_cron("long", "task long.sh", "0 * * * *")
    world.via_bridge(cron, 0, 91, "long.log", begin)
    world.via_bridge(cron, 1, 91, "long.log", begin, 143)  # 2.x: error 143, cron idle; the shadow keeps the end

    assert world.reconcile()["findings"] == 0  # neither terminal_status nor active_state while it waits
    (end,) = world.pending.due(2**62, 10)
    world.pending.postpone(end.id or 0, 0)
    assert world.decisions().decide_due() == {"exit": 1}
    assert world.reconcile()["findings"] == 0


def stop_in_flight(world: World, cron: int) -> tuple[object, bytes]:
    """A `PUT /open/crons/stop` the bridge has forwarded and 2.x has not answered yet."""
    body = f"[{cron}]".encode()
    return world.interceptor.before_forward(StopRoute(), body), body


def answer_stop(world: World, prepared: object, body: bytes) -> None:
    """2.x answers the stop (the double kills nothing, and marks the cron's running rows stopped)."""
    reply = world.http.put("/open/crons/stop", content=body, headers={
        "Authorization": f"Bearer {world.data.system_token}", "Content-Type": "application/json"})
    assert reply.status_code == 200
    world.interceptor.after_forward(prepared, reply.status_code, reply.content)


def test_a_trap_end_with_exit_1_while_a_stop_is_in_flight_ends_cancelled_by_the_stop(world: World) -> None:
    cron, begin = world.data.add_cron("trapped", "task t.sh", "0 * * * *"), int(time.time()) - 5
    world.via_bridge(cron, 0, 61, "t.log", begin)
    prepared, body = stop_in_flight(world, cron)
    world.via_bridge(cron, 1, 61, "t.log", begin, 1)  # the killed shell's trap: exit 1, before 2.x answers

    assert world.kept() == 1 and world.run(cron, 61, "t.log", begin)["status"] == "running"
    answer_stop(world, prepared, body)

    run = world.run(cron, 61, "t.log", begin)
    assert (run["status"], run["error_code"], run["exit_code"]) == ("cancelled", "cancelled_by_user", 1)
    assert world.kept() == 0


def test_a_stop_2x_answers_after_the_decision_window_still_decides_the_pending_end(world: World) -> None:
    cron, begin = world.data.add_cron("slowstop", "task s.sh", "0 * * * *"), int(time.time()) - 5
    world.via_bridge(cron, 0, 62, "s.log", begin)
    prepared, body = stop_in_flight(world, cron)
    world.via_bridge(cron, 1, 62, "s.log", begin, 143)  # kept; its window (0 here) is over at once
    decisions = world.interceptor.stop_decisions

    assert decisions.decide_due() == {"deferred:stop_in_flight": 1}  # 2.x has not answered the stop yet
    assert world.run(cron, 62, "s.log", begin)["status"] == "running"
    answer_stop(world, prepared, body)

    run = world.run(cron, 62, "s.log", begin)
    assert (run["status"], run["error_code"], run["exit_code"]) == ("cancelled", "cancelled_by_user", 143)
    assert world.kept() == 0


def test_a_stop_2x_refuses_releases_the_pending_end_to_2xs_row(world: World) -> None:
    cron, begin = world.data.add_cron("refused", "task r.sh", "0 * * * *"), int(time.time()) - 5
    world.via_bridge(cron, 0, 63, "r.log", begin)
    prepared, _body = stop_in_flight(world, cron)
    world.via_bridge(cron, 1, 63, "r.log", begin, 1)
    world.interceptor.after_forward(prepared, 401)  # 2.x refused the stop: it stopped nothing

    assert world.interceptor.stop_decisions.decide_due() == {"exit": 1}
    run = world.run(cron, 63, "r.log", begin)
    assert (run["status"], run["error_code"], run["exit_code"]) == ("failed", "process_exit_error", 1)
