"""Alembic: upgrade from empty, no drift from the schema module, downgrade to base, refusals."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from bridge.domain.errors import SchemaMismatchError
from bridge.storage.engine import make_engine
from bridge.storage.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade
from tests.conftest import Backend

EXPECTED_TABLES = {"runs", "run_attempts", "run_events", "task_snapshots"}


def test_upgrade_from_empty_then_check_then_downgrade_to_base(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    downgrade(engine, "base")
    assert EXPECTED_TABLES.isdisjoint(inspect(engine).get_table_names())
    assert upgrade(engine) == head_revision()
    assert EXPECTED_TABLES <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.check(cfg)  # raises if the revisions and bridge.storage.schema disagree
    downgrade(engine, "base")
    assert current_revision(engine) is None


def test_the_required_constraints_exist(sql_backend: Backend) -> None:
    insp = inspect(sql_backend.engine)
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("run_attempts")}
    assert ("run_id", "attempt") in uniques
    assert ("run_id", "sequence") in {tuple(u["column_names"]) for u in insp.get_unique_constraints("run_events")}
    unique_indexes = {i["name"]: i["column_names"] for t in ("runs", "run_events")
                      for i in insp.get_indexes(t) if i["unique"]}
    assert unique_indexes["ux_run_events_run_id_dedupe_key"] == ["run_id", "dedupe_key"]
    assert unique_indexes["ux_runs_project_id_idempotency_key"] == ["project_id", "idempotency_key"]
    checks = {c["name"] for t in ("runs", "run_attempts") for c in insp.get_check_constraints(t)}
    assert {"ck_runs_version_nonnegative", "ck_run_attempts_attempt_positive",
            "ck_run_attempts_callback_sequence_nonnegative"} <= checks


def test_upgrade_refuses_a_qinglong_database_and_leaves_it_untouched(tmp_path: Path) -> None:
    legacy = tmp_path / "database.sqlite"
    with sqlite3.connect(legacy) as conn:
        conn.execute("CREATE TABLE `Crontabs` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, `command` VARCHAR(255))")
    before = legacy.read_bytes()
    engine = make_engine(f"sqlite:///{legacy}")
    with pytest.raises(SchemaMismatchError, match="QingLong 2.x"):
        upgrade(engine)
    engine.dispose()
    with sqlite3.connect(legacy) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert "runs" not in tables and "alembic_version" not in tables
    assert legacy.read_bytes() == before


def test_upgrade_refuses_a_store_newer_than_the_code(sqlite_backend: Backend) -> None:
    engine = sqlite_backend.engine
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(SchemaMismatchError, match="newer"):
        upgrade(engine)
    assert current_revision(engine) == "9999_future"
