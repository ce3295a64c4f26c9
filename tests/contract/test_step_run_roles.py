"""Least privilege on PostgreSQL: `ql-bridge db roles` makes a runtime role and a read-only role; connecting as
each, what it must not do is refused by the server itself."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from bridge.domain.errors import StorageError
from bridge.domain.step_run import StepRunKind, StepRunStatus
from bridge.domain.step_run_mutation import CreateStepRun
from bridge.service.queries import PageRequest, RunFilters
from bridge.storage.engine import make_engine
from bridge.storage.migrate import head_revision, require_current_schema, upgrade
from bridge.storage.queries import SqlRunQueries
from bridge.storage.roles import READER_ROLE, RUNTIME_ROLE, apply_roles
from bridge.storage.step_run_queries import SqlStepRunReader
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.cli.conftest import Cli
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR, create
from tests.contract.step_run_world import world_for


@dataclass
class Roles:
    runtime: Engine
    reader: Engine
    names: tuple[str, str]


def drop_roles(url: str, names: tuple[str, ...]) -> None:
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in names:
            if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": name}).first():
                conn.execute(text(f'DROP OWNED BY "{name}"'))
                conn.execute(text(f'DROP ROLE "{name}"'))
    admin.dispose()


@pytest.fixture
def roles(postgres_backend: Backend, postgres_schema: str, postgres_url: str) -> Iterator[Roles]:
    suffix = uuid.uuid4().hex[:8]
    names = (f"t_runtime_{suffix}", f"t_reader_{suffix}")
    assert postgres_backend.engine is not None
    try:
        apply_roles(postgres_backend.engine, runtime=names[0], reader=names[1])
        engines = [make_engine(make_url(postgres_url).set(username=n).render_as_string(hide_password=False),
                               pg_search_path=postgres_schema) for n in names]
        yield Roles(engines[0], engines[1], names)
        for engine in engines:
            engine.dispose()
    finally:
        drop_roles(postgres_url, names)


def denied(engine: Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn, pytest.raises(ProgrammingError) as refused:
        conn.execute(text(statement), params)
    assert getattr(refused.value.orig, "sqlstate", None) == "42501", refused.value  # insufficient_privilege


def test_the_runtime_role_serves_runs_and_step_runs(postgres_backend: Backend, roles: Roles) -> None:
    assert upgrade(roles.runtime) == head_revision()  # the image's `db upgrade` before serve: nothing to do
    require_current_schema(roles.runtime)  # what serve checks before listening
    SqlUnitOfWork(roles.runtime).probe_write()
    runtime = world_for(Backend("postgres", roles.runtime, SqlUnitOfWork(roles.runtime)))
    run = runtime.run()
    step = runtime.create(run.id, "as runtime").step_run
    assert runtime.move(step, StepRunStatus.READY).version == 1
    assert runtime.repository.get_mutation(runtime.issued[0]).step_run == step


def test_the_runtime_role_may_not_rewrite_history_or_change_the_schema(postgres_backend: Backend,
                                                                      roles: Roles) -> None:
    owner = world_for(postgres_backend)
    run = owner.run()
    step = owner.create(run.id).step_run
    for statement in ("UPDATE step_run_mutations SET run_version = 0", "DELETE FROM step_run_mutations",
                      "TRUNCATE step_run_mutations", "DELETE FROM step_runs", "UPDATE run_events SET payload = '{}'",
                      "DELETE FROM run_events", "DELETE FROM runs", "TRUNCATE runs", "UPDATE alembic_version "
                      "SET version_num = 'x'", "CREATE TABLE intruder (id int)", "DROP TABLE step_runs",
                      "ALTER TABLE step_runs DROP CONSTRAINT ck_step_runs_record_mirrors",
                      "DROP TRIGGER tr_step_run_mutations_append_only ON step_run_mutations"):
        denied(roles.runtime, statement)
    assert owner.repository.get(step.id) == step


def test_the_reader_role_reads_runs_and_step_runs_and_writes_nothing(postgres_backend: Backend,
                                                                     roles: Roles) -> None:
    owner = world_for(postgres_backend)
    run = owner.run()
    step = owner.create(run.id).step_run
    reader = SqlStepRunReader(roles.reader)
    assert reader.page(run.id, None, 10).step_runs == (step,) and reader.get(step.id) == step
    assert SqlRunQueries(roles.reader).list_runs(RunFilters(), PageRequest()).runs[0]["id"] == run.id
    for statement in ("SELECT * FROM step_run_mutations", "INSERT INTO flag_audit (origin, new_mode, actor, reason, "
                      "at_ms) VALUES ('manual', 'off', 'x', 'y', 1)", "UPDATE step_runs SET step_key = 'x'",
                      "UPDATE runs SET priority = 1", "DELETE FROM origin_flags", "CREATE TABLE intruder (id int)"):
        denied(roles.reader, statement)
    as_reader = world_for(Backend("postgres", roles.reader, SqlUnitOfWork(roles.reader)))
    with pytest.raises(StorageError):
        as_reader.steps.create_step_run(CreateStepRun("m-reader", run.id, "nope", StepRunKind.TASK, run.version + 1,
                                                      run.event_sequence + 1, ACTOR))
    with pytest.raises(StorageError):
        create(as_reader.runs)


def test_db_roles_updates_existing_roles_and_replaces_their_privileges(postgres_backend: Backend,
                                                                       roles: Roles) -> None:
    assert postgres_backend.engine is not None
    with postgres_backend.engine.begin() as conn:
        conn.execute(text(f'GRANT DELETE ON step_run_mutations TO "{roles.names[0]}"'))
    again = apply_roles(postgres_backend.engine, runtime=roles.names[0], reader=roles.names[1])
    assert [g.created for g in again] == [False, False]
    assert again[0].privileges["step_run_mutations"] == ("SELECT", "INSERT")
    assert "step_run_mutations" not in again[1].privileges
    denied(roles.runtime, "DELETE FROM step_run_mutations")


def test_the_command_line_grants_and_refuses_a_sqlite_store(postgres_backend: Backend, postgres_schema: str,
                                                            postgres_url: str, tmp_path: Path,
                                                            sqlite_template: Path) -> None:
    from bridge.cli.commands import db_roles

    names = (f"t_cli_rt_{uuid.uuid4().hex[:8]}", f"t_cli_ro_{uuid.uuid4().hex[:8]}")
    cli = Cli({**{k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")},
               "BRIDGE_DATA_DIR": str(tmp_path / "var")}, tmp_path)
    try:
        done = cli("db", "roles", "--runtime", names[0], "--reader", names[1], BRIDGE_DATABASE_URL=postgres_url,
                   BRIDGE_DATABASE_SCHEMA=postgres_schema)
        assert done.returncode == 0, done.stderr
        assert f"{names[0]} (created):" in done.stdout and "  step_run_mutations: SELECT, INSERT" in done.stdout
    finally:
        drop_roles(postgres_url, names)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "bridge.sqlite").write_bytes(sqlite_template.read_bytes())
    refused = cli("db", "roles")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "SQLite" in refused.stderr
    defaults = {p.name: p.default for p in db_roles.params}
    assert (defaults["runtime"], defaults["reader"]) == (RUNTIME_ROLE, READER_ROLE)

