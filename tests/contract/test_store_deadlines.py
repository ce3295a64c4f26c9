"""Every wait on a PostgreSQL store has a deadline, also when the network holds the bytes without refusing them
(tests.support.fault_relay between the bridge and the server): an exchange, a new connection and a unit of work
each fail within their bound, a connection that missed its deadline is discarded, and the store is used again as
soon as it answers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from bridge.domain.errors import StoreUnavailableError
from bridge.storage.engine import StoreDeadlines, make_engine
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.support.fault_relay import FaultRelay, fault_relay

pytestmark = [pytest.mark.postgres, pytest.mark.hostile]
DEADLINES = StoreDeadlines(statement_ms=500, connect_s=1, keepalive_s=4)  # an exchange: 2.5 s at the most


@pytest.fixture
def relay(postgres_url: str) -> Iterator[FaultRelay]:
    url = make_url(postgres_url)
    with fault_relay(url.host or "127.0.0.1", url.port or 5432) as relay:
        yield relay


@pytest.fixture
def engine(postgres_url: str, relay: FaultRelay) -> Iterator[Engine]:
    url = make_url(postgres_url).set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    engine = make_engine(url, deadlines=DEADLINES)
    yield engine
    engine.dispose()


def select_one(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("select 1")).scalar_one())


def timed(work: object) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        work()  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - returned for the test to judge
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_a_pooled_connection_that_goes_silent_fails_within_its_deadline_and_is_never_reused(
        engine: Engine, relay: FaultRelay) -> None:
    with engine.connect() as conn:
        silent = conn.connection.dbapi_connection  # the one connection, pooled after this
    relay.blackhole()
    took, error = timed(lambda: select_one(engine))
    assert error is not None and took < DEADLINES.exchange_s + 1.0
    assert silent is not None and silent.closed  # closed at its deadline: its state is unknown
    relay.passing()
    with engine.connect() as conn:
        assert conn.connection.dbapi_connection is not silent
        assert conn.execute(text("select 1")).scalar_one() == 1


def test_a_new_connection_to_a_silent_store_gives_up_within_the_connect_timeout(
        engine: Engine, relay: FaultRelay) -> None:
    relay.blackhole()
    took, error = timed(lambda: select_one(engine))
    assert error is not None and took < DEADLINES.connect_s + 1.5


def test_a_unit_of_work_on_a_silent_store_fails_unavailable_without_waiting_again_on_a_new_connection(
        engine: Engine, relay: FaultRelay) -> None:
    uow: SqlUnitOfWork[object] = SqlUnitOfWork(engine)
    uow.probe_write()
    relay.blackhole()
    took, error = timed(uow.probe_write)
    assert isinstance(error, StoreUnavailableError)
    assert took < DEADLINES.exchange_s + 1.0  # one deadline, not a second wait for a new connection
    assert uow.outcomes.summary(60).failures == 0  # a probe is not a write outcome
    relay.passing()
    relay.reset()
    uow.probe_write()


def test_a_slow_store_still_answers_and_a_reset_one_is_reconnected_to(engine: Engine, relay: FaultRelay) -> None:
    uow: SqlUnitOfWork[object] = SqlUnitOfWork(engine)
    relay.slow(0.2)
    assert select_one(engine) == 1
    relay.passing()
    assert relay.reset() >= 1
    uow.probe_write()  # the reset connection is swept and the write runs on a new one
