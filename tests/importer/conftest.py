"""Fixtures for the 2.x import: a 2.x data dir (the test double's files) and Settings for each SQL store."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text

from bridge.config import Settings
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.schema import bridge_settings_table, run_attempts_table, run_events_table, runs_table
from legacy_adapters.schema import format_updated_at
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.conftest import Backend

BEGIN_S = 1_796_216_400  # unix seconds, on an hour boundary (UTC)


@dataclass
class Instance:
    """One RunningInstances row as 2.x writes it (times in unix seconds)."""

    cron_id: int
    status: int
    started_at: int | float
    finished_at: int | float | None = None
    exit_code: int | None = None
    pid: int | None = 4242
    log_path: str | None = "job_1/2026-12-02-10-00-00-000.log"


def add_instances(data: LegacyDataDir, rows: Sequence[Instance]) -> list[int]:
    """Insert rows in 2.x's on-disk format (createdAt/updatedAt text), returning their ids."""
    ids = []
    with closing(sqlite3.connect(data.database_path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for r in rows:
            begun = r.started_at if r.started_at < 10**10 else BEGIN_S  # a bogus ms start still gets a stamp
            ended = r.finished_at if r.finished_at is not None else begun
            cursor = conn.execute(
                "INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, finished_at, status, exit_code, "
                "createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.cron_id, r.pid, r.log_path, r.started_at, r.finished_at, r.status, r.exit_code,
                 format_updated_at(int(begun * 1000)), format_updated_at(int(ended * 1000))))
            ids.append(int(cursor.lastrowid or 0))
        conn.execute("COMMIT")
    return ids


@dataclass
class ImportEnv:
    settings: Settings
    data: LegacyDataDir
    engine: Engine
    backend: Backend

    def rows(self, table: Any, *order: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(table).order_by(*order))]

    def runs(self) -> list[dict[str, Any]]:
        return self.rows(runs_table, runs_table.c.idempotency_key)

    def run(self, key: str) -> dict[str, Any]:
        (run,) = [r for r in self.runs() if r["idempotency_key"] == key]
        return run

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        return [a for a in self.rows(run_attempts_table, run_attempts_table.c.attempt) if a["run_id"] == run_id]

    def events(self, run_id: str | None = None) -> list[dict[str, Any]]:
        rows = self.rows(run_events_table, run_events_table.c.run_id, run_events_table.c.sequence)
        return [e for e in rows if run_id is None or e["run_id"] == run_id]

    def cursor(self) -> str | None:
        with self.engine.connect() as conn:
            t = bridge_settings_table
            return conn.execute(select(t.c.value).where(t.c.key == "import_cursor")).scalar()


def _settings(url: str, schema: str | None, data_dir: Path, legacy: LegacyDataDir | None) -> Settings:
    return Settings(database_url=url, data_dir=data_dir, database_schema=schema,
                    legacy_data_dir=legacy.root if legacy else None, legacy_tz="UTC", legacy_scheduler="node")


def judging_all_history(settings: Settings) -> Settings:
    """The import's settings for a reconcile pass that judges every imported row at once: no grace, and a
    lookback of a year, the longest allowed."""
    return replace(settings, reconcile_grace_s=0, reconcile_lookback_s=366 * 86_400)


@pytest.fixture
def legacy(tmp_path: Path) -> LegacyDataDir:
    return create_legacy_data_dir(tmp_path / "ql-data", now_s=BEGIN_S)


@pytest.fixture
def env(sql_backend: Backend, legacy: LegacyDataDir, tmp_path: Path, request: pytest.FixtureRequest) -> ImportEnv:
    schema = request.getfixturevalue("postgres_schema") if sql_backend.name == "postgres" else None
    assert sql_backend.url and sql_backend.engine is not None
    settings = _settings(sql_backend.url, schema, tmp_path / "bridge-data", legacy)
    return ImportEnv(settings, legacy, sql_backend.engine, sql_backend)


@pytest.fixture
def fresh_store(env: ImportEnv, tmp_path: Path, sqlite_template: Path) -> Iterator[Callable[[], ImportEnv]]:
    """Another empty, upgraded store of the same backend, importing the same 2.x data."""
    made: list[tuple[Engine, str | None]] = []

    def make() -> ImportEnv:
        if env.backend.name == "sqlite":
            path = tmp_path / f"other-{uuid.uuid4().hex[:6]}.sqlite"
            shutil.copy(sqlite_template, path)
            url, schema = f"sqlite:///{path}", None
        else:
            url, schema = env.settings.database_url, f"t_{uuid.uuid4().hex[:12]}"
            admin = create_engine(url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            admin.dispose()
        engine = make_engine(url, pg_search_path=schema)
        if schema is not None:
            upgrade(engine)
        made.append((engine, schema))
        settings = _settings(url, schema, tmp_path / "other-data", env.data)
        return ImportEnv(settings, env.data, engine, env.backend)

    yield make
    for engine, schema in made:
        engine.dispose()
        if schema is not None:
            admin = create_engine(env.settings.database_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()
