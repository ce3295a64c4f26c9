"""The projector's footprint on 2.x's database: few, small 2.x transactions, none when nothing changes.

2.x runs its SQLite in rollback-journal mode, so every transaction the projector commits holds 2.x's only
write lock across two syncs, and 2.x's own writers wait behind it. These tests count the projector's real
2.x transactions (the COMMITs on its connection), not its method calls.
"""

from __future__ import annotations

import sqlite3
import time

from bridge.jobs.project import ProjectorThread
from legacy_adapters.schema import CrontabStatus, InstanceStatus
from legacy_adapters.status_writer import LegacyStatusWriter
from tests.legacy.conftest import StatementLog
from tests.projection.conftest import World, wait_for


class CountingWriter(StatementLog, LegacyStatusWriter):
    """The real writer, with every statement its connection runs on 2.x's database recorded."""

    @property
    def commits(self) -> int:
        return sum(1 for s in self.statements if s.strip().upper() == "COMMIT")

    @property
    def lock_takes(self) -> int:
        return sum(1 for s in self.statements if s.strip().upper() == "BEGIN IMMEDIATE")


def counting(world: World) -> CountingWriter:
    return CountingWriter(world.legacy.database_path)


def test_a_crons_start_and_end_pending_together_make_one_2x_transaction_with_the_latest_state(world: World) -> None:
    cron = world.cron()
    writer = counting(world)
    run = world.primary.start(cron, pid=4321)
    world.clock.advance(3_000)
    world.primary.finish(run, exit_code=0)

    assert world.projector_with(writer=writer).run_once() == {"applied": 2, "retried": 0, "parked": 0}

    assert writer.commits == 1
    (instance,) = world.legacy.instance_rows(cron)
    assert (instance["status"], instance["exit_code"], instance["pid"]) == (InstanceStatus.FINISHED, 0, 4321)
    row = world.legacy.cron_row(cron)
    assert row is not None and (row["status"], row["last_running_time"]) == (CrontabStatus.IDLE, 3)
    assert world.outbox.instance_id(run.attempt_id or "") == instance["id"]


def test_one_pass_writes_every_due_cron_and_all_its_pending_rows_in_one_2x_transaction(world: World) -> None:
    crons = [world.cron(f"c{i}") for i in range(4)]
    writer = counting(world)
    runs = [world.primary.start(cron, pid=100 + i) for i, cron in enumerate(crons)]
    world.clock.advance(1_000)
    second = world.primary.start(crons[0], pid=200)  # a second Attempt of one cron, still running
    for run in runs:
        world.primary.finish(run, exit_code=0)

    assert world.projector_with(writer=writer).run_once()["applied"] == 9

    assert writer.commits == 1
    assert [world.legacy.cron_row(c)["status"] for c in crons] == [  # type: ignore[index]
        CrontabStatus.RUNNING, CrontabStatus.IDLE, CrontabStatus.IDLE, CrontabStatus.IDLE]
    first_cron = world.legacy.instance_rows(crons[0])
    # In order within the cron: the Attempt that started first has the lower 2.x row id.
    assert [(i["pid"], i["status"]) for i in first_cron] == [(100, InstanceStatus.FINISHED),
                                                             (200, InstanceStatus.RUNNING)]
    assert world.outbox.instance_id(second.attempt_id or "") == first_cron[1]["id"]
    assert {r["state"] for r in world.outbox_rows()} == {"applied"}


