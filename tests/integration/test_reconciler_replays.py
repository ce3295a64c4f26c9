"""Replayed callbacks make 2.x record one execution more than once (docs/legacy-2x.md#what-a-callback-writes: a start
inserts a row, an end closes every open row of the cron and pid). That is its own finding; the Run is compared with one
row (a closed one first, then the lowest id) and never with the rows the replays added."""

from __future__ import annotations

import json
import time

from bridge.jobs.reconcile import ReconcileSettings
from tests.integration.legacy_world import UNJUDGED_GRACE_S, end, start
from tests.integration.test_reconciler import World, cron
from tests.integration.test_reconciler import world as world_of_test_reconciler

world = world_of_test_reconciler  # the same 2.x double, shadow store and reconciler, on each store backend

REPLAYED = "legacy_duplicate_instance"


def later(world: World, seconds: int) -> None:
    """2.x stamps its own clock on the rows a replay adds and closes: the replay comes ``seconds`` later."""
    world.double._clock = lambda: time.time() + seconds  # noqa: SLF001 - 2.x's clock is the double's


def replayed(world: World, c: int, pid: int, log: str, seconds: int = 600) -> None:
    """One execution's start and end through the bridge, then the same two callbacks again ``seconds`` on."""
    world.via_bridge(start(c, pid, log))
    world.via_bridge(end(c, pid, log))
    later(world, seconds)
    world.via_bridge(start(c, pid, log))
    world.via_bridge(end(c, pid, log))


def run_id(world: World, c: int, pid: int, log: str) -> str:
    run = world.run_row(c, pid, log)
    assert run is not None
    return str(run["id"])


def replayed_diff(world: World) -> dict[str, object]:
    (found,) = world.store.open_mismatches(REPLAYED)
    return dict(json.loads(found["diff"]), run_id=found["run_id"])


def test_a_replayed_start_and_end_are_one_execution_recorded_twice_not_a_finish_time(world: World) -> None:
    c = cron(world)
    replayed(world, c, 71, "r.log")
    first, again = world.data.instance_rows(c)
    assert again["finished_at"] - first["finished_at"] >= 600  # 2.x's own finish time for the replay
    assert world.reconcile() == [(REPLAYED, c)]
    assert replayed_diff(world) == {"rows": 2, "run_id": run_id(world, c, 71, "r.log"),
                                    "instances": [{"id": first["id"], "status": "finished"},
                                                  {"id": again["id"], "status": "finished"}]}


def test_a_replayed_start_after_the_end_leaves_a_running_row_the_run_is_not_compared_with(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 72, "s.log"))
    world.via_bridge(end(c, 72, "s.log", 4))
    world.via_bridge(start(c, 72, "s.log"))  # 2.x opens a second row and shows the cron running again
    first, again = world.data.instance_rows(c)
    assert world.reconcile() == [("active_state", c), (REPLAYED, c)]  # no terminal_status against the new row
    assert replayed_diff(world)["instances"] == [{"id": first["id"], "status": "error"},
                                                 {"id": again["id"], "status": "running"}]


def test_a_replay_much_later_is_found_in_another_batch(world: World) -> None:
    world.reconciler._settings = ReconcileSettings(grace_s=0, batch_size=2)  # noqa: SLF001 - the setting under test
    c = cron(world)
    world.via_bridge(start(c, 73, "b.log"))
    world.via_bridge(end(c, 73, "b.log"))
    for n in range(3):  # rows of other crons in between: the replay lands two batches on
        other = cron(world)
        world.via_bridge(start(other, 80 + n, "o.log"))
        world.via_bridge(end(other, 80 + n, "o.log"))
    later(world, 3600)
    world.via_bridge(start(c, 73, "b.log"))
    world.via_bridge(end(c, 73, "b.log"))
    first, again = world.data.instance_rows(c)
    assert world.reconcile() == [(REPLAYED, c)]
    assert replayed_diff(world)["instances"] == [{"id": first["id"], "status": "finished"},
                                                 {"id": again["id"], "status": "finished"}]
    assert world.reconcile() == [(REPLAYED, c)]  # seen again: the same row, still open


def test_an_execution_recorded_twice_closes_once_2x_holds_one_row(world: World) -> None:
    c = cron(world)
    replayed(world, c, 74, "c.log")
    assert world.reconcile() == [(REPLAYED, c)]
    _, again = world.data.instance_rows(c)
    world.legacy("DELETE FROM RunningInstances WHERE id = ?", (again["id"],))
    assert world.reconcile() == []
    (closed,) = world.all_mismatches()
    assert closed["kind"] == REPLAYED and closed["resolved_at_ms"] is not None


def test_a_replay_inside_the_grace_window_is_not_judged(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 75, "g.log"))
    world.via_bridge(start(c, 75, "g.log"))
    world.reconciler._settings = ReconcileSettings(grace_s=UNJUDGED_GRACE_S)  # noqa: SLF001 - the setting under test
    assert world.reconcile() == []


def test_a_row_matched_in_an_earlier_batch_is_counted_when_it_is_no_longer_near_its_run(world: World) -> None:
    world.reconciler._settings = ReconcileSettings(grace_s=0, batch_size=1)  # noqa: SLF001 - one row a batch
    c = cron(world)
    replayed(world, c, 76, "n.log")
    first, again = world.data.instance_rows(c)
    # 2.x's insertion stamp of the first row no longer places it near the Run's creation (as after a clock step).
    world.legacy("UPDATE RunningInstances SET createdAt = '2001-01-01 00:00:00.000 +00:00' WHERE id = ?",
                 (first["id"],))
    assert world.reconcile() == [(REPLAYED, c)]
    assert replayed_diff(world) == {"rows": 2, "run_id": run_id(world, c, 76, "n.log"),
                                    "instances": [{"id": again["id"], "status": "finished"}]}
