"""LegacyReader.instances_inserted_near: one execution's RunningInstances rows by its identity, read through
the primary key only (2.x's table has no other index and is never pruned)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from legacy_adapters.reader import LegacyReader
from legacy_adapters.schema import format_updated_at
from legacy_adapters.testing.datadir import LegacyDataDir

T0_MS = 1_784_340_000_000


def insert(legacy_dir: LegacyDataDir, rows: list[tuple[int, int | None, str, int]]) -> None:
    """(cron_id, pid, log_path, inserted_at_ms) rows, in id order, as 2.x's start callback inserts them."""
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn, conn:
        conn.executemany(
            "INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, status, createdAt, updatedAt) "
            "VALUES (?, ?, ?, ?, 0, ?, ?)",
            [(cron, pid, log, at // 1000, format_updated_at(at), format_updated_at(at)) for cron, pid, log, at in rows])


def test_an_execution_is_found_however_many_instances_its_cron_has_had_since(legacy_dir: LegacyDataDir) -> None:
    insert(legacy_dir, [(7, 100 + i, f"old/{i}.log", T0_MS - 3_600_000 + i) for i in range(500)])
    insert(legacy_dir, [(7, 4321, "mine.log", T0_MS)])
    insert(legacy_dir, [(7, 5000 + i, f"later/{i}.log", T0_MS + 1000 * (i + 1)) for i in range(5000)])

    found = LegacyReader(legacy_dir.database_path).instances_inserted_near(7, 4321, T0_MS + 50)

    assert [(i.cron_id, i.pid, i.log_path) for i in found] == [(7, 4321, "mine.log")]


def test_only_the_window_around_the_moment_is_read(legacy_dir: LegacyDataDir) -> None:
    insert(legacy_dir, [(7, 4321, "long-ago.log", T0_MS - 3_600_000), (7, 4321, "mine.log", T0_MS - 5_000),
                        (8, 4321, "other-cron.log", T0_MS), (7, 4321, "much-later.log", T0_MS + 3_600_000)])
    reader = LegacyReader(legacy_dir.database_path)

    assert [i.log_path for i in reader.instances_inserted_near(7, 4321, T0_MS)] == ["mine.log"]
    assert [i.log_path for i in reader.instances_inserted_near(7, 4321, T0_MS, max_ids=1)] == ["mine.log"]
    assert reader.instances_inserted_near(7, 999, T0_MS) == []


def test_a_null_pid_matches_a_null_pid(legacy_dir: LegacyDataDir) -> None:
    insert(legacy_dir, [(7, None, "no-pid.log", T0_MS), (7, 1, "pid.log", T0_MS)])
    found = LegacyReader(legacy_dir.database_path).instances_inserted_near(7, None, T0_MS)
    assert [i.log_path for i in found] == ["no-pid.log"]


def test_an_install_without_instances_has_none(legacy_dir: LegacyDataDir) -> None:
    assert LegacyReader(legacy_dir.database_path).instances_inserted_near(7, 1, T0_MS) == []
