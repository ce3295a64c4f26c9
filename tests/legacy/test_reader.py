from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir, connect, immediate

# A pre-2.20 Crontabs table: none of the ALTER-added columns, and no RunningInstances table.
OLD_CRONTABS = (
    "CREATE TABLE `Crontabs` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, `name` VARCHAR(255), "
    "`command` VARCHAR(255), `schedule` VARCHAR(255), `timestamp` VARCHAR(255), "
    "`saved` TINYINT(1), `status` NUMBER, `isSystem` NUMBER, `pid` NUMBER, "
    "`isDisabled` NUMBER, `isPinned` NUMBER, `log_path` VARCHAR(255), `labels` JSON, "
    "`last_running_time` NUMBER, `last_execution_time` NUMBER, "
    "`createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL, "
    "UNIQUE (`name`, `command`, `schedule`));"
)
STAMP = "2026-07-18 02:00:00.123 +00:00"


def make_old_install(path: Path, *, upgraded_columns: bool = False) -> Path:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(OLD_CRONTABS)
        if upgraded_columns:  # an upgrade appends ALTER-added columns after updatedAt
            conn.execute("alter table Crontabs add column task_before TEXT")
            conn.execute("alter table Crontabs add column extra_schedules JSON")
        conn.execute(
            "INSERT INTO Crontabs (name, command, schedule, status, pid, isDisabled, "
            "labels, last_execution_time, createdAt, updatedAt) VALUES "
            "('old', 'task old.js', '0 * * * *', 1, 77, 1, '[\"a\",\"b\"]', 1700000000, "
            "?, ?)",
            (STAMP, STAMP),
        )
        if upgraded_columns:
            conn.execute(
                "UPDATE Crontabs SET task_before = 'echo hi', extra_schedules = '[{\"schedule\":\"*/5 * * * * *\"}]'"
            )
        conn.commit()
    return path


def test_an_old_install_reads_missing_columns_as_none(tmp_path: Path) -> None:
    reader = LegacyReader(make_old_install(tmp_path / "database.sqlite"))
    cron = reader.get_cron(1)
    assert cron is not None
    assert (cron.name, cron.command, cron.pid, cron.is_disabled) == ("old", "task old.js", 77, True)
    assert cron.labels == ("a", "b") and cron.last_execution_time == 1700000000
    assert cron.work_dir is None and cron.log_name is None and cron.sub_id is None
    assert cron.allow_multiple_instances is None and cron.extra_schedules == ()
    assert cron.updated_at == STAMP


def test_an_old_install_without_running_instances_yields_no_instances(tmp_path: Path) -> None:
    reader = LegacyReader(make_old_install(tmp_path / "database.sqlite"))
    assert not reader.has_table("RunningInstances")
    assert list(reader.iter_instances()) == []
    assert reader.instances_for_cron(1, limit=8) == []
    reader.check_is_legacy_database()


def test_columns_appended_by_an_upgrade_are_read_by_name(tmp_path: Path) -> None:
    reader = LegacyReader(make_old_install(tmp_path / "db.sqlite", upgraded_columns=True))
    cron = reader.get_cron(1)
    assert cron is not None
    assert cron.task_before == "echo hi" and cron.extra_schedules == ("*/5 * * * * *",)


def test_crons_and_instances_are_keyset_paged_by_id(legacy_dir: LegacyDataDir) -> None:
    ids = [legacy_dir.add_cron(f"c{i}", f"task c{i}.js", "0 * * * *") for i in range(5)]
    reader = LegacyReader(legacy_dir.database_path)
    assert [c.id for c in reader.iter_crons(batch_size=2)] == ids
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        conn.executemany(
            "INSERT INTO RunningInstances (cron_id, pid, started_at, status, "
            "createdAt, updatedAt) VALUES (?, ?, ?, 0, ?, ?)",
            [(ids[0], 100 + i, 1700000000 + i, STAMP, STAMP) for i in range(5)],
        )
        conn.commit()
    assert [i.pid for i in reader.iter_instances(after_id=2, batch_size=2)] == [102, 103, 104]
    newest = reader.instances_for_cron(ids[0], limit=2)
    assert [i.started_at for i in newest] == [1700000004, 1700000003]


def test_a_fresh_cron_reads_every_typed_field(legacy_dir: LegacyDataDir) -> None:
    cron_id = legacy_dir.add_cron(
        "n",
        "task x/y.js",
        "*/5 * * * * *",
        allow_multiple_instances=0,
        extra_schedules=[{"schedule": "0 1 * * *"}],
        work_dir="x",
    )
    cron = LegacyReader(legacy_dir.database_path).get_cron(cron_id)
    assert cron is not None
    assert cron.log_name == f"x_y_{cron_id}" and cron.work_dir == "x"
    assert cron.allow_multiple_instances is False and cron.extra_schedules == ("0 1 * * *",)
    assert cron.status == 1 and cron.is_disabled is False and cron.saved is False
    assert LegacyReader(legacy_dir.database_path).get_cron(999) is None


def test_malformed_json_columns_read_as_none_not_empty(legacy_dir: LegacyDataDir) -> None:
    cron_id = legacy_dir.add_cron("bad", "task b.js", "0 * * * *", labels="[not json")
    cron = LegacyReader(legacy_dir.database_path).get_cron(cron_id)
    assert cron is not None and cron.labels is None


