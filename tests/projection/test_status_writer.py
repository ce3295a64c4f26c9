"""LegacyStatusWriter against 2.x's exact DDL: only projected columns, 2.x's encodings, never waits on 2.x's lock."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from contextlib import closing

import pytest

from legacy_adapters.schema import InstanceStatus, format_updated_at
from legacy_adapters.status_writer import LegacyBusyError, LegacyStatusWriter
from legacy_adapters.testing.datadir import LegacyDataDir
from projections.legacy_status import CrontabProjection, InstanceProjection

NOW_MS = 1_796_216_500_000
RUNNING = CrontabProjection(status=0, pid=4321, log_path="sample_1/a.log", last_execution_time=1_796_216_497,
                            last_running_time=None)


def instance(cron_id: int, **kw: object) -> InstanceProjection:
    values: dict[str, object] = {"cron_id": cron_id, "pid": 4321, "log_path": "sample_1/a.log",
                                 "started_at": 1_796_216_497, "finished_at": None, "status": 0, "exit_code": None}
    values.update(kw)
    return InstanceProjection(**values)  # type: ignore[arg-type]


@pytest.fixture
def writer(legacy: LegacyDataDir) -> LegacyStatusWriter:
    return LegacyStatusWriter(legacy.database_path)


def test_only_the_projected_columns_change(legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *", labels=["a"], last_running_time=9)
    before = legacy.cron_row(cron)

    writer.apply(cron, RUNNING, None, None, NOW_MS)

    after = legacy.cron_row(cron)
    assert before is not None and after is not None
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {"status", "pid", "log_path", "last_execution_time", "updatedAt"}
    assert after["last_running_time"] == 9  # None: left as it was
    assert after["updatedAt"] == format_updated_at(NOW_MS)


def test_none_leaves_pid_and_log_path_as_they_are(legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *", pid=77, log_path="old.log")

    writer.apply(cron, CrontabProjection(1, None, None, None, 5), None, None, NOW_MS)

    row = legacy.cron_row(cron)
    assert row is not None
    assert (row["status"], row["pid"], row["log_path"], row["last_running_time"]) == (1, 77, "old.log", 5)


def test_an_instance_is_inserted_then_updated_by_its_id(legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    first = writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)
    done = instance(cron, status=int(InstanceStatus.ERROR), finished_at=1_796_216_500, exit_code=3)

    again = writer.apply(cron, RUNNING, done, first, NOW_MS + 1_000)

    (row,) = legacy.instance_rows(cron)
    assert again == first == row["id"]
    assert (row["status"], row["finished_at"], row["exit_code"]) == (3, 1_796_216_500, 3)
    assert row["createdAt"] == format_updated_at(NOW_MS) and row["updatedAt"] == format_updated_at(NOW_MS + 1_000)


def test_without_a_mapping_a_row_it_inserted_before_is_adopted_not_duplicated(
        legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    inserted = writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)
    other = writer.apply(cron, RUNNING, instance(cron, pid=999, log_path="sample_1/b.log"), None, NOW_MS)

    adopted = writer.apply(cron, RUNNING, instance(cron, status=1, exit_code=0), None, NOW_MS)

    assert adopted == inserted != other
    assert [r["status"] for r in legacy.instance_rows(cron)] == [1, 0]


def test_a_busy_database_fails_at_once_instead_of_waiting(legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    with closing(sqlite3.connect(legacy.database_path, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(LegacyBusyError) as raised:
            writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)
        assert time.monotonic() - started < 0.05
        holder.execute("ROLLBACK")
    assert raised.value.code == "LEGACY_BUSY"
    assert legacy.instance_rows(cron) == []


def test_the_journal_mode_stays_2xs_rollback_journal(legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)

    assert legacy.query("PRAGMA journal_mode") == [{"journal_mode": "delete"}]
    assert not (legacy.root / "db" / "database.sqlite-wal").exists()


def test_a_replaced_database_file_is_written_through_a_fresh_connection(
        legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    writer.apply(cron, RUNNING, None, None, NOW_MS)
    restored = legacy.root / "db" / "restored.sqlite"
    shutil.copy(legacy.database_path, restored)
    with closing(sqlite3.connect(restored)) as conn, conn:
        conn.execute("UPDATE Crontabs SET status = 1, pid = NULL")
    os.replace(restored, legacy.database_path)  # a restore from backup: same path, new file

    writer.apply(cron, CrontabProjection(3, 5555, None, None, None), None, None, NOW_MS)

    row = legacy.cron_row(cron)
    assert row is not None and (row["status"], row["pid"]) == (3, 5555)


def test_a_batch_that_changes_nothing_opens_no_transaction_even_while_2x_holds_its_lock(
        legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    first = writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)
    before = (legacy.cron_row(cron), legacy.instance_rows(cron))
    committed = writer.transactions
    with closing(sqlite3.connect(legacy.database_path, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        again = writer.apply_batch([(cron, RUNNING, instance(cron), first)], NOW_MS + 60_000)
        holder.execute("ROLLBACK")

    assert again == [first] and writer.transactions == committed
    assert (legacy.cron_row(cron), legacy.instance_rows(cron)) == before  # updatedAt too


def test_a_batch_inserts_its_instances_in_order_each_with_its_own_row_id(
        legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    crons = [legacy.add_cron(f"c{i}", f"task c{i}.js", "0 * * * *") for i in range(3)]
    writes = [(cron, RUNNING, instance(cron, pid=100 + i), None) for i, cron in enumerate(crons)]
    writes.insert(1, (crons[0], RUNNING, instance(crons[0], pid=999, log_path="c0/b.log"), None))

    found = writer.apply_batch(writes, NOW_MS)

    rows = {row["id"]: (row["cron_id"], row["pid"]) for row in legacy.query("SELECT * FROM RunningInstances")}
    assert [rows[i] for i in found] == [(crons[0], 100), (crons[0], 999), (crons[1], 101), (crons[2], 102)]  # type: ignore[index]
    assert found == sorted(found) and writer.transactions == 1


def test_several_writes_of_one_cron_update_its_row_once_with_the_last_values(
        legacy: LegacyDataDir, writer: LegacyStatusWriter) -> None:
    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    idle = CrontabProjection(status=1, pid=4321, log_path="sample_1/b.log", last_execution_time=1_796_216_499,
                             last_running_time=3)

    writer.apply_batch([(cron, RUNNING, instance(cron), None),
                        (cron, idle, instance(cron, pid=5, log_path="sample_1/b.log"), None)], NOW_MS)

    row = legacy.cron_row(cron)
    assert row is not None and (row["status"], row["log_path"], row["last_running_time"]) == (1, "sample_1/b.log", 3)
    assert len(legacy.instance_rows(cron)) == 2


def test_an_instance_row_2x_deletes_between_the_read_and_the_write_is_written_anew(
        legacy: LegacyDataDir, writer: LegacyStatusWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    import legacy_adapters.status_writer as status_writer

    cron = legacy.add_cron("sample", "task sample.js", "0 * * * *")
    first = writer.apply(cron, RUNNING, instance(cron), None, NOW_MS)
    planned = status_writer._plan

    def then_2x_deletes(conn: sqlite3.Connection, writes: object) -> object:
        plan = planned(conn, writes)  # type: ignore[arg-type]
        with closing(sqlite3.connect(legacy.database_path, isolation_level=None)) as other:
            other.execute("DELETE FROM RunningInstances WHERE id = ?", (first,))
        return plan

    monkeypatch.setattr(status_writer, "_plan", then_2x_deletes)
    done = instance(cron, status=int(InstanceStatus.FINISHED), finished_at=1_796_216_500, exit_code=0)
    (again,) = writer.apply_batch([(cron, RUNNING, done, first)], NOW_MS)

    (row,) = legacy.instance_rows(cron)
    assert again == row["id"] != first and (row["status"], row["exit_code"]) == (InstanceStatus.FINISHED, 0)
