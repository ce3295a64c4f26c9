"""Primary mode end to end on each store: Run facts + outbox rows in the bridge store, projected into a real 2.x
database.sqlite (2.x's exact DDL) by the Projector, with retries, parking, adoption after a crash and halting."""

from __future__ import annotations

import logging
import shutil
import sqlite3
from contextlib import closing
from typing import Any

import pytest

from legacy_adapters.schema import CRONTABS_DDL, CrontabStatus, InstanceStatus, format_updated_at
from legacy_adapters.status_writer import LegacyBusyError, LegacyStatusWriter
from projections.projector import ProjectionHaltedError
from tests.projection.conftest import ON_DISK_STAMP, T0_MS, World


def without_stamp(rows: list[dict[str, Any]] | dict[str, Any] | None) -> Any:
    if isinstance(rows, list):
        return [without_stamp(r) for r in rows]
    return {k: v for k, v in (rows or {}).items() if k != "updatedAt"}


def test_a_start_shows_the_cron_running_with_pid_log_path_and_start_in_seconds(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron, pid=4321, log_path="sample_1/2026-12-02-13-01-37-123.log")

    assert world.projector.run_once() == {"applied": 1, "retried": 0, "parked": 0}

    row = world.legacy.cron_row(cron)
    assert row is not None
    assert (row["status"], row["pid"], row["log_path"]) == (0, 4321, "sample_1/2026-12-02-13-01-37-123.log")
    assert row["last_execution_time"] == T0_MS // 1000 == 1_796_216_497  # seconds, never milliseconds
    (instance,) = world.legacy.instance_rows(cron)
    assert (instance["status"], instance["pid"], instance["log_path"]) == (0, 4321, run.log_path)
    assert (instance["started_at"], instance["finished_at"], instance["exit_code"]) == (T0_MS // 1000, None, None)
    assert world.outbox_rows()[0]["state"] == "applied" and world.retry_metric("applied") == 1


def test_an_end_with_exit_0_idles_the_cron_and_finishes_the_instance(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    world.projector.run_once()
    world.clock.advance(7_400)
    world.primary.finish(run, exit_code=0)

    world.projector.run_once()

    row = world.legacy.cron_row(cron)
    assert row is not None and row["status"] == CrontabStatus.IDLE and row["last_running_time"] == 7
    assert row["pid"] == 4321  # 2.x never clears pid either
    (instance,) = world.legacy.instance_rows(cron)
    assert instance["status"] == InstanceStatus.FINISHED and instance["exit_code"] == 0
    assert instance["finished_at"] == (T0_MS + 7_400) // 1000


def test_an_end_with_exit_3_marks_the_instance_error(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    world.clock.advance(2_000)
    world.primary.finish(run, exit_code=3)

    world.projector.run_once()

    (instance,) = world.legacy.instance_rows(cron)
    assert (instance["status"], instance["exit_code"]) == (InstanceStatus.ERROR, 3)
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]


def test_a_cancel_stops_the_instance_with_143_like_stop_instance(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    world.projector.run_once()
    world.clock.advance(1_000)
    world.primary.cancel(run)

    world.projector.run_once()

    (instance,) = world.legacy.instance_rows(cron)
    assert (instance["status"], instance["exit_code"]) == (InstanceStatus.STOPPED, 143)
    assert instance["finished_at"] == (T0_MS + 1_000) // 1000
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]


def test_two_concurrent_runs_keep_the_cron_running_until_both_have_ended(world: World) -> None:
    cron = world.cron()
    first = world.primary.start(cron, pid=100)
    world.clock.advance(1_000)
    second = world.primary.start(cron, pid=200)
    world.projector.run_once()
    assert world.legacy.cron_row(cron)["pid"] == 200  # type: ignore[index]

    world.clock.advance(1_000)
    world.primary.finish(second)
    world.projector.run_once()
    row = world.legacy.cron_row(cron)
    # Still running; the pid is now the one of the only Attempt still alive.
    assert row is not None and (row["status"], row["pid"]) == (CrontabStatus.RUNNING, 100)

    world.clock.advance(1_000)
    world.primary.finish(first)
    world.projector.run_once()

    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]
    instances = world.legacy.instance_rows(cron)
    assert [(i["pid"], i["status"]) for i in instances] == [(100, 1), (200, 1)]


def test_a_queued_run_shows_queued_until_it_is_dispatched(world: World) -> None:
    cron = world.cron()
    world.primary.queue(cron)

    world.projector.run_once()

    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.QUEUED  # type: ignore[index]
    assert world.legacy.instance_rows(cron) == []


def test_only_the_oldest_pending_row_of_a_cron_is_due_and_a_row_in_backoff_holds_back_its_cron(
        world: World) -> None:
    cron_a, cron_b = world.cron("a"), world.cron("b")
    a1 = world.primary.start(cron_a)
    world.primary.start(cron_b)
    world.primary.finish(a1)

    due = world.outbox.due(world.clock.now, 100)
    assert [(r.legacy_cron_id, r.event) for r in due] == [(cron_a, "start"), (cron_b, "start")]
    world.outbox.mark_retry(due[0].id, 1, world.clock.now + 1_000, "LEGACY_BUSY")

    assert [(r.legacy_cron_id, r.event) for r in world.outbox.due(world.clock.now, 100)] == [(cron_b, "start")]
    world.clock.advance(1_000)
    assert [(r.legacy_cron_id, r.event) for r in world.outbox.due(world.clock.now, 100)] == [
        (cron_a, "start"), (cron_b, "start")]


def test_rows_of_one_cron_are_applied_in_order(world: World) -> None:
    cron = world.cron()
    seen: list[list[tuple[int, int | None]]] = []
    original = world.writer.apply_batch

    def spy(writes: Any, now_ms: int) -> list[int | None]:
        seen.append([(w[2].status if w[2] else -1, w[3]) for w in writes])
        return original(writes, now_ms)

    world.writer.apply_batch = spy  # type: ignore[method-assign]
    run = world.primary.start(cron)
    assert world.projector.run_once()["applied"] == 1
    world.clock.advance(1_000)
    world.primary.finish(run, exit_code=0)
    assert world.projector.run_once()["applied"] == 1

    (instance,) = world.legacy.instance_rows(cron)
    # The start row (inserting the instance) went first; the end row found the instance through the mapping.
    # Rows of one cron that are pending together coalesce into one write of the latest state instead
    # (test_projector_footprint.py).
    assert seen == [[(0, None)], [(1, instance["id"])]]
    assert [r["state"] for r in world.outbox_rows()] == ["applied", "applied"]


def test_a_batch_takes_the_oldest_row_of_each_cron_in_one_2x_transaction(world: World) -> None:
    crons = [world.cron(f"c{i}") for i in range(3)]
    for cron in crons:
        world.primary.start(cron)
    batches: list[int] = []
    original = world.writer.apply_batch

    def spy(writes: Any, now_ms: int) -> list[int | None]:
        batches.append(len(writes))
        return original(writes, now_ms)

    world.writer.apply_batch = spy  # type: ignore[method-assign]
    assert world.projector.run_once()["applied"] == 3
    assert batches == [3]
    assert [world.legacy.cron_row(c)["status"] for c in crons] == [0, 0, 0]  # type: ignore[index]


def test_applying_the_same_rows_again_leaves_2x_exactly_as_it_was(world: World) -> None:
    cron = world.cron()
    one = world.primary.start(cron, pid=100)
    world.clock.advance(1_500)
    two = world.primary.start(cron, pid=200)
    world.clock.advance(1_500)
    world.primary.finish(one, exit_code=0)
    world.primary.cancel(two)
    world.projector.run_once()
    before_cron, before_instances = world.legacy.cron_row(cron), world.legacy.instance_rows(cron)

    world.clock.advance(60_000)
    world.set_all_pending()
    assert world.projector.run_once()["applied"] == 4

    assert without_stamp(world.legacy.cron_row(cron)) == without_stamp(before_cron)
    assert without_stamp(world.legacy.instance_rows(cron)) == without_stamp(before_instances)
    assert len(before_instances) == 2


def hold_write_lock(path: Any) -> sqlite3.Connection:
    """Another writer (2.x itself) inside BEGIN IMMEDIATE on database.sqlite."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE Apps SET name = name")
    return conn


def test_a_busy_2x_database_is_retried_and_the_row_lands_after_the_holder_releases(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    holder = hold_write_lock(world.legacy.database_path)
    try:
        assert world.projector.run_once() == {"applied": 0, "retried": 1, "parked": 0}
        (row,) = world.outbox_rows()
        assert (row["state"], row["attempts"], row["last_error"]) == ("pending", 1, "LEGACY_BUSY")
        assert T0_MS < row["next_attempt_at_ms"] <= T0_MS + 100
        assert world.projector.run_once()["retried"] == 0  # in backoff: not due yet
    finally:
        holder.execute("COMMIT")
        holder.close()
    world.clock.advance(100)

    assert world.projector.run_once()["applied"] == 1
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]
    assert world.retry_metric("retried") == 1 and world.retry_metric("applied") == 1


def test_a_reader_holding_2x_open_makes_the_commit_busy_and_nothing_is_half_written(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    reader = sqlite3.connect(world.legacy.database_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM Crontabs").fetchone()  # SHARED lock: our COMMIT cannot go EXCLUSIVE
    try:
        assert world.projector.run_once()["retried"] == 1
    finally:
        reader.execute("COMMIT")
        reader.close()
    assert world.legacy.instance_rows(cron) == []
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]
    world.clock.advance(1_000)
    assert world.projector.run_once()["applied"] == 1


class FlakyWriter:
    def __init__(self, real: LegacyStatusWriter, failures: int, error: Exception | None = None) -> None:
        self.real, self.failures, self.error = real, failures, error or LegacyBusyError("write")

    def apply(self, *args: Any) -> int | None:
        return self.apply_batch([args[:4]], args[4])[0]

    def apply_batch(self, writes: Any, now_ms: int) -> list[int | None]:
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        return self.real.apply_batch(writes, now_ms)


class PoisonedCron:
    """Fails every transaction that includes one cron; the others would go through."""

    def __init__(self, real: LegacyStatusWriter, cron_id: int) -> None:
        self.real, self.cron_id = real, cron_id

    def apply(self, *args: Any) -> int | None:
        return self.apply_batch([args[:4]], args[4])[0]

    def apply_batch(self, writes: Any, now_ms: int) -> list[int | None]:
        if any(w[0] == self.cron_id for w in writes):
            raise ValueError("cannot project this one")
        return self.real.apply_batch(writes, now_ms)


def test_a_row_that_keeps_failing_is_parked_counted_and_lands_after_requeue(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    cron = world.cron()
    run = world.primary.start(cron, log_path="secret_dir/run.log")
    projector = world.projector_with(writer=FlakyWriter(world.writer, failures=10), max_attempts=3)

    with caplog.at_level(logging.WARNING, logger="bridge.projection"):
        for _ in range(5):
            projector.run_once()
            world.clock.advance(30_000)

    (row,) = world.outbox_rows()
    assert (row["state"], row["attempts"], row["last_error"]) == ("parked", 3, "LEGACY_BUSY")
    assert world.outbox.counts() == {"pending": 0, "applied": 0, "parked": 1}
    assert [r.id for r in world.outbox.parked(10)] == [row["id"]]
    assert world.retry_metric("retried") == 2 and world.retry_metric("parked") == 1
    parked_lines = [r.getMessage() for r in caplog.records if "parked" in r.getMessage()]
    assert len(parked_lines) == 1 and "secret_dir" not in parked_lines[0] and run.run_id not in parked_lines[0]
    assert world.legacy.instance_rows(cron) == []

    assert world.outbox.requeue_parked(world.clock.now) == 1
    assert world.projector.run_once()["applied"] == 1
    assert world.outbox.counts() == {"pending": 0, "applied": 1, "parked": 0}
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.RUNNING  # type: ignore[index]


class Killed(Exception):
    pass


class DiesAfter2xCommitted:
    """The outbox, except that the process dies right after 2.x committed, before the store records it."""

    def __init__(self, real: Any) -> None:
        self.real, self.armed = real, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def complete(self, done: Any, at_ms: int) -> None:
        if self.armed:
            self.armed = False
            raise Killed("complete")
        self.real.complete(done, at_ms)


@pytest.mark.parametrize("later", ["start_only", "with_end"])
def test_a_projector_killed_after_writing_2x_does_not_duplicate_the_instance(world: World, later: str) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    with pytest.raises(Killed):
        world.projector_with(outbox=DiesAfter2xCommitted(world.outbox)).run_once()
    assert len(world.legacy.instance_rows(cron)) == 1
    assert world.outbox_rows()[0]["state"] == "pending" and world.outbox.instance_id(run.attempt_id or "") is None
    clean_cron = world.cron("clean")
    clean = world.primary.start(clean_cron, pid=run.pid, started_at_ms=run.started_at_ms)
    if later == "with_end":
        world.clock.advance(2_000)
        world.primary.finish(run, exit_code=0)
        world.primary.finish(clean, exit_code=0)

    assert world.projector.run_once()["applied"] == (4 if later == "with_end" else 2)

    (instance,) = world.legacy.instance_rows(cron)
    assert world.outbox.instance_id(run.attempt_id or "") == instance["id"]
    (reference,) = world.legacy.instance_rows(clean_cron)  # the same execution, never interrupted
    strip = {"id", "cron_id", "log_path", "createdAt", "updatedAt"}
    assert {k: v for k, v in instance.items() if k not in strip} == {
        k: v for k, v in reference.items() if k not in strip}
    expected = CrontabStatus.IDLE if later == "with_end" else CrontabStatus.RUNNING
    assert world.legacy.cron_row(cron)["status"] == expected  # type: ignore[index]


def test_a_row_that_fails_on_its_own_is_found_in_its_batch_and_the_others_land(world: World) -> None:
    good, bad = world.cron("good"), world.cron("bad")
    world.primary.start(good)
    world.primary.start(bad)
    projector = world.projector_with(writer=PoisonedCron(world.writer, bad))

    assert projector.run_once() == {"applied": 1, "retried": 1, "parked": 0}

    states = {r["legacy_cron_id"]: (r["state"], r["attempts"], r["last_error"]) for r in world.outbox_rows()}
    assert states == {good: ("applied", 0, None), bad: ("pending", 1, "ValueError")}


def _missing(world: World) -> LegacyStatusWriter:
    return LegacyStatusWriter(world.legacy.root / "db" / "gone.sqlite")


def _read_only(world: World) -> LegacyStatusWriter:
    copy = world.legacy.root / "db" / "copy.sqlite"
    shutil.copy(world.legacy.database_path, copy)
    copy.chmod(0o444)

    class OpenedReadOnly(LegacyStatusWriter):
        # root ignores file modes, so also open it the way a read-only mount would behave.
        def _connect(self) -> sqlite3.Connection:
            return sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True, timeout=0, isolation_level=None)

    return OpenedReadOnly(copy)


def _not_2x(world: World) -> LegacyStatusWriter:
    other = world.legacy.root / "db" / "other.sqlite"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    return LegacyStatusWriter(other)


def _no_instances(world: World) -> LegacyStatusWriter:
    other = world.legacy.root / "db" / "old.sqlite"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute(CRONTABS_DDL)
    return LegacyStatusWriter(other)


def _garbage(world: World) -> LegacyStatusWriter:
    other = world.legacy.root / "db" / "garbage.sqlite"
    other.write_bytes(b"this is not an sqlite file at all" * 100)
    return LegacyStatusWriter(other)


@pytest.mark.parametrize("make_writer, reason, words", [
    (_missing, "missing", "no such file"),
    (_read_only, "read_only", "readonly database"),
    (_not_2x, "not_legacy", "no Crontabs table"),
    (_no_instances, "not_legacy", "no RunningInstances table"),
    (_garbage, "not_legacy", "not an SQLite database"),
], ids=["missing", "read_only", "not_2x", "no_instances_table", "not_sqlite"])
def test_a_2x_database_that_cannot_take_the_projection_halts_it_and_nothing_is_marked_applied(
        world: World, make_writer: Any, reason: str, words: str) -> None:
    cron = world.cron()
    world.primary.start(cron)
    projector = world.projector_with(writer=make_writer(world))

    with pytest.raises(ProjectionHaltedError) as raised:
        projector.run_once()

    assert raised.value.code == "PROJECTION_HALTED" and raised.value.reason == reason
    assert words in raised.value.message and raised.value.message.startswith("projection halted: legacy database")
    (row,) = world.outbox_rows()
    assert (row["state"], row["attempts"], row["applied_at_ms"]) == ("pending", 0, None)
    assert world.retry_metric("failed") == 1 and world.retry_metric("applied") == 0
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]


def test_updated_at_is_written_in_2x_on_disk_format(world: World) -> None:
    cron = world.cron()
    world.primary.start(cron)
    world.clock.advance(456)

    world.projector.run_once()

    stamp = format_updated_at(T0_MS + 456)
    assert stamp == "2026-12-02 13:01:37.579 +00:00"
    row = world.legacy.cron_row(cron)
    (instance,) = world.legacy.instance_rows(cron)
    assert row is not None and row["updatedAt"] == stamp and ON_DISK_STAMP.match(row["updatedAt"])
    assert instance["createdAt"] == instance["updatedAt"] == stamp


def test_a_cron_deleted_in_2x_keeps_no_crontabs_row_but_still_gets_its_instance(world: World) -> None:
    world.cron()
    world.primary.start(999)

    assert world.projector.run_once()["applied"] == 1

    assert world.legacy.cron_row(999) is None
    assert [i["status"] for i in world.legacy.instance_rows(999)] == [0]


def test_legacy_owned_shadow_runs_are_not_projected(world: World) -> None:
    from bridge.service.callback_facts import CallbackFacts, ExecutionContext
    from bridge.service.shadow import ShadowRecorder

    cron = world.cron()
    ShadowRecorder(world.runs).record_start(
        CallbackFacts(cron_id=cron, pid=55, log_ref="x", started_at_ms=T0_MS, duration_ms=None, exit_code=None,
                      received_at_ms=T0_MS), ExecutionContext(origin="manual", evidence="test", task_revision="r"))
    run = world.primary.start(cron, pid=66)
    world.projector.run_once()
    row = world.legacy.cron_row(cron)
    assert row is not None and (row["status"], row["pid"]) == (CrontabStatus.RUNNING, 66)

    world.clock.advance(1_000)
    world.primary.finish(run)
    world.projector.run_once()

    # The shadow Run (2.x's own execution) is still active, but it is 2.x's to show, not the projection's.
    assert world.legacy.cron_row(cron)["status"] == CrontabStatus.IDLE  # type: ignore[index]
    assert [i["pid"] for i in world.legacy.instance_rows(cron)] == [66]


def test_the_projection_never_touches_run_facts(world: World) -> None:
    cron = world.cron()
    run = world.primary.start(cron)
    before = (world.runs.get_run(run.run_id), world.runs.get_attempts(run.run_id))
    world.projector_with(writer=FlakyWriter(world.writer, failures=1, error=RuntimeError("boom"))).run_once()
    world.clock.advance(1_000)
    world.projector.run_once()

    assert (world.runs.get_run(run.run_id), world.runs.get_attempts(run.run_id)) == before


def test_a_primary_execution_recorded_from_its_callbacks_is_projected_like_2x_would_show_it(world: World) -> None:
    from bridge.service.callback_facts import CallbackFacts, ExecutionContext
    from bridge.service.shadow import ShadowRecorder

    cron = world.cron()
    recorder = ShadowRecorder(world.runs)
    context = ExecutionContext(origin="manual", evidence="test", task_revision="r", mode="primary")
    log_path = "sample_1/2026-12-02-13-01-37-123.log"
    begin_ms = (T0_MS // 1000) * 1000

    def callback(exit_code: int | None = None, duration_ms: int | None = None) -> CallbackFacts:
        return CallbackFacts(cron_id=cron, pid=10325, log_ref="digest", started_at_ms=begin_ms,
                             duration_ms=duration_ms, exit_code=exit_code, received_at_ms=world.clock.now,
                             log_path=log_path)

    recorder.record_start(callback(), context)
    world.projector.run_once()
    row = world.legacy.cron_row(cron)
    assert row is not None and (row["status"], row["pid"], row["log_path"]) == (0, 10325, log_path)
    assert row["last_execution_time"] == begin_ms // 1000

    world.clock.advance(2_000)
    recorder.record_end(callback(exit_code=3, duration_ms=2_000), lambda: context)
    world.projector.run_once()

    row = world.legacy.cron_row(cron)
    (instance,) = world.legacy.instance_rows(cron)
    assert row is not None and (row["status"], row["last_running_time"]) == (CrontabStatus.IDLE, 2)
    assert (instance["status"], instance["exit_code"], instance["log_path"]) == (3, 3, log_path)
    assert instance["started_at"] == begin_ms // 1000 and instance["finished_at"] == world.clock.now // 1000
