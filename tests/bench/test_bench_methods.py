"""The benchmarks' method, held to what their figures claim (nothing here is about time): the raw side of
bench_run_service replays RunService's statements and round trips, the throughput rounds of bench_shadow_http
move every side through every position, bench_reconcile's fit separates per-cron from per-instance cost, and
bench_interceptor's attribution counts sqlite3's C calls on the thread that made them and leaves sqlite3 as it was."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing

import pytest

from tests.bench.bench_interceptor import SqliteClock
from tests.bench.bench_reconcile import fit_growth
from tests.bench.bench_run_service import (
    IMPLS,
    Env,
    audit,
    postgres_env,
    raw_lifecycle,
    service_lifecycle,
    shape_check,
    sqlite_env,
)
from tests.bench.bench_shadow_http import round_orders


@pytest.fixture(params=[pytest.param("sqlite", id="sqlite"),
                        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)])
def bench_env(request: pytest.FixtureRequest) -> Iterator[Env]:
    context: AbstractContextManager[Env] = (
        sqlite_env() if request.param == "sqlite" else postgres_env(request.getfixturevalue("postgres_url")))
    with context as env:
        yield env


def test_the_raw_side_hands_the_driver_what_run_service_does_in_the_same_order_and_round_trips(
        bench_env: Env) -> None:
    for _ in range(6):  # as the benchmark's warm-up: psycopg prepares a statement on its fifth use, on each side
        service_lifecycle(bench_env.svc, [[], [], [], []])
        raw_lifecycle(bench_env.raw, [[], [], [], []])

    found = audit(bench_env)

    assert found.differences() == [], found.sent
    assert found.statements[IMPLS[0]] == found.statements[IMPLS[1]]
    assert all(count >= 4 for count in found.statements[IMPLS[0]]), found.sent  # cursor-level, not just COMMIT
    if found.round_trips is not None:
        assert found.round_trips[IMPLS[0]] == found.round_trips[IMPLS[1]], found.round_trips
    assert shape_check(bench_env) == []


def test_throughput_rounds_put_every_side_once_in_every_position() -> None:
    names = ["shadow-on", "pass-through", "direct", "bare"]

    orders = round_orders(names, len(names))

    assert all(sorted(order) == sorted(names) for order in orders)
    for position in range(len(names)):
        assert sorted(order[position] for order in orders) == sorted(names)


def test_the_growth_fit_separates_the_cost_per_cron_from_the_cost_per_instance() -> None:
    def seconds(crons: int, instances: int) -> float:
        return 0.5 + 0.0006 * crons + 0.0002 * instances

    points = [(c, n, seconds(c, n)) for c in (10_000, 1_000) for n in (10_000, 100_000)]

    fitted = fit_growth(points)

    assert fitted is not None
    assert [round(v, 6) for v in fitted] == [0.5, 0.0006, 0.0002]
    assert fit_growth([(10_000, n, seconds(10_000, n)) for n in (10_000, 100_000)]) is None  # crons never vary


def test_the_attribution_counts_sqlite_calls_by_the_thread_that_made_them_and_restores_sqlite() -> None:
    plain_connect = sqlite3.connect
    clock = SqliteClock()
    # A statement that makes SQLite itself work: a recursive count to 200,000.
    busy = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) SELECT count(*) FROM n"

    with clock.installed(), closing(sqlite3.connect(":memory:", check_same_thread=False)) as conn:
        assert conn.execute(busy).fetchone() == (200000,)
        caller_only = (clock.caller, clock.lanes)
        lane = threading.Thread(target=lambda: conn.cursor().execute(busy).fetchall(), name="shadow-0")
        lane.start()
        lane.join()

    assert caller_only[0] > 0 and caller_only[1] == 0
    assert clock.lanes > 0 and clock.caller == caller_only[0]
    assert sqlite3.connect is plain_connect and sqlite3.dbapi2.connect is plain_connect
