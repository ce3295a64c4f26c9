"""A mismatch no pass can judge any more (its 2.x row or Run past the lookback, its cron deleted in 2.x, its row
gone, a callback the bridge could not place once it is older than the lookback) is closed as expired, with the
reason and the pass that decided it, never deleted and never counted as an agreement; seen again, it is open."""

from __future__ import annotations

import time

from sqlalchemy import insert, select

from bridge.jobs.reconcile import ReconcileSettings
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.shadow import ShadowRecorder
from bridge.storage.schema import mismatches_table, reconcile_passes_table
from legacy_adapters.callbacks import log_path_digest
from tests.integration.legacy_world import BEGIN, end, start
from tests.integration.test_reconciler import World, cron
from tests.integration.test_reconciler import world as world_of_test_reconciler
from tests.support.routes import SHELL_STATUS

world = world_of_test_reconciler  # the same 2.x double, shadow store and reconciler, on each store backend

NOTHING_IN_WINDOW = 0  # a lookback of 0 s: every instance, Run and cron of the scenario is older than it


def reconcile_with(world: World, **settings: int) -> list[tuple[str, int | None]]:
    world.reconciler._settings = ReconcileSettings(**{"grace_s": 0, "tolerance_s": 2, **settings})  # noqa: SLF001
    return world.reconcile()


def states(world: World, kind: str) -> list[str]:
    """Each mismatch of ``kind``: open, resolved, or expired:<reason>."""
    t = mismatches_table
    with world.store.read() as conn:
        rows = conn.execute(select(t.c.resolved_at_ms, t.c.expired_reason).where(t.c.kind == kind).order_by(t.c.id))
        return ["open" if at is None else f"expired:{why}" if why else "resolved" for at, why in rows]


def closing_passes(world: World, kind: str) -> list[int | None]:
    t = mismatches_table
    with world.store.read() as conn:
        return [row[0] for row in conn.execute(select(t.c.closed_by_pass).where(t.c.kind == kind).order_by(t.c.id))]


def last_pass_id(world: World) -> int:
    t = reconcile_passes_table
    with world.store.read() as conn:
        return int(conn.execute(select(t.c.id).order_by(t.c.id.desc()).limit(1)).scalar_one())


def test_a_mismatch_on_a_2x_row_past_the_lookback_expires_with_its_reason_and_pass(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 81, "x.log"))
    prepared = world.interceptor.before_forward(SHELL_STATUS, end(c, 81, "x.log", 0))
    world.direct(end(c, 81, "x.log", 3))  # 2.x saw exit 3, the shadow sees exit 0
    world.interceptor.after_forward(prepared, 200)
    assert reconcile_with(world) == [("exit_code", c), ("terminal_status", c)]

    assert reconcile_with(world, lookback_s=NOTHING_IN_WINDOW) == []

    assert states(world, "exit_code") == states(world, "terminal_status") == ["expired:past_lookback"]
    assert closing_passes(world, "exit_code") == [last_pass_id(world)]
    assert world.reconciler.run_once().stats["expired"] == 0  # closed once; the row is never deleted
    assert len(world.all_mismatches()) == 2


def test_an_expired_mismatch_found_again_is_open_again_without_its_reason(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 82, "m.log"))
    world.direct(end(c, 82, "m.log"))
    assert reconcile_with(world) == [("missing", c)]
    assert reconcile_with(world, lookback_s=NOTHING_IN_WINDOW) == []
    assert states(world, "missing") == ["expired:past_lookback"]

    assert reconcile_with(world) == [("missing", c)]  # a longer lookback judges the row again, and finds it
    assert states(world, "missing") == ["open"] and closing_passes(world, "missing") == [None]


def test_an_orphan_run_past_the_lookback_expires(world: World) -> None:
    c = cron(world)
    facts = CallbackFacts(c, 83, log_path_digest("o.log"), BEGIN * 1000, None, None, BEGIN * 1000)
    ShadowRecorder(world.runs).record_start(facts, ExecutionContext("scheduled_system", "test", "rev"))
    assert reconcile_with(world) == [("active_state", c), ("orphan", c)]

    assert reconcile_with(world, lookback_s=NOTHING_IN_WINDOW) == []

    assert states(world, "orphan") == ["expired:past_lookback"]
    assert states(world, "active_state") == ["expired:past_lookback"]  # no Run of the cron in the lookback


def test_a_cron_level_mismatch_of_a_cron_2x_deleted_expires_as_cron_deleted(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 84, "real.log"))
    world.via_bridge(end(c, 84, "other.log"))  # 2.x closes the instance but keeps the cron at status 0
    assert reconcile_with(world) == [("active_state", c)]
    world.legacy("DELETE FROM Crontabs WHERE id = ?", (c,))

    assert reconcile_with(world) == []

    assert states(world, "active_state") == ["expired:cron_deleted"]


def test_a_mismatch_whose_2x_row_is_gone_expires_as_legacy_row_gone(world: World) -> None:
    c = cron(world)
    world.direct(start(c, 85, "g.log"))
    world.direct(end(c, 85, "g.log"))
    assert reconcile_with(world) == [("missing", c)]
    world.legacy("DELETE FROM RunningInstances WHERE cron_id = ?", (c,))

    assert reconcile_with(world) == []

    assert states(world, "missing") == ["expired:legacy_row_gone"]


def test_a_mismatch_judged_in_the_lookback_is_never_expired(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 86, "f.log"))
    world.via_bridge(end(c, 86, "f.log"))
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at + 30 WHERE cron_id = ?", (c,))
    assert reconcile_with(world) == [("finish_time", c)]
    assert reconcile_with(world) == [("finish_time", c)]
    world.legacy("UPDATE RunningInstances SET finished_at = finished_at - 30 WHERE cron_id = ?", (c,))
    assert reconcile_with(world) == []
    assert states(world, "finish_time") == ["resolved"]
    assert closing_passes(world, "finish_time") == [last_pass_id(world)]


def test_a_callback_the_bridge_could_not_place_expires_once_older_than_the_lookback(world: World) -> None:
    now_ms = int(time.time() * 1000)
    week_ms = ReconcileSettings().lookback_s * 1000
    with world.store.engine.begin() as conn:
        conn.execute(insert(mismatches_table), [
            {"kind": kind, "dedupe_key": f"{kind}:7:{n}", "legacy_cron_id": 7, "first_seen_ms": seen,
             "last_seen_ms": seen, "diff": "{}"}
            for n, (kind, seen) in enumerate([("compat.unmatched_callback", now_ms - week_ms - 60_000),
                                              ("compat.ambiguous_callback", now_ms - week_ms - 60_000),
                                              ("compat.unmatched_callback", now_ms - 60_000)])])

    assert world.reconciler.run_once().stats["expired"] == 2

    assert states(world, "compat.unmatched_callback") == ["expired:past_lookback", "open"]
    assert states(world, "compat.ambiguous_callback") == ["expired:past_lookback"]
