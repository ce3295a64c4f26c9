"""2.x's database locked, hot-journaled, missing or damaged never takes the bridge down: it keeps forwarding,
names the state, counts it and records again once the database is readable."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import httpx
import pytest

from bridge.cli.demo import Shell, migrated, serving_bridge
from bridge.config import Settings
from bridge.storage.engine import make_engine
from bridge.storage.pending_ends import SqlPendingEnds
from bridge.storage.reconcile_queries import SqlReconcileStore
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.integration import legacy_world
from tests.integration.legacy_world import BEGIN, World, end, start
from tests.support.routes import SHELL_STATUS

world = legacy_world.world  # the fixture


def test_a_start_read_against_a_hot_journal_is_forwarded_named_counted_and_back_filled_by_its_end(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    cron = world.data.add_cron("hot", "task hot.sh", "0 * * * *")
    world.data.leave_hot_journal()

    with caplog.at_level(logging.WARNING, logger="bridge.shadow"):
        assert world.via_bridge(start(cron, 41, "h.log")) == 200  # forwarded: 2.x's own write rolls it back
    assert world.unavailable("hot_journal") == 1
    assert world.metrics.value("ql_bridge_shadow_write_failed_total", origin="other", error="legacy_unreadable") == 1
    assert any("hot_journal" in r.getMessage() for r in caplog.records)
    assert world.run(cron, 41, "h.log") is None  # nothing guessed at the start

    assert world.via_bridge(end(cron, 41, "h.log")) == 200
    assert world.run(cron, 41, "h.log") == ("succeeded", True)  # the end back-filled it

    assert world.via_bridge(start(cron, 42, "h2.log")) == 200  # readable again: recorded as usual
    assert world.run(cron, 42, "h2.log") == ("running", False)
    assert world.unavailable("hot_journal") == 1


def test_a_start_read_while_2x_holds_its_lock_is_counted_as_locked(world: World) -> None:
    cron = world.data.add_cron("busy", "task busy.sh", "0 * * * *")
    blocker = sqlite3.connect(world.data.database_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        prepared = world.interceptor.before_forward(SHELL_STATUS, start(cron, 43, "b.log"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert prepared is not None
    assert world.unavailable("locked") == 1


def test_a_missing_database_is_counted_as_missing_and_the_start_still_goes_through(world: World) -> None:
    cron = world.data.add_cron("gone", "task gone.sh", "0 * * * *")
    moved = world.data.database_path.with_name("moved.sqlite")
    world.data.database_path.rename(moved)
    try:
        prepared = world.interceptor.before_forward(SHELL_STATUS, start(cron, 44, "m.log"))
    finally:
        moved.rename(world.data.database_path)
    assert prepared is not None
    assert world.unavailable("missing") == 1
    assert not world.data.database_path.with_name("moved.sqlite").exists()


# -- bootstrap: building the reader ------------------------------------------------------------------


def settings_for(data: LegacyDataDir, tmp_path: Path) -> Settings:
    return Settings.from_env({"BRIDGE_LEGACY_DATA_DIR": str(data.root), "BRIDGE_DATA_DIR": str(tmp_path)})


@pytest.mark.parametrize("state", ["hot_journal", "missing", "locked", "corrupt", "empty"])
def test_the_reader_is_built_whatever_transient_state_2xs_database_is_in(tmp_path: Path, state: str) -> None:
    from bridge.bootstrap import build_legacy_reader

    data = create_legacy_data_dir(tmp_path / "ql")
    for i in range(40):
        data.add_cron(f"c{i}", f"task c{i}.sh", "0 * * * *")
    blocker = None
    if state == "hot_journal":
        data.leave_hot_journal()
    elif state == "missing":
        data.database_path.unlink()
    elif state == "locked":
        blocker = sqlite3.connect(data.database_path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
    elif state == "corrupt":
        os.truncate(data.database_path, data.database_path.stat().st_size // 2)
    else:
        os.truncate(data.database_path, 0)
    try:
        reader = build_legacy_reader(settings_for(data, tmp_path), keep_connections=2)
        assert reader.state() == state
    finally:
        if blocker is not None:
            blocker.execute("ROLLBACK")
            blocker.close()


@pytest.mark.parametrize("state", ["not_legacy", "unsupported"])
def test_only_a_database_that_is_positively_something_else_stops_the_build(tmp_path: Path, state: str) -> None:
    from bridge.bootstrap import build_legacy_reader

    data = create_legacy_data_dir(tmp_path / "ql")
    with sqlite3.connect(data.database_path) as conn:
        conn.execute("DROP TABLE Crontabs" if state == "not_legacy" else "CREATE TABLE Runs (id TEXT)")
    conn.close()
    with pytest.raises(LegacyDatabaseError) as caught:
        build_legacy_reader(settings_for(data, tmp_path))
    assert caught.value.reason == state


# -- startup recovery ----------------------------------------------------------------------------------


def test_startup_recovery_against_a_hot_journal_defers_instead_of_failing_or_marking_lost(world: World) -> None:
    from tests.support.wiring import recover_over

    cron = world.data.add_cron("rec", "task rec.sh", "0 * * * *")
    world.via_bridge(start(cron, 45, "r.log"))
    world.direct(end(cron, 45, "r.log"))  # 2.x saw the end, the bridge did not
    world.data.leave_hot_journal()

    reader = LegacyReader(world.data.database_path)
    assert dict(recover_over(world.store, world.runs, reader, SqlPendingEnds(world.store.engine),
                             metrics=world.metrics)) == {
        "deferred:hot_journal": 1}
    assert world.run(cron, 45, "r.log") == ("running", False)  # untouched: nothing is known yet
    assert world.unavailable("hot_journal", use="recovery") == 1

    world.data.roll_back_hot_journal()
    outcomes = recover_over(world.store, world.runs, reader, SqlPendingEnds(world.store.engine))
    assert dict(outcomes) == {"completed": 1}
    assert world.run(cron, 45, "r.log") == ("succeeded", False)


# -- a cold `bridge serve` ------------------------------------------------------------------------------


def test_a_cold_bridge_serve_starts_and_forwards_in_front_of_a_hot_journal(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("served", "task served.sh", "0 * * * *")
    for i in range(30):
        data.add_cron(f"filler {i}", f"task filler{i}.sh", "0 * * * *")
    database_url = migrated(f"sqlite:///{tmp_path / 'bridge.sqlite'}")
    data.leave_hot_journal()
    with Legacy2xDouble(data).start() as double:
        journal = data.database_path.with_name("database.sqlite-journal")
        assert journal.is_file()
        with serving_bridge(double.url, data.root, database_url, BRIDGE_SHADOW_BUDGET_MS="2000",
                            BRIDGE_DATA_DIR=str(tmp_path)) as url, httpx.Client(base_url=url, timeout=10) as client:
            shell = Shell(client, data.system_token)
            assert shell.status(cron, 0, 51, "s.log", BEGIN) == 200
            assert shell.status(cron, 1, 51, "s.log", BEGIN, 3, 0) == 200
            body = client.get("/metrics").text
            assert 'ql_bridge_legacy_database_unavailable_total{state="hot_journal",use="shadow"} 1.0' in body
            assert shell.status(cron, 0, 52, "s2.log", BEGIN) == 200
        assert not journal.exists()
    engine = make_engine(database_url)
    try:
        store = SqlReconcileStore(engine)
        keys = [f"legacy:{cron}:{pid}:{log_path_digest(log)}:{BEGIN * 1000}" for pid, log in ((51, "s.log"),
                                                                                            (52, "s2.log"))]
        found = {row.pid: row.status for row in store.runs_by_keys(keys).values()}
        assert found == {51: "succeeded", 52: "running"}
    finally:
        engine.dispose()