def test_the_reader_never_writes(legacy_dir: LegacyDataDir) -> None:
    reader = LegacyReader(legacy_dir.database_path)
    with closing(reader._connect()) as conn, pytest.raises(sqlite3.OperationalError):
        conn.execute("DELETE FROM Crontabs")


def test_a_missing_file_is_not_a_legacy_database(tmp_path: Path) -> None:
    with pytest.raises(LegacyDatabaseError) as caught:
        LegacyReader(tmp_path / "nope.sqlite").check_is_legacy_database()
    assert caught.value.reason == "missing" and caught.value.code == "LEGACY_DATABASE"
    assert not (tmp_path / "nope.sqlite").exists()


def test_a_database_without_the_sentinel_table_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE Crontabs (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(LegacyDatabaseError) as caught:
        LegacyReader(path).check_is_legacy_database()
    assert caught.value.reason == "not_legacy"
    (tmp_path / "text.sqlite").write_text("not sqlite at all" * 100)
    with pytest.raises(LegacyDatabaseError):
        LegacyReader(tmp_path / "text.sqlite").check_is_legacy_database()


def test_a_database_already_holding_3_0_tables_is_unsupported(legacy_dir: LegacyDataDir) -> None:
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        conn.execute("CREATE TABLE Runs (id TEXT)")
    with pytest.raises(LegacyDatabaseError) as caught:
        LegacyReader(legacy_dir.database_path).check_is_legacy_database()
    assert caught.value.reason == "unsupported"


# -- a reader that keeps its connections (bridge serve) -----------------------------------------


def _open_fds_on(path: Path) -> int:
    target = str(path.resolve())
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd) == target
        except OSError:  # the fd closed meanwhile
            continue
    return count


def test_a_kept_connection_sees_every_later_2x_write(legacy_dir: LegacyDataDir) -> None:
    reader = LegacyReader(legacy_dir.database_path, keep_connections=2)
    cron_id = legacy_dir.add_cron("kept", "task k.js", "0 * * * *")
    assert reader.get_cron(cron_id).status == 1  # type: ignore[union-attr]
    with closing(connect(legacy_dir.database_path)) as writer, immediate(writer):
        writer.execute("UPDATE Crontabs SET status = 0, pid = 4242 WHERE id = ?", (cron_id,))
    cron = reader.get_cron(cron_id)
    assert cron is not None and (cron.status, cron.pid) == (0, 4242)
    reader.close()


def test_a_kept_connection_holds_no_lock_between_reads(legacy_dir: LegacyDataDir) -> None:
    reader = LegacyReader(legacy_dir.database_path, keep_connections=2)
    cron_id = legacy_dir.add_cron("kept", "task k.js", "0 * * * *")
    assert reader.get_cron(cron_id) is not None
    # 2.x takes the whole file for a write; a reader still inside a read transaction would make this wait.
    with closing(sqlite3.connect(legacy_dir.database_path, timeout=0, isolation_level=None)) as writer:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("UPDATE Crontabs SET name = 'renamed' WHERE id = ?", (cron_id,))
        writer.execute("COMMIT")
    assert reader.get_cron(cron_id).name == "renamed"  # type: ignore[union-attr]
    reader.close()


def test_a_database_file_replaced_under_the_same_path_is_read_from_the_new_file(
        legacy_dir: LegacyDataDir, tmp_path: Path) -> None:
    reader = LegacyReader(legacy_dir.database_path, keep_connections=2)
    cron_id = legacy_dir.add_cron("before-restore", "task r.js", "0 * * * *")
    assert reader.get_cron(cron_id).name == "before-restore"  # type: ignore[union-attr]
    restored = tmp_path / "restored.sqlite"
    with closing(sqlite3.connect(legacy_dir.database_path)) as source, closing(sqlite3.connect(restored)) as copy:
        source.backup(copy)
        copy.execute("UPDATE Crontabs SET name = 'after-restore' WHERE id = ?", (cron_id,))
        copy.commit()
    os.replace(restored, legacy_dir.database_path)  # what a restore of 2.x's data directory does to the file
    assert reader.get_cron(cron_id).name == "after-restore"  # type: ignore[union-attr]
    reader.close()


def test_kept_connections_are_bounded_and_closed(legacy_dir: LegacyDataDir) -> None:
    reader = LegacyReader(legacy_dir.database_path, keep_connections=2)
    cron_id = legacy_dir.add_cron("kept", "task k.js", "0 * * * *")
    before = _open_fds_on(legacy_dir.database_path)
    barrier = threading.Barrier(6)

    def read() -> None:
        barrier.wait()
        for _ in range(20):
            assert reader.get_cron(cron_id) is not None

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 <= _open_fds_on(legacy_dir.database_path) - before <= 2
    reader.close()
    assert _open_fds_on(legacy_dir.database_path) == before


def test_a_reader_by_default_keeps_nothing_open(legacy_dir: LegacyDataDir) -> None:
    before = _open_fds_on(legacy_dir.database_path)
    reader = LegacyReader(legacy_dir.database_path)
    assert reader.get_cron(legacy_dir.add_cron("short", "task s.js", "0 * * * *")) is not None
    assert _open_fds_on(legacy_dir.database_path) == before
