"""Every mismatch kind, produced by a scenario against the 2.x double, then fixed and seen resolved."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from bridge.cli.demo import ALL_ORIGINS
from bridge.jobs.reconcile import Reconciler, ReconcileSettings
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.ports import StaticModes
from bridge.service.shadow import ShadowRecorder
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import mismatches_table, run_attempts_table
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.process_identity import ProcProbe
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.integration.legacy_world import BEGIN, Bridged, end, live_shell, start
from tests.support import wiring
from tests.support.routes import SHELL_STATUS


@dataclass
class World(Bridged):
    """The bridged 2.x and shadow store of legacy_world, with the double itself and a reconciler over both."""

    double: Legacy2xDouble
    reconciler: Reconciler

    def all_mismatches(self) -> list[dict[str, object]]:
        with self.store.read() as conn:
            return [dict(r._mapping) for r in conn.execute(select(mismatches_table))]

    def kinds(self) -> list[tuple[str, int | None]]:
        return sorted((m["kind"], m["legacy_cron_id"]) for m in self.store.open_mismatches())

    def reconcile(self) -> list[tuple[str, int | None]]:
        result = self.reconciler.run_once()
        assert result.result == "ok", result
        return self.kinds()


@pytest.fixture
def world(sql_backend: Backend, tmp_path: Path) -> Iterator[World]:
    data = create_legacy_data_dir(tmp_path / "ql")
    settings = wiring.legacy_settings(data.root, BRIDGE_RECONCILE_GRACE_S="0", BRIDGE_RECONCILE_TOLERANCE_S="2")
    bridge = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    modes = StaticModes(frozenset(ALL_ORIGINS.split(",")))
    reader = LegacyReader(data.database_path)
    interceptor = wiring.interceptor(settings, bridge, modes, reader=reader, keep_ends=False)
    store = SqlReconcileStore(sql_backend.engine)
    reconciler = wiring.reconciler(settings, bridge, modes, reader=reader, reconcile_store=store,
                                   probe=InLegacyNamespace())
    with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
        yield World(data=data, runs=bridge.runs, store=store,
                    interceptor=interceptor, http=http, settings=settings, bridge=bridge, double=double,
                    reconciler=reconciler)
    interceptor.close()


def cron(world: World, schedule: str = "0 * * * *") -> int:
    return world.data.add_cron(f"c{time.monotonic_ns()}", "task job.sh", schedule)


def test_a_faithful_shadow_has_no_mismatch(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 11, "a.log"))
    world.via_bridge(end(c, 11, "a.log"))
    assert world.reconcile() == []


def test_a_missing_run_is_found_then_resolved_once_recorded(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 12, "m.log"))
    world.direct(end(c, 12, "m.log", 0))
    assert world.reconcile() == [("missing", c)]
    facts = CallbackFacts(c, 12, log_path_digest("m.log"), BEGIN * 1000, 3000, 0, int(time.time() * 1000))
    ctx = ExecutionContext("scheduled_system", "test", "rev")
    ShadowRecorder(world.runs).record_end(facts, lambda: ctx)
    assert world.reconcile() == []
    (closed,) = world.all_mismatches()
    assert closed["kind"] == "missing" and closed["resolved_at_ms"] is not None  # closed, not deleted


def test_an_orphan_run_is_found_then_resolved_when_2x_has_the_execution(world: World) -> None:
    c = cron(world)
    facts = CallbackFacts(c, 13, log_path_digest("o.log"), BEGIN * 1000, None, None, BEGIN * 1000)
    ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "test", "rev"))
    # The shadow also thinks the cron is running while 2.x shows it idle.
    assert world.reconcile() == [("active_state", c), ("orphan", c)]
    world.direct(start(c, 13, "o.log"))
    assert world.reconcile() == []


def test_status_and_exit_code_disagreements_are_found_with_a_diff(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 14, "s.log"))
    prepared = world.interceptor.before_forward(SHELL_STATUS, end(c, 14, "s.log", 0))
    world.direct(end(c, 14, "s.log", 3))  # 2.x saw exit 3, the shadow sees exit 0
    world.interceptor.after_forward(prepared, 200)
    assert world.reconcile() == [("exit_code", c), ("terminal_status", c)]
    diff = {m["kind"]: json.loads(m["diff"]) for m in world.store.open_mismatches()}
    assert diff["exit_code"]["values_changed"]["root['exit_code']"] == {"old_value": 3, "new_value": 0}
    world.legacy("UPDATE RunningInstances SET status = 1, exit_code = 0 WHERE cron_id = ?", (c,))
    assert world.reconcile() == []


def test_a_finish_time_beyond_the_tolerance_is_found(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 15, "f.log"))
    world.via_bridge(end(c, 15, "f.log"))
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at + 30 WHERE cron_id = ?", (c,))
    assert world.reconcile() == [("finish_time", c)]
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at - 29 WHERE cron_id = ?", (c,))
    assert world.reconcile() == []  # within the 2 s tolerance


def test_a_start_time_beyond_the_tolerance_is_found(world: World, sql_backend: Backend) -> None:
    c = cron(world)
    world.via_bridge(start(c, 16, "t.log"))
    world.via_bridge(end(c, 16, "t.log"))
    with sql_backend.engine.begin() as conn:
        conn.execute(update(run_attempts_table).where(run_attempts_table.c.pid == 16)
                     .values(started_at_ms=run_attempts_table.c.started_at_ms + 60_000))
    assert world.reconcile() == [("start_time", c)]
    with sql_backend.engine.begin() as conn:
        conn.execute(update(run_attempts_table).where(run_attempts_table.c.pid == 16)
                     .values(started_at_ms=run_attempts_table.c.started_at_ms - 60_000))
    assert world.reconcile() == []


def test_no_run_is_stuck_when_2xs_processes_are_out_of_sight(world: World) -> None:
    # Another pid namespace: the shell's pid here proves nothing, whatever runs under it.
    unseeing = wiring.reconciler(world.settings, world.bridge, StaticModes(frozenset(ALL_ORIGINS.split(","))),
                                 reader=LegacyReader(world.data.database_path), reconcile_store=world.store,
                                 probe=OutOfLegacyNamespace())
    c = cron(world)
    with live_shell() as shell:
        world.via_bridge(start(c, shell.pid, "o.log"))
    assert unseeing.run_once().result == "ok"
    assert world.store.open_mismatches("stuck") == []
    assert world.reconcile() == [("stuck", c)]  # the same pass where 2.x's processes are in sight


def test_a_stuck_run_is_found_when_its_shell_is_provably_gone(world: World) -> None:
    c = cron(world)
    with live_shell() as shell:
        world.via_bridge(start(c, shell.pid, "k.log"))
        assert world.reconcile() == []  # alive, and 2.x agrees it is running
    assert world.reconcile() == [("stuck", c)]  # the script called exit: no end callback will come
    world.via_bridge(end(c, shell.pid, "k.log", 137))
    assert world.reconcile() == []


def test_an_instance_2x_stopped_cancels_the_shadow_run(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 17, "x.log"))
    world.direct(f"[{c}]".encode(), "/open/crons/stop")  # the stop went around the bridge
    assert world.reconcile() == []
    run = world.run_row(c, 17, "x.log")
    assert run is not None and run["status"] == "cancelled" and run["cancel_requested_at_ms"] is not None


def test_2x_left_running_by_its_log_path_rule_is_an_active_state_mismatch(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 18, "real.log"))
    world.via_bridge(end(c, 18, "other.log"))  # 2.x closes the instance but keeps the cron at status 0
    assert world.reconcile() == [("active_state", c)]
    world.direct(render_status_body(c, 1, 18, "real.log", BEGIN, 3, 0))
    assert world.reconcile() == []


def test_a_pid_disagreement_is_found(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 19, "p.log"))
    world.legacy("UPDATE Crontabs SET pid = 999 WHERE id = ?", (c,))
    assert ("pid", c) in world.reconcile()
    world.legacy("UPDATE Crontabs SET pid = 19 WHERE id = ?", (c,))
    assert ("pid", c) not in world.reconcile()


def test_two_runs_for_one_execution_are_a_duplicate(world: World) -> None:
    c = cron(world)
    recorder = ShadowRecorder(world.runs)
    ctx = ExecutionContext("scheduled_system", "test", "rev")
    for begin_ms in (BEGIN * 1000, (BEGIN + 600) * 1000):  # the same shell seen under two begin times
        recorder.record_start(CallbackFacts(c, 20, log_path_digest("d.log"), begin_ms, None, None, begin_ms), ctx)
    assert ("duplicate", c) in world.reconcile()


def test_in_flight_executions_inside_the_grace_window_are_not_counted(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 21, "g.log", begin=int(time.time())))  # now, not when the suite was collected
    world.reconciler._settings = ReconcileSettings(grace_s=600)  # noqa: SLF001 - the setting under test
    assert world.reconcile() == []


def test_a_mismatch_names_its_run_with_one_deduped_event(world: World) -> None:
    c = cron(world)
    facts = CallbackFacts(c, 22, log_path_digest("e.log"), BEGIN * 1000, None, None, BEGIN * 1000)
    run_id = ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "t", "r")).run_id
    kinds = world.reconcile()
    world.reconcile()
    events = [e for e in world.runs.list_events(run_id or "").events
              if e.type.value == "run.legacy_projection_mismatch"]
    assert sorted(e.payload["kind"] for e in events) == sorted(kind for kind, _ in kinds)  # one per mismatch
    assert {e.actor_type.value for e in events} == {"reconciler"}


def test_a_pass_stopped_by_a_locked_2x_database_records_why_and_the_next_one_runs(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 23, "l.log"))
    blocker = sqlite3.connect(world.data.database_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        result = world.reconciler.run_once()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (result.result, result.reason) == ("failed", "LEGACY_DATABASE")  # a code, not the driver's message
    assert world.store.last_pass()["reason"] == "LEGACY_DATABASE"  # type: ignore[index]
    assert world.reconcile() == [("missing", c)]


def test_only_one_reconciler_runs_at_a_time(world: World) -> None:
    with world.store.singleton("someone-else", int(time.time() * 1000), 60_000) as held:
        assert held
        assert world.reconciler.run_once().result == "locked"
    assert world.reconciler.run_once().result == "ok"


class InLegacyNamespace(ProcProbe):
    """This machine's /proc, read as in 2.x's pid namespace (no 2.x backend runs here to be seen)."""

    def sees_legacy(self) -> bool:
        return True


class OutOfLegacyNamespace(ProcProbe):
    """This machine's /proc, read from another pid namespace than 2.x's."""

    def sees_legacy(self) -> bool:
        return False


def recover(world: World) -> dict[str, int]:
    return dict(wiring.recover(world.settings, world.bridge, reader=LegacyReader(world.data.database_path),
                               probe=InLegacyNamespace()))


def status_of(world: World, c: int, pid: int, log: str) -> tuple[str, str]:
    run = world.run_row(c, pid, log)
    assert run is not None
    return run["status"], run["attempt_status"]


def test_startup_completes_a_run_2x_saw_finish_while_the_bridge_was_down(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 31, "r.log"))
    world.direct(end(c, 31, "r.log", 4))
    assert recover(world) == {"completed": 1}
    assert status_of(world, c, 31, "r.log") == ("failed", "failed")
    assert recover(world) == {}  # nothing left to check


def test_startup_keeps_a_provably_running_shell_running(world: World) -> None:
    c = cron(world)
    with live_shell() as shell:
        world.via_bridge(start(c, shell.pid, "alive.log"))
        assert recover(world) == {"running": 1}
        assert status_of(world, c, shell.pid, "alive.log") == ("running", "running")
    assert recover(world) == {"lost:process_gone": 1}
    assert status_of(world, c, shell.pid, "alive.log") == ("lost", "lost")


def test_startup_marks_what_it_cannot_prove_as_lost_and_never_guesses(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 4_000_000, "u.log"))  # no such process here: no identity was taken
    facts = CallbackFacts(c, 33, log_path_digest("n.log"), BEGIN * 1000, None, None, BEGIN * 1000)
    ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "t", "r"))  # no 2.x row
    assert recover(world) == {"lost:process_unprovable": 1, "lost:no_legacy_instance": 1}


def test_startup_cancels_a_run_whose_2x_instance_was_stopped(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 34, "st.log"))
    world.direct(f"[{c}]".encode(), "/open/crons/stop")
    assert recover(world) == {"cancelled": 1}
    assert status_of(world, c, 34, "st.log") == ("cancelled", "cancelled")


def test_projection_drift_of_a_primary_run_is_found_and_resolved_once_projected(world: World,
                                                                                sql_backend: Backend) -> None:
    from bridge.bootstrap.commands import build_projector

    c = cron(world)
    facts = CallbackFacts(c, 35, log_path_digest("pr.log"), BEGIN * 1000, None, None, BEGIN * 1000, log_path="pr.log")
    ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "t", "r", mode="primary"))
    assert world.reconcile() == [("active_state", c), ("orphan", c)]  # 2.x's columns lag behind the facts
    projector = build_projector(sql_backend.engine, world.data.database_path, BridgeMetrics())
    projector.run_once()
    assert world.data.cron_row(c)["status"] == 0  # type: ignore[index]
    assert world.reconcile() == []


def test_a_start_whose_crontabs_row_2x_kept_locked_is_counted_as_such_and_back_filled_by_its_end(
        world: World) -> None:
    metrics = BridgeMetrics()
    interceptor = wiring.interceptor(world.settings, world.bridge, StaticModes(frozenset(ALL_ORIGINS.split(","))),
                                     metrics=metrics, keep_ends=False)
    c = cron(world)
    blocker = sqlite3.connect(world.data.database_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # 2.x in the middle of a long write when the start arrives
    try:
        prepared = interceptor.before_forward(SHELL_STATUS, start(c, 31, "u.log"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    interceptor.after_forward(prepared, world.direct(start(c, 31, "u.log")))

    def failed(error: str) -> float:
        return metrics.registry.get_sample_value("ql_bridge_shadow_write_failed_total",
                                                 {"origin": "other", "error": error}) or 0.0

    assert failed("legacy_unreadable") == 1.0
    assert (metrics.registry.get_sample_value("ql_bridge_shadow_callback_unmatched_total",
                                              {"origin": "other", "kind": "unmatched"}) or 0.0) == 0.0
    assert world.run(c, 31, "u.log") is None  # nothing guessed at the start

    prepared = interceptor.before_forward(SHELL_STATUS, end(c, 31, "u.log"))
    interceptor.after_forward(prepared, world.direct(end(c, 31, "u.log")))
    interceptor.close()
    assert world.run(c, 31, "u.log") == ("succeeded", True)  # back-filled, marked synthesized
    assert world.reconcile() == []

