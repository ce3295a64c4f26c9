"""The primary-mode projector in front of 2.x's database in a bad state: it names the state, leaves the rows
pending (never parks them for it), and projects them once 2.x's database takes writes again."""

from __future__ import annotations

import logging
import os
import sqlite3

import pytest

from bridge.jobs.project import ProjectorThread
from bridge.service.clock import SystemClock
from legacy_adapters.schema import CrontabStatus
from legacy_adapters.status_writer import LegacyStatusWriter
from projections.projector import ProjectionHaltedError
from tests.projection.conftest import World, wait_for


class ReadOnlyMount(LegacyStatusWriter):
    """The writer as it sees 2.x's file on a read-only mount (root ignores file modes, so open it mode=ro)."""

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=0, isolation_level=None,
                               check_same_thread=False)


def fillers(world: World, count: int = 40) -> None:
    for i in range(count):
        world.legacy.add_cron(f"filler {i}", f"task filler{i}.sh", "0 * * * *")


def halted_reason(world: World, writer: LegacyStatusWriter) -> str:
    with pytest.raises(ProjectionHaltedError) as raised:
        world.projector_with(writer=writer).run_once()
    return raised.value.reason


def test_a_hot_journal_the_projector_cannot_roll_back_halts_it_as_hot_journal(world: World) -> None:
    fillers(world)
    cron = world.cron()
    world.primary.start(cron)
    world.legacy.leave_hot_journal()

    assert halted_reason(world, ReadOnlyMount(world.legacy.database_path)) == "hot_journal"
    (row,) = world.outbox_rows()
    assert (row["state"], row["attempts"]) == ("pending", 0)

    world.legacy.roll_back_hot_journal()  # 2.x opened it: what is left is the mount
    assert halted_reason(world, ReadOnlyMount(world.legacy.database_path)) == "read_only"
    assert world.projector_with(writer=LegacyStatusWriter(world.legacy.database_path)).run_once()["applied"] == 1
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]


def test_a_projector_with_write_access_rolls_a_hot_journal_back_as_any_2x_writer_would(world: World) -> None:
    fillers(world)
    cron = world.cron()
    world.primary.start(cron)
    journal = world.legacy.leave_hot_journal()

    assert world.projector.run_once()["applied"] == 1
    assert not journal.exists()
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]
    assert world.legacy.query("SELECT count(*) AS n FROM Crontabs WHERE name LIKE 'filler %'")[0]["n"] == 40


def test_a_truncated_database_halts_the_projector_as_corrupt_not_as_foreign(world: World) -> None:
    fillers(world, 200)
    world.primary.start(world.cron())
    os.truncate(world.legacy.database_path, world.legacy.database_path.stat().st_size // 2)
    assert halted_reason(world, LegacyStatusWriter(world.legacy.database_path)) == "corrupt"


def test_an_emptied_database_halts_the_projector_as_empty_and_nothing_is_written_into_it(world: World) -> None:
    world.primary.start(world.cron())
    os.truncate(world.legacy.database_path, 0)
    assert halted_reason(world, LegacyStatusWriter(world.legacy.database_path)) == "empty"
    assert world.legacy.database_path.stat().st_size == 0


def test_a_lock_2x_keeps_for_long_halts_the_projector_as_locked_and_never_parks_the_rows(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    holder = sqlite3.connect(world.legacy.database_path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    halts = []
    try:
        for _ in range(12):  # more passes than the retry budget of a row (8)
            try:
                world.projector.run_once()
            except ProjectionHaltedError as exc:
                halts.append(exc.reason)
            world.clock.advance(30_000)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert halts and set(halts) == {"locked"}
    (row,) = world.outbox_rows()
    assert row["state"] == "pending" and row["attempts"] < 8
    assert world.retry_metric("parked") == 0

    assert world.projector.run_once()["applied"] == 1
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]


def test_the_serving_thread_names_and_counts_the_state_and_projects_once_2x_lets_go(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    cron = world.cron()
    world.primary.start(cron)
    projector = world.projector_with(clock=SystemClock())  # real backoffs: the thread retries on its own
    counted: list[str] = []
    holder = sqlite3.connect(world.legacy.database_path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")  # 2.x stuck in a write
    thread = ProjectorThread(projector, interval_s=0.01, halted_retry_s=0.05, on_unavailable=counted.append)
    with caplog.at_level(logging.WARNING, logger="bridge.projection"):
        thread.start()
        try:
            assert wait_for(lambda: thread.halted == "locked" and len(counted) >= 3)
            holder.execute("ROLLBACK")
            assert wait_for(lambda: (world.legacy.cron_row(cron) or {}).get("status") == CrontabStatus.RUNNING)
        finally:
            holder.close()
            thread.close()
    assert set(counted) == {"locked"} and thread.halted is None
    assert len([r for r in caplog.records if "PROJECTION_HALTED" in r.getMessage()]) == 1
    assert any("resumed" in r.getMessage() and "locked" in r.getMessage() for r in caplog.records)
    (row,) = world.outbox_rows()
    assert row["state"] == "applied"
