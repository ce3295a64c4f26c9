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
