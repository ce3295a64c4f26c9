"""Backend fixtures shared by the whole suite: a SQLite file store and a PostgreSQL store.

PostgreSQL comes from BRIDGE_TEST_POSTGRES_URL. Locally, without it, those tests are skipped and the
run says so; in CI (CI=true or BRIDGE_REQUIRE_POSTGRES=1) a missing or unreachable server is an error.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.storage.engine import make_engine
from bridge.storage.memory import InMemoryUnitOfWork
from bridge.storage.migrate import upgrade
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.support import qinglong_source

POSTGRES_URL_VAR = "BRIDGE_TEST_POSTGRES_URL"


def postgres_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("BRIDGE_REQUIRE_POSTGRES") == "1"


# The whole attack on a live bridge (issue "safe in front of a live panel"), re-run with `pytest -m hostile`:
# tests/hostile/ drives a real `ql-bridge serve`; these modules hold the other attacks, one fault each.
HOSTILE_MODULES = frozenset({
    "tests/hostile/",
    "tests/integration/test_legacy_database_down.py",  # hot journal, lock, missing or damaged 2.x database
    "tests/legacy/test_database_states.py",
    "tests/projection/test_projector_database_states.py",
    "tests/integration/test_reconciler_poison.py",  # values that cannot be judged, ids sent 501 times
    "tests/integration/test_startup_recovery.py",  # restarts: recovery by the execution's own identity
    "tests/contract/test_connection_sweep.py",  # PostgreSQL drops every pooled connection
    "tests/web/test_health.py",  # full disk, 2.x down: liveness and readiness
    "tests/web/test_callback_input.py",  # deep bodies, huge exit codes
    "tests/web/test_admin_input.py",
    "tests/web/test_api_v3_input.py",
    "tests/contract/test_exit_codes.py",
    "tests/contract/test_flag_text.py",
    "tests/integration/test_upstream_down.py",
})


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if any(path == m or (m.endswith("/") and path.startswith(m)) for m in HOSTILE_MODULES):
            item.add_marker(pytest.mark.hostile)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    if not os.environ.get(POSTGRES_URL_VAR):
        terminalreporter.write_line(
            f"NOTE: {POSTGRES_URL_VAR} is not set: the PostgreSQL half of the contract suite was SKIPPED. "
            f"Set it (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test) to run it.", yellow=True)
    without_shells = [r for r in terminalreporter.stats.get("skipped", [])
                      if qinglong_source.UNAVAILABLE in str(getattr(r, "longrepr", ""))]
    if without_shells:
        terminalreporter.write_line(f"NOTE: {len(without_shells)} tests that run 2.x's own shells were SKIPPED: "
                                    f"{qinglong_source.UNAVAILABLE}.", yellow=True)


@pytest.fixture(scope="session", autouse=True)
def qinglong_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """2.x's shells, when a test needs them, are unpacked once per tag under this session's temporary directory."""
    qinglong_source.cache_under(tmp_path_factory)


@dataclass
class Backend:
    """A store under test plus what it can do (capability flags, never dialect checks in tests)."""

    name: str
    engine: Engine | None
    uow: object
    url: str | None = None
    supports_failure_injection: bool = True
    has_file_lock: bool = False
    explain: str = "EXPLAIN "  # prefix that makes the store print a statement's plan
    # Run first in the same transaction: a test's few rows would otherwise make a sequential scan cheapest.
    explain_setup: tuple[str, ...] = ("SET LOCAL enable_seqscan = off",)
    # PostgreSQL's autovacuum keeps the planner's statistics; nothing runs ANALYZE on a SQLite store, so its
    # planner decides without them for the store's whole life (unless an operator runs ANALYZE by hand).
    keeps_statistics: bool = True

    def plans_in_use(self, sql: str, args: Any) -> list[str]:
        """The plans a statement gets over the store's life: on SQLite without statistics (as the bridge runs
        it) and after an ANALYZE by hand; on PostgreSQL after ANALYZE, as autovacuum keeps it."""
        in_use = [] if self.keeps_statistics else [self.query_plan(sql, args, analyzed=False)]
        return [*in_use, self.query_plan(sql, args)]

    def query_plan(self, sql: str, args: Any, *, analyzed: bool = True) -> str:
        """The plan the store picks for a driver-level statement, as one string of its rows: after ANALYZE
        (both planners decide on statistics, as they do after a while in use), or, with ``analyzed=False``,
        on the statistics the store has (none, on a store never analyzed)."""
        assert self.engine is not None
        with self.engine.connect() as conn:
            if analyzed:
                conn.execute(text("ANALYZE"))
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            for statement in self.explain_setup:
                cursor.execute(statement)
            cursor.execute(self.explain + sql, args)
            plan = " ".join(str(row) for row in cursor.fetchall())
            conn.rollback()
        return plan


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "bridge.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture
def sqlite_backend(tmp_path: Path, sqlite_template: Path) -> Iterator[Backend]:
    path = tmp_path / "bridge.sqlite"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    yield Backend("sqlite", engine, SqlUnitOfWork(engine), url=url, has_file_lock=True,
                  explain="EXPLAIN QUERY PLAN ", explain_setup=(), keeps_statistics=False)
    assert engine.pool.checkedout() == 0, "a connection was left checked out"
    engine.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = os.environ.get(POSTGRES_URL_VAR)
    if not url:
        if postgres_required():
            pytest.fail(f"{POSTGRES_URL_VAR} must be set in CI: the PostgreSQL contract tests may not be skipped")
        pytest.skip(f"{POSTGRES_URL_VAR} not set")
    probe = create_engine(url)
    try:
        with probe.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server means the same here
        if postgres_required():
            pytest.fail(f"PostgreSQL at {POSTGRES_URL_VAR} is unreachable: {type(exc).__name__}")
        pytest.skip(f"PostgreSQL unreachable ({type(exc).__name__})")
    finally:
        probe.dispose()
    return url


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema per test, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield schema
    with admin.connect() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def postgres_backend(postgres_url: str, postgres_schema: str) -> Iterator[Backend]:
    engine = make_engine(postgres_url, pg_search_path=postgres_schema)
    upgrade(engine)
    yield Backend("postgres", engine, SqlUnitOfWork(engine), url=postgres_url)
    assert engine.pool.checkedout() == 0, "a connection was left checked out"
    engine.dispose()


@pytest.fixture
def memory_backend() -> Backend:
    return Backend("memory", None, InMemoryUnitOfWork(), supports_failure_injection=False)


SQL_BACKENDS = [
    pytest.param("sqlite_backend", id="sqlite"),
    pytest.param("postgres_backend", id="postgres", marks=pytest.mark.postgres),
]
ALL_BACKENDS = [*SQL_BACKENDS, pytest.param("memory_backend", id="memory")]


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.getfixturevalue(request.param)


@pytest.fixture(params=SQL_BACKENDS)
def sql_backend(request: pytest.FixtureRequest) -> Backend:
    return request.getfixturevalue(request.param)


@pytest.fixture
def service(backend: Backend) -> RunService:
    return RunService(backend.uow, clock=SystemClock())  # type: ignore[arg-type]


@pytest.fixture
def sql_service(sql_backend: Backend) -> RunService:
    return RunService(sql_backend.uow, clock=SystemClock())  # type: ignore[arg-type]