def test_rows_that_change_nothing_in_2x_are_marked_applied_without_a_2x_transaction(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    world.clock.advance(1_000)
    world.primary.finish(run)
    world.projector.run_once()
    before = (world.legacy.cron_row(cron), world.legacy.instance_rows(cron))
    writer = counting(world)

    world.clock.advance(60_000)
    world.set_all_pending()
    assert world.projector_with(writer=writer).run_once()["applied"] == 2

    assert writer.commits == 0
    assert (world.legacy.cron_row(cron), world.legacy.instance_rows(cron)) == before  # updatedAt included
    assert {r["state"] for r in world.outbox_rows()} == {"applied"}


def test_rows_that_change_nothing_land_while_2x_holds_its_write_lock(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    world.projector.run_once()
    world.set_all_pending()
    holder = sqlite3.connect(world.legacy.database_path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert world.projector.run_once() == {"applied": 1, "retried": 0, "parked": 0}
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_read_only_2x_database_halts_the_projector_even_when_nothing_would_change(world: World) -> None:
    from projections.projector import ProjectionHaltedError
    from tests.projection.test_projector_database_states import ReadOnlyMount

    cron = world.cron()
    world.primary.start(cron)
    world.projector.run_once()
    world.set_all_pending()

    projector = world.projector_with(writer=ReadOnlyMount(world.legacy.database_path))
    try:
        projector.run_once()
        raise AssertionError("a read-only database was taken for a writable one")
    except ProjectionHaltedError as exc:
        assert exc.reason == "read_only"
    assert {r["state"] for r in world.outbox_rows()} == {"pending"}


def test_notifies_within_one_tick_are_projected_together(world: World) -> None:
    crons = [world.cron(f"c{i}") for i in range(10)]
    writer = counting(world)
    thread = ProjectorThread(world.projector_with(writer=writer), interval_s=30, tick_s=1.0).start()
    try:
        assert wait_for(lambda: thread.passes >= 1)
        for cron in crons:
            world.primary.start(cron)
            thread.notify()
            time.sleep(0.02)
        assert wait_for(lambda: world.outbox_states() == ["applied"] * len(crons))
    finally:
        thread.close()
    assert all(world.legacy.cron_row(c)["status"] == CrontabStatus.RUNNING for c in crons)  # type: ignore[index]
    # The first notify after a quiet spell is projected at once; the other nine wait for the next tick.
    assert writer.commits <= 3, writer.commits


def test_a_lone_notify_after_a_quiet_spell_is_projected_at_once(world: World) -> None:
    cron = world.cron()
    thread = ProjectorThread(world.projector, interval_s=30, tick_s=30).start()
    try:
        assert wait_for(lambda: thread.passes >= 1)
        time.sleep(0.05)
        world.primary.start(cron)
        thread.notify()
        assert wait_for(lambda: world.outbox_states() == ["applied"], 5.0)
    finally:
        thread.close()
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]


class HoldingProjector:
    """A projector whose every pass finds rows and holds 2.x's write lock for ``hold_s``."""

    backlog = False

    def __init__(self, hold_s: float) -> None:
        self.hold_s, self.held_s, self.passes_at = hold_s, 0.0, []  # type: ignore[var-annotated]

    def run_once(self, limit: int = 100) -> dict[str, int]:
        self.passes_at.append(time.monotonic())
        self.held_s += self.hold_s
        return {"applied": 1, "retried": 0, "parked": 0}

    def retry_due_in_s(self) -> float | None:
        return None  # it never retries a row


def test_passes_with_rows_are_spaced_so_the_projector_keeps_its_share_of_2xs_lock() -> None:
    projector = HoldingProjector(hold_s=0.01)
    thread = ProjectorThread(projector, interval_s=0.01, tick_s=0.05, lock_held=lambda: projector.held_s,  # type: ignore[arg-type]
                             lock_share=0.02, max_tick_s=5.0).start()
    try:
        time.sleep(1.2)
    finally:
        thread.close()
    assert abs(thread.spacing_s - 0.5) < 1e-9  # 10 ms held per pass is 2 % of 0.5 s
    gaps = [b - a for a, b in zip(projector.passes_at, projector.passes_at[1:])]
    assert len(projector.passes_at) <= 4 and all(gap >= 0.45 for gap in gaps), gaps


def test_the_spacing_never_exceeds_its_cap_nor_drops_below_the_tick() -> None:
    slow, fast = HoldingProjector(hold_s=1.0), HoldingProjector(hold_s=0.0001)
    for projector, expected in ((slow, 2.0), (fast, 0.25)):
        thread = ProjectorThread(projector, interval_s=0.01, tick_s=0.25, lock_held=lambda p=projector: p.held_s,  # type: ignore[arg-type, misc]
                                 lock_share=0.005, max_tick_s=2.0).start()
        try:
            assert wait_for(lambda p=projector: len(p.passes_at) >= 2, 5.0)  # type: ignore[misc]
        finally:
            thread.close()
        assert thread.spacing_s == expected
