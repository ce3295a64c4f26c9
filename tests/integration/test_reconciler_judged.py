"""A mismatch closes as resolved only when a pass judged its subject again and found agreement: an execution
left in flight by a longer grace, a cron too recent to compare or a duplicate group the pass did not read is a
fact still standing, not an agreement. (A subject no pass can judge any more, such as one outside the lookback,
is closed as expired instead: tests/integration/test_mismatch_expiry.py.)"""

from __future__ import annotations

import time

from sqlalchemy import insert

from bridge.jobs.reconcile import ReconcileSettings
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.shadow import ShadowRecorder
from bridge.storage.schema import mismatches_table
from legacy_adapters.callbacks import log_path_digest, render_status_body
from tests.integration.legacy_world import BEGIN, UNJUDGED_GRACE_S, end, start
from tests.integration.test_reconciler import World, cron
from tests.integration.test_reconciler import world as world_of_test_reconciler

world = world_of_test_reconciler  # the same 2.x double, shadow store and reconciler, on each store backend

INVALID = "invalid_legacy_value"
IN_FLIGHT = UNJUDGED_GRACE_S


def reconcile_with(world: World, **settings: int) -> list[tuple[str, int | None]]:
    world.reconciler._settings = ReconcileSettings(**{"grace_s": 0, "tolerance_s": 2, **settings})  # noqa: SLF001
    return world.reconcile()


def resolved(world: World, kind: str) -> list[bool]:
    """Each mismatch of ``kind``: closed as resolved (an expired one is closed, but not resolved)."""
    return [m["resolved_at_ms"] is not None and m["expired_reason"] is None for m in world.all_mismatches()
            if m["kind"] == kind]


def test_a_pass_with_a_longer_grace_leaves_open_the_execution_it_did_not_judge(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 61, "f.log"))
    world.via_bridge(end(c, 61, "f.log"))
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at + 30 WHERE cron_id = ?", (c,))
    assert reconcile_with(world) == [("finish_time", c)]
    assert reconcile_with(world, grace_s=IN_FLIGHT) == [("finish_time", c)]  # not judged: still a fact
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at - 30 WHERE cron_id = ?", (c,))
    assert reconcile_with(world, grace_s=IN_FLIGHT) == [("finish_time", c)]  # repaired, but not judged yet
    assert reconcile_with(world) == []  # judged again, and 2.x's row agrees now
    assert resolved(world, "finish_time") == [True]  # the same row, closed


def test_a_missing_run_stays_open_until_its_instance_is_judged_again(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 62, "m.log"))
    world.direct(end(c, 62, "m.log"))
    assert reconcile_with(world) == [("missing", c)]
    facts = CallbackFacts(c, 62, log_path_digest("m.log"), BEGIN * 1000, 3000, 0, int(time.time() * 1000))
    ShadowRecorder(world.runs).record_end(facts, lambda: ExecutionContext("scheduled_system", "test", "rev"))
    assert reconcile_with(world, grace_s=IN_FLIGHT) == [("missing", c)]
    assert reconcile_with(world) == []


def test_cron_level_mismatches_stay_open_until_the_cron_is_compared_again(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 63, "real.log"))
    world.via_bridge(end(c, 63, "other.log"))  # 2.x closes the instance but keeps the cron at status 0
    assert reconcile_with(world) == [("active_state", c)]
    assert reconcile_with(world, grace_s=IN_FLIGHT) == [("active_state", c)]  # last execution too recent
    world.direct(render_status_body(c, 1, 63, "real.log", BEGIN, 3, 0))
    assert reconcile_with(world) == []
    assert resolved(world, "active_state") == [True]


def test_an_invalid_crontabs_value_stays_open_until_the_cron_is_read_again(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 64, "w.log"))
    world.via_bridge(end(c, 64, "w.log"))
    world.legacy("UPDATE Crontabs SET last_execution_time = -5 WHERE id = ?", (c,))
    assert reconcile_with(world) == [(INVALID, c)]
    world.legacy("UPDATE Crontabs SET last_execution_time = ? WHERE id = ?", (BEGIN, c))
    assert reconcile_with(world) == []


def test_an_orphan_stays_open_until_an_instance_matches_its_run(world: World) -> None:
    c = cron(world)
    facts = CallbackFacts(c, 65, log_path_digest("o.log"), BEGIN * 1000, None, None, BEGIN * 1000)
    ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "test", "rev"))
    assert reconcile_with(world) == [("active_state", c), ("orphan", c)]
    # The Run was created a moment ago: inside a two-hour grace it is neither an orphan nor judged.
    assert reconcile_with(world, grace_s=IN_FLIGHT) == [("active_state", c), ("orphan", c)]
    world.direct(start(c, 65, "o.log"))
    assert reconcile_with(world) == []
    assert resolved(world, "orphan") == [True]


def test_duplicate_runs_stay_open_when_a_pass_reads_only_some_of_the_groups(world: World) -> None:
    crons = sorted(cron(world) for _ in range(2))
    for c in crons:
        for begin in (BEGIN, BEGIN + 60):  # one shell, two begin seconds: two Runs, both matched by 2.x
            world.via_bridge(start(c, 66, "d.log", begin))
            world.via_bridge(end(c, 66, "d.log", begin=begin))
    assert reconcile_with(world) == [("duplicate", crons[0]), ("duplicate", crons[1])]
    # One group a page: the pass reads one of the two, and cannot say the other is gone.
    assert reconcile_with(world, batch_size=1) == [("duplicate", crons[0]), ("duplicate", crons[1])]


def test_a_pass_holds_the_open_mismatches_not_2x_rows(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 67, "only.log"))  # one open mismatch: missing
    for n in range(24):  # and agreeing executions across many batches
        other = cron(world)
        world.via_bridge(start(other, 100 + n, "ok.log"))
        world.via_bridge(end(other, 100 + n, "ok.log"))
    with world.store.engine.begin() as conn:  # closed rows and other sources' kinds are not the pass's to judge
        seen = {"first_seen_ms": 1, "last_seen_ms": 1, "diff": "{}"}
        conn.execute(insert(mismatches_table), [
            {"kind": "missing", "dedupe_key": "missing:999999:i999999", "resolved_at_ms": 2, **seen},
            {"kind": "compat.unmatched_callback", "dedupe_key": "compat.unmatched_callback:999999:k",
             "resolved_at_ms": None, **seen}])
    world.reconciler._settings = ReconcileSettings(grace_s=0, batch_size=5)  # noqa: SLF001 - the setting under test
    first = world.reconciler.run_once()
    assert (first.stats["instances"], first.stats["open_mismatches"]) == (25, 0)
    second = world.reconciler.run_once()
    assert (second.stats["open_mismatches"], second.stats["judged"], second.stats["resolved"]) == (1, 1, 0)
    assert [kind for kind in world.kinds() if kind[1] == c] == [("missing", c)]
