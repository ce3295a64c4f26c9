"""Startup recovery finds a Run's 2.x instance by the execution's own identity, however many instances the cron
has had since, and takes 2.x's terminal facts instead of guessing."""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from bridge.callbacks.commands import ApplyStop
from bridge.callbacks.keeper import FactKeeper
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.storage.journal import SqliteFactJournal
from legacy_adapters.process_identity import ProcProbe
from legacy_adapters.reader import LegacyReader
from legacy_adapters.schema import InstanceStatus
from tests.integration import legacy_world
from tests.integration.legacy_world import BEGIN, World, end, start
from tests.legacy.conftest import StatementLog
from tests.support import wiring

world = legacy_world.world  # the fixture


def recover(world: World, reader: LegacyReader | None = None, probe: ProcProbe | None = None) -> dict[str, int]:
    return dict(wiring.recover(world.settings, world.bridge, reader=reader or LegacyReader(world.data.database_path),
                               probe=probe))


def newer_executions(world: World, cron: int, count: int = 10) -> None:
    """Executions of the same cron that 2.x ran after, while the bridge was down."""
    for i in range(count):
        pid, log, begin = 5000 + i, f"later/{i}.log", BEGIN + 60 * (i + 1)
        assert world.direct(start(cron, pid, log, begin)) == 200
        assert world.direct(end(cron, pid, log, 0, begin)) == 200


