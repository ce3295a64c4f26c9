"""ProjectorThread, the CLI helpers and the outbox's bookkeeping, on each store."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from bridge.bootstrap.commands import requeue_parked_projections
from bridge.config import Settings
from bridge.jobs.project import ProjectorThread, projection_status
from bridge.storage.outbox import SqlOutbox
from legacy_adapters.schema import CrontabStatus
from legacy_adapters.status_writer import LegacyStatusWriter
from tests.conftest import Backend
from tests.projection.conftest import World, wait_for


def project_one_start_on_notify(world: World, thread: ProjectorThread) -> bool:
    """After the thread's first pass, a primary start and a notify: whether its row is applied within 10 s
    (the thread's idle poll is 30 s). The outbox is polled, not 2.x's database: a read of 2.x at the moment
    of the projector's commit would make the write find it busy."""
    cron = world.cron()
    try:
        assert wait_for(lambda: thread.passes >= 1, 5.0)
        world.primary.start(cron)
        thread.notify()
        applied = wait_for(lambda: world.outbox_states() == ["applied"], 10.0)
    finally:
        thread.close()
    return applied and world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]


def test_notify_wakes_the_thread_long_before_its_interval(world: World) -> None:
    thread = ProjectorThread(world.projector, interval_s=30).start()
    assert project_one_start_on_notify(world, thread)
    assert not thread._thread.is_alive()


def test_a_row_2x_was_busy_for_is_tried_again_after_its_backoff_not_after_the_idle_interval(world: World) -> None:
    """2.x's own readers make a projector write find the database busy now and then; the row's backoff is
    a fraction of a second, and the thread must come back for it then, not after its slow idle poll."""
    from bridge.service.clock import SystemClock
    from tests.projection.test_projector import FlakyWriter

    projector = world.projector_with(writer=FlakyWriter(world.writer, failures=1), clock=SystemClock())
    assert project_one_start_on_notify(world, ProjectorThread(projector, interval_s=30).start())
    assert world.outbox_rows()[0]["attempts"] == 1  # it did meet the busy database once


def test_a_halted_projector_logs_once_and_resumes_when_2x_is_back(
        world: World, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    cron = world.cron()
    world.primary.start(cron)
    moved = tmp_path / "moved.sqlite"
    world.legacy.database_path.rename(moved)
    projector = world.projector_with(writer=LegacyStatusWriter(world.legacy.database_path))
    thread = ProjectorThread(projector, interval_s=0.01, halted_retry_s=0.05)
    with caplog.at_level(logging.INFO, logger="bridge.projection"):
        thread.start()
        try:
            assert wait_for(lambda: thread.passes >= 4, 5.0)
            assert thread.halted == "missing"
            moved.rename(world.legacy.database_path)
            assert wait_for(lambda: world.outbox_states() == ["applied"], 5.0)
        finally:
            thread.close()
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]
    halted = [r for r in caplog.records if "PROJECTION_HALTED" in r.getMessage()]
    assert len(halted) == 1 and thread.halted is None
    assert any("resumed" in r.getMessage() for r in caplog.records)


def test_projection_status_counts_rows_by_state_and_ages_the_oldest_pending(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    world.projector.run_once()
    world.clock.advance(5_000)
    world.primary.start(cron, pid=2)
    world.primary.start(cron, pid=3)
    (first_pending, _) = [r["id"] for r in world.outbox_rows() if r["state"] == "pending"]
    world.outbox.mark_parked(first_pending, 8, "LEGACY_BUSY", world.clock.now)

    status = projection_status(SqlOutbox(world.backend.engine), now_ms=world.clock.now + 250)  # type: ignore[arg-type]

    assert status["counts"] == {"pending": 1, "applied": 1, "parked": 1}
    assert status["oldest_pending_age_ms"] == 250
    assert status["parked"] == [{"id": first_pending, "legacy_cron_id": cron, "event": "start", "attempts": 8,
                                 "last_error": "LEGACY_BUSY"}]


def test_the_cli_requeue_gives_parked_rows_a_fresh_budget(sqlite_backend: Backend, tmp_path: Path) -> None:
    outbox = SqlOutbox(sqlite_backend.engine)  # type: ignore[arg-type]
    with sqlite_backend.engine.begin() as conn:  # type: ignore[union-attr]
        from bridge.storage.runs import SqlRunStore

        SqlRunStore(conn).enqueue_projection(1, "run-1", None, "start", 1_000)
    outbox.mark_parked(outbox.due(1_000, 10)[0].id, 8, "LEGACY_BUSY", 2_000)
    settings = Settings(database_url=sqlite_backend.url or "", data_dir=tmp_path)

    assert requeue_parked_projections(settings) == 1

    (row,) = outbox.due(10**13, 10)
    assert (row.state, row.attempts) == ("pending", 0)
    assert requeue_parked_projections(settings) == 0


def test_one_projector_holds_the_lease_at_a_time(world: World) -> None:
    outbox = world.outbox
    assert outbox.hold_lease("a", 1_000, 10_000)
    assert not outbox.hold_lease("b", 2_000, 10_000)
    assert outbox.hold_lease("a", 3_000, 10_000)  # renewed
    assert outbox.hold_lease("b", 13_001, 10_000)  # a's lease ran out
    outbox.release_lease("b")
    assert outbox.hold_lease("a", 13_002, 10_000)


def test_the_serving_projector_holds_the_lease_projects_on_notify_and_lets_go_on_close(world: World) -> None:
    from bridge.bootstrap import start_serving_projector
    from bridge.service.clock import SystemClock
    from tests.support import wiring

    cron = world.cron()
    thread = start_serving_projector(wiring.store_on(world.backend.engine), world.legacy.database_path,  # type: ignore[arg-type]
                                     world.metrics, SystemClock(), interval_s=30)
    try:
        assert wait_for(lambda: thread.passes >= 1, 5.0)
        assert not world.outbox.hold_lease("someone-else", wall_ms(), 1_000)  # the thread holds it
        world.primary.start(cron)
        thread.notify()
        assert wait_for(lambda: world.outbox_states() == ["applied"], 10.0)
    finally:
        thread.close()
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]
    assert world.outbox.hold_lease("someone-else", wall_ms(), 1_000)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_drain_waits_out_the_backoff_of_the_rows_it_retried(world: World) -> None:
    from tests.projection.test_projector import FlakyWriter

    cron = world.cron()
    world.primary.start(cron)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        world.clock.advance(int(seconds * 1000))

    projector = world.projector_with(writer=FlakyWriter(world.writer, failures=2), sleep=sleep)

    assert projector.drain(timeout_s=10) == {"applied": 1, "retried": 2, "parked": 0}
    assert slept and world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]
