"""PostgreSQL dropping the bridge's pooled connections (a restart, a failover, pg_terminate_backend).

A sweep of the whole pool must cost no write: the first dropped connection a unit of work meets recycles
the pool, and the retry runs on a fresh connection. A connection lost during COMMIT is never retried.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from bridge.domain.errors import StoreUnavailableError
from bridge.domain.model import Mode
from bridge.service.clock import SystemClock
from bridge.service.flags import FlagService
from bridge.service.run_service import RunService
from bridge.storage.engine import make_engine
from bridge.storage.flags import SqlFlagStore
from bridge.storage.runs import SqlRunStore
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.contract.lifecycle import create, sequences

pytestmark = pytest.mark.postgres

POOL_SIZE = 5  # make_engine's PostgreSQL pool_size: every idle connection it keeps


@pytest.fixture
def app_name() -> str:
    """A name of our own, so terminating "the bridge's" backends never touches a parallel test's."""
    return f"bridge-sweep-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def named_engine(postgres_backend: object, postgres_url: str, postgres_schema: str, app_name: str) -> Iterator[Engine]:
    named = make_url(postgres_url).update_query_dict({"application_name": app_name})
    engine = make_engine(named.render_as_string(hide_password=False), pg_search_path=postgres_schema)
    yield engine
    assert engine.pool.checkedout() == 0, "a connection was left checked out"
    engine.dispose()


def warm(engine: Engine, connections: int) -> None:
    """Check ``connections`` out at once, so the pool keeps that many open, then give them all back."""
    with ExitStack() as stack:
        for _ in range(connections):
            stack.enter_context(engine.connect()).execute(text("SELECT 1"))


def terminate_backends(url: str, app_name: str) -> int:
    """What a PostgreSQL restart does to the bridge's pooled connections: the server closes every one."""
    admin = create_engine(url, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            killed = conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND application_name = :name"), {"name": app_name}).scalar()
    finally:
        admin.dispose()
    return int(killed or 0)


def test_every_write_after_the_server_dropped_the_whole_pool_succeeds(
        named_engine: Engine, postgres_url: str, app_name: str) -> None:
    service = RunService(SqlUnitOfWork(named_engine), clock=SystemClock())
    warm(named_engine, POOL_SIZE)
    assert terminate_backends(postgres_url, app_name) == POOL_SIZE

    runs = [create(service) for _ in range(POOL_SIZE)]  # raised StoreUnavailableError before the sweep

    assert [sequences(service, run.id) for run in runs] == [[1]] * POOL_SIZE


def test_a_write_on_a_swept_pool_opens_one_fresh_connection_not_one_per_dead_one(
        named_engine: Engine, postgres_url: str, app_name: str) -> None:
    uow = SqlUnitOfWork(named_engine)
    warm(named_engine, POOL_SIZE)
    assert terminate_backends(postgres_url, app_name) == POOL_SIZE
    tries: list[int] = []

    def work(store: SqlRunStore) -> None:
        tries.append(1)
        store.get_run("no-such-run")  # the store's own driver-level path, as every shadow write takes

    uow.write(work)

    assert len(tries) == 2  # the dead connection, then one fresh one


def test_a_connection_lost_during_commit_is_not_retried_and_the_next_write_succeeds(
        named_engine: Engine, postgres_url: str, postgres_schema: str, app_name: str) -> None:
    # A deferred constraint trigger runs inside COMMIT: it ends its own backend there, so the client loses
    # the connection after COMMIT was sent. The server rolled back, but the client cannot know that.
    with named_engine.begin() as conn:
        conn.execute(text("CREATE TABLE commit_probe (id int)"))
        conn.execute(text("CREATE FUNCTION die_at_commit() RETURNS trigger AS $$ BEGIN "
                          "PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$ LANGUAGE plpgsql"))
        conn.execute(text("CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON commit_probe "
                          "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die_at_commit()"))
    uow = SqlUnitOfWork(named_engine)
    tries: list[int] = []

    def insert(store: SqlRunStore) -> None:
        tries.append(1)
        store._conn.execute(text("INSERT INTO commit_probe VALUES (1)"))

    with pytest.raises(StoreUnavailableError):
        uow.write(insert)

    assert len(tries) == 1  # the outcome of that COMMIT is unknown: it is never sent twice
    service = RunService(uow, clock=SystemClock())
    assert sequences(service, create(service).id) == [1]


def test_the_flags_are_read_on_a_fresh_connection_after_the_server_dropped_the_pool(
        named_engine: Engine, postgres_url: str, app_name: str) -> None:
    flags = FlagService(SqlFlagStore(named_engine), lambda: time.time_ns() // 1_000_000)
    flags.set_mode("manual", "shadow", actor="ops", reason="measure")
    warm(named_engine, POOL_SIZE)
    assert terminate_backends(postgres_url, app_name) == POOL_SIZE

    # The first read met a dead connection and raised; the callback path then saw every origin off.
    assert flags.modes()["manual"] is Mode.SHADOW