def test_a_run_2x_finished_while_the_bridge_was_down_is_completed_with_2xs_facts_after_ten_newer_runs(
        world: World) -> None:
    cron = world.data.add_cron("busy cron", "task busy.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 61, "first.log")) == 200
    assert world.direct(end(cron, 61, "first.log", exit_code=4)) == 200  # the bridge died before it saw this
    newer_executions(world, cron)
    (instance,) = [i for i in world.data.instance_rows(cron) if i["pid"] == 61]
    assert len(world.data.instance_rows(cron)) == 11 and instance["status"] == InstanceStatus.ERROR

    assert recover(world) == {"completed": 1}

    row = world.run_row(cron, 61, "first.log")
    assert row is not None
    assert (row["status"], row["attempt_status"], row["exit_code"]) == ("failed", "failed", 4)
    assert row["finished_at_ms"] == instance["finished_at"] * 1000
    assert recover(world) == {}


def test_a_run_2x_stopped_while_the_bridge_was_down_is_cancelled_after_ten_newer_runs(world: World) -> None:
    cron = world.data.add_cron("stopped cron", "task stopped.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 62, "stopped.log")) == 200
    assert world.direct(f"[{cron}]".encode(), "/open/crons/stop") == 200
    newer_executions(world, cron)

    assert recover(world) == {"cancelled": 1}
    row = world.run_row(cron, 62, "stopped.log")
    assert row is not None and (row["status"], row["attempt_status"]) == ("cancelled", "cancelled")


def test_a_run_2x_never_heard_of_is_still_lost_and_a_neighbour_of_the_same_pid_is_not_taken_for_it(
        world: World) -> None:
    cron = world.data.add_cron("pid reuse", "task reuse.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 63, "mine.log")) == 200
    world.legacy("DELETE FROM RunningInstances WHERE cron_id = ? AND pid = 63", (cron,))  # 2.x lost it
    assert world.direct(start(cron, 63, "other.log", BEGIN + 5)) == 200  # the same pid, another execution
    assert world.direct(end(cron, 63, "other.log", 0, BEGIN + 5)) == 200

    assert recover(world) == {"lost:no_legacy_instance": 1}
    row = world.run_row(cron, 63, "mine.log")
    assert row is not None and row["status"] == "lost"


class Statements(StatementLog, LegacyReader):
    """A reader that keeps the text of every statement it runs against 2.x's database."""


def test_the_instance_is_looked_up_through_the_primary_key_never_by_scanning_2xs_table(world: World) -> None:
    cron = world.data.add_cron("plan", "task plan.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 64, "plan.log")) == 200
    assert world.direct(end(cron, 64, "plan.log")) == 200
    reader = Statements(world.data.database_path)

    assert recover(world, reader) == {"completed": 1}

    reads = {s for s in reader.statements if "RunningInstances" in s and s.lstrip().upper().startswith("SELECT")}
    plans: Counter[str] = Counter()
    with closing(sqlite3.connect(world.data.database_path)) as conn:
        for sql in reads:
            plans.update(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    assert plans and not [p for p in plans if p.startswith("SCAN") and "RunningInstances" in p], plans


def test_recovery_deferred_by_a_hot_journal_is_run_again_by_the_reconcile_job_once_2x_reads(world: World) -> None:
    from bridge.bootstrap import reconcile_job
    from bridge.metrics import BridgeMetrics

    cron = world.data.add_cron("deferred cron", "task deferred.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 64, "deferred.log")) == 200
    assert world.direct(end(cron, 64, "deferred.log", exit_code=0)) == 200  # the bridge was down for this
    world.data.leave_hot_journal()
    reader = LegacyReader(world.data.database_path)
    assert recover(world, reader) == {"deferred:hot_journal": 1}  # what `ql-bridge serve` saw at start

    passes: list[str] = []

    class Reconciler:
        def __init__(self) -> None:
            self.reader = reader

        def run_once(self) -> str:
            passes.append("pass")
            return "ok"

    job = reconcile_job(world.settings, Reconciler(), world.bridge, BridgeMetrics(),  # type: ignore[arg-type]
                        empty_journal(world), recovery_deferred=True)
    job()  # still hot: deferred again, and the pass runs anyway
    assert world.run_row(cron, 64, "deferred.log")["status"] == "running"  # type: ignore[index]
    world.data.roll_back_hot_journal()
    job()

    row = world.run_row(cron, 64, "deferred.log")
    assert row is not None and row["status"] == "succeeded"
    assert passes == ["pass", "pass"]


# -- which evidence decides: where the bridge sees none of 2.x's processes, 2.x's instance row ------------------


def proc_root(root: Path, *, legacy_visible: bool) -> ProcProbe:
    """A /proc with a boot id and a bash at every pid these tests use (a pid namespace of its own reuses pids),
    and, where 2.x's pid namespace is shared, 2.x's Node backend."""
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "sys/kernel/random/boot_id").write_text("0f4c2a55-9d1e-4d7b-8a55-3d9d2f6f1a01\n")
    for pid in (71, 72):
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(f"{pid} (bash) S 1 {pid} {pid} 0 -1 0 " + "0 " * 12 + "555 0\n")
        (root / str(pid) / "cmdline").write_bytes(b"bash\0")
    if legacy_visible:
        (root / "9").mkdir()
        (root / "9" / "cmdline").write_bytes(b"node\0/ql/static/build/app.js\0")
        (root / "9" / "environ").write_bytes(b"BACK_PORT=5701\0")
    return ProcProbe(root)


ROW_OUTCOMES = [  # what 2.x's row shows at the restart -> the outcome, the Run's status and exit code
    ("running", "running:legacy_instance", "running", None),
    ("finished", "completed", "succeeded", 0),
    ("error", "completed", "failed", 5),
    ("stopped", "cancelled", "cancelled", None),
    ("no row", "lost:no_legacy_instance", "lost", None),
]


@pytest.mark.parametrize(("legacy_row", "outcome", "status", "exit_code"), ROW_OUTCOMES,
                         ids=[row[0] for row in ROW_OUTCOMES])
def test_where_2xs_processes_are_not_visible_2xs_instance_row_decides(
        world: World, tmp_path: Path, legacy_row: str, outcome: str, status: str, exit_code: int | None) -> None:
    cron = world.data.add_cron(f"hidden {legacy_row}", "task hidden.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 71, "hidden.log")) == 200
    if legacy_row in ("finished", "error"):  # the bridge was down for the end
        assert world.direct(end(cron, 71, "hidden.log", exit_code=0 if legacy_row == "finished" else 5)) == 200
    elif legacy_row == "stopped":
        assert world.direct(f"[{cron}]".encode(), "/open/crons/stop") == 200
    elif legacy_row == "no row":
        world.legacy("DELETE FROM RunningInstances WHERE cron_id = ?", (cron,))

    assert recover(world, probe=proc_root(tmp_path / "proc", legacy_visible=False)) == {outcome: 1}

    row = world.run_row(cron, 71, "hidden.log")
    assert row is not None and (row["status"], row["exit_code"]) == (status, exit_code)


def test_a_run_2x_shows_running_stays_open_with_an_event_saying_why_and_its_end_callback_closes_it(
        world: World, tmp_path: Path) -> None:
    cron = world.data.add_cron("restarted beside", "task beside.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 72, "beside.log")) == 200

    assert recover(world, probe=proc_root(tmp_path / "proc", legacy_visible=False)) == {"running:legacy_instance": 1}

    row = world.run_row(cron, 72, "beside.log")
    assert row is not None
    last = world.runs.list_events(row["id"]).events[-1]
    assert (last.type, dict(last.payload)) == ("run.reconciled", {
        "outcome": "running", "evidence": "legacy_instance", "reason": "processes_not_visible"})
    assert world.via_bridge(end(cron, 72, "beside.log", exit_code=0)) == 200  # a second later
    assert (world.run_row(cron, 72, "beside.log") or {}).get("status") == "succeeded"


def test_where_2xs_processes_are_visible_a_shell_that_cannot_be_proven_alive_is_still_lost(
        world: World, tmp_path: Path) -> None:
    cron = world.data.add_cron("same namespace", "task same.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 71, "same.log")) == 200  # 2.x's row says running

    assert recover(world, probe=proc_root(tmp_path / "proc", legacy_visible=True)) == {"lost:process_unprovable": 1}
    assert (world.run_row(cron, 71, "same.log") or {}).get("status") == "lost"


def test_of_an_execution_2x_recorded_twice_the_row_closed_by_its_own_end_speaks(world: World) -> None:
    cron = world.data.add_cron("replayed", "task replayed.sh", "0 * * * *")
    assert world.via_bridge(start(cron, 73, "twice.log")) == 200
    assert world.direct(end(cron, 73, "twice.log", exit_code=4)) == 200  # the bridge was down for the end
    assert world.direct(start(cron, 73, "twice.log")) == 200  # a replayed start: 2.x opens a second row
    world.legacy("UPDATE RunningInstances SET status = 2 WHERE status = 0")  # 2.x's boot reset (initData)
    assert [(i["status"], i["exit_code"]) for i in world.data.instance_rows(cron)] == [(3, 4), (2, None)]

    assert recover(world) == {"completed": 1}

    row = world.run_row(cron, 73, "twice.log")
    assert row is not None and (row["status"], row["exit_code"]) == ("failed", 4)


def empty_journal(world: World) -> FactKeeper:
    """A keeper whose journal holds nothing: the store took every fact."""
    journal = SqliteFactJournal(world.data.root.parent / "journal.sqlite", capacity=10)
    return FactKeeper(journal, BridgeMetrics(), SystemClock())


def test_no_pass_judges_executions_whose_facts_are_still_in_the_journal(world: World) -> None:
    from bridge.bootstrap import reconcile_job

    passes: list[str] = []

    class Reconciler:
        reader = None

        def run_once(self) -> str:
            passes.append("pass")
            return "ok"

    keeper = empty_journal(world)
    keeper.keep(ApplyStop(1, 1), "store_unavailable")  # a fact the store has not taken yet
    job = reconcile_job(world.settings, Reconciler(), world.bridge, BridgeMetrics(),  # type: ignore[arg-type]
                        keeper, recovery_deferred=False)
    assert job() is None and passes == []
    keeper.replay_once(lambda _command: None)
    job()
    assert passes == ["pass"]
