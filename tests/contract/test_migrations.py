"""Alembic: upgrade from empty, no drift from the schema module, downgrade to base, refusals, data kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, insert, inspect, select, update
from sqlalchemy.exc import IntegrityError

from bridge.domain.errors import SchemaMismatchError
from bridge.domain.model import AttemptStatus, RunStatus
from bridge.storage.engine import make_engine
from bridge.storage.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade
from bridge.storage.schema import pending_ends_table, run_attempts_table, run_events_table, runs_table
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


def _attempt_with_exit_code(engine: Engine, exit_code: int) -> None:
    run = {"id": "run-0009", "project_id": "default", "task_id": "legacy-cron:1", "task_revision": "rev",
           "trigger_type": "legacy", "status": "failed", "version": 1, "event_sequence": 0, "created_at_ms": 1}
    with engine.begin() as conn:
        conn.execute(insert(runs_table).values(**run))
        conn.execute(insert(run_attempts_table).values(
            id="attempt-0009", run_id="run-0009", attempt=1, status="failed", executor_type="legacy_shell",
            callback_sequence=0, created_at_ms=1, exit_code=exit_code))


def _exit_code(engine: Engine) -> int | None:
    with engine.connect() as conn:
        return conn.execute(select(run_attempts_table.c.exit_code)).scalar_one()


def test_revision_0009_keeps_exit_codes_and_then_takes_any_integer_2x_accepts(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    downgrade(engine, "0008")
    _attempt_with_exit_code(engine, 143)

    upgrade(engine)
    assert _exit_code(engine) == 143
    for wide in (2**40, -(2**53 - 1), 2**53 - 1):
        with engine.begin() as conn:
            conn.execute(update(run_attempts_table).values(exit_code=wide))
        assert _exit_code(engine) == wide


def test_a_downgrade_past_0009_never_truncates_a_wide_exit_code(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    _attempt_with_exit_code(engine, 2**40)

    try:
        downgrade(engine, "0008")
    except RuntimeError as refused:  # a 32-bit column cannot hold it: refused, nothing changed
        assert "outside 32 bits" in str(refused)
        assert current_revision(engine) == head_revision()
    assert _exit_code(engine) == 2**40  # or the store's 0008 column holds 64 bits anyway

    with engine.begin() as conn:
        conn.execute(update(run_attempts_table).values(exit_code=-(2**31)))
    downgrade(engine, "0008")
    assert (current_revision(engine), _exit_code(engine)) == ("0008", -(2**31))


def _a_run_with_an_attempt_and_an_event(engine: Engine, status: str = "running") -> None:
    run = {"id": "run-0015", "project_id": "default", "task_id": "legacy-cron:1", "task_revision": "rev",
           "trigger_type": "legacy", "status": status, "version": 1, "event_sequence": 1, "created_at_ms": 1}
    with engine.begin() as conn:
        conn.execute(insert(runs_table).values(**run))
        conn.execute(insert(run_attempts_table).values(
            id="attempt-0015", run_id="run-0015", attempt=1, status=status, executor_type="legacy_shell",
            callback_sequence=0, created_at_ms=1))
        conn.execute(insert(run_events_table).values(
            id="event-0015", run_id="run-0015", sequence=1, type="run.created", actor_type="system",
            created_at_ms=1, payload="{}"))


def _set_status(engine: Engine, status: str) -> None:
    with engine.begin() as conn:
        conn.execute(update(runs_table).values(status=status))
        conn.execute(update(run_attempts_table).values(status=status))


def _statuses(engine: Engine) -> tuple[str, str]:
    with engine.connect() as conn:
        return (conn.execute(select(runs_table.c.status)).scalar_one(),
                conn.execute(select(run_attempts_table.c.status)).scalar_one())


def test_revision_0015_lets_a_stored_run_and_attempt_end_ended_and_still_refuses_unknown_statuses(
        sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    downgrade(engine, "0014")
    _a_run_with_an_attempt_and_an_event(engine)  # the Run has rows pointing at it: the upgrade must keep them
    with pytest.raises(IntegrityError):
        _set_status(engine, "ended")

    upgrade(engine)
    _set_status(engine, "ended")
    assert _statuses(engine) == ("ended", "ended")
    with pytest.raises(IntegrityError):
        _set_status(engine, "finished")  # still a closed list, only wider
    for status in ("succeeded", "failed", "cancelled", "timed_out", "lost"):
        _set_status(engine, status)
    assert _statuses(engine) == ("lost", "lost")


def test_the_stored_status_checks_take_exactly_the_model_statuses(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    _a_run_with_an_attempt_and_an_event(engine)
    for status in RunStatus:
        with engine.begin() as conn:
            conn.execute(update(runs_table).values(status=status.value))
    for attempt_status in AttemptStatus:
        with engine.begin() as conn:
            conn.execute(update(run_attempts_table).values(status=attempt_status.value))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(update(run_attempts_table).values(status="retry_wait"))  # a Run status, not an Attempt's


def test_a_downgrade_past_0015_is_refused_while_anything_is_ended_and_changes_nothing(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    _a_run_with_an_attempt_and_an_event(engine, "ended")

    with pytest.raises(RuntimeError, match="'ended'.*refused and nothing was changed"):
        downgrade(engine, "0014")
    assert current_revision(engine) == head_revision()
    assert _statuses(engine) == ("ended", "ended")

    _set_status(engine, "succeeded")
    downgrade(engine, "0014")
    assert (current_revision(engine), _statuses(engine)) == ("0014", ("succeeded", "succeeded"))
    with pytest.raises(IntegrityError):
        _set_status(engine, "ended")


def _waiting_end(engine: Engine, **facts: object) -> None:
    row = {"dedupe_key": "1:legacy-end:x", "run_id": "run-0016", "run_created_at_ms": 1, "legacy_cron_id": 1,
           "received_at_ms": 1, "due_at_ms": 1, **facts}
    with engine.begin() as conn:
        conn.execute(insert(pending_ends_table).values(**row))


def test_revision_0016_keeps_a_waiting_end_without_an_exit_code_and_its_trap(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    downgrade(engine, "0015")
    _waiting_end(engine, exit_code=143)  # an end kept by 0015: still there, with its code, after the upgrade
    with pytest.raises(IntegrityError):
        _waiting_end(engine, dedupe_key="1:legacy-end:y", exit_code=None)

    upgrade(engine)
    _waiting_end(engine, dedupe_key="1:legacy-end:y", exit_code=None, trapped=True)
    with engine.connect() as conn:
        rows = conn.execute(select(pending_ends_table.c.exit_code, pending_ends_table.c.trapped)
                            .order_by(pending_ends_table.c.id)).all()
    assert [tuple(r) for r in rows] == [(143, False), (None, True)]


def test_a_downgrade_past_0016_is_refused_while_an_end_without_its_code_waits_and_changes_nothing(
        sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    _waiting_end(engine, exit_code=None)

    with pytest.raises(RuntimeError, match="refused and nothing was changed"):
        downgrade(engine, "0015")
    assert current_revision(engine) == head_revision()

    with engine.begin() as conn:
        conn.execute(update(pending_ends_table).values(exit_code=130))
    downgrade(engine, "0015")
    assert current_revision(engine) == "0015"
