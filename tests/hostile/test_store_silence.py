"""A store that stops answering never stops 2.x's tasks and loses no fact: a real `ql-bridge serve` under steady
callback load, its PostgreSQL behind a relay that goes silent (every byte held, nothing refused) for 15 s or 60 s
and then resets the old connections, as a failover does; and its SQLite store held by another process's
exclusive transaction; and a bridge restarted while its journal holds facts.

What must hold: every callback is answered as 2.x answers it within the shadow budget plus 3 s; `/readyz` says
the store is unreachable within 5 s of the silence and ready again within 10 s of its return, each answer within
a second; once the store answers, every execution has its Run with the facts its callbacks carried, in shadow
and in primary mode.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url

from bridge.domain.model import Origin
from bridge.service.flags import SEEDED_KEY, FlagChange
from bridge.storage.engine import make_engine
from bridge.storage.flags import SqlFlagStore
from bridge.storage.schema import run_attempts_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.bench.stores import fresh_store
from tests.hostile.conftest import Site, bridge_process, free_port, serve_env, start_site
from tests.support.fault_relay import fault_relay
from tests.support.sqlite_lock import held_by_another_process

pytestmark = pytest.mark.hostile
BUDGET_S = 2.0  # start_site's BRIDGE_SHADOW_BUDGET_MS
ANSWER_BOUND_S = BUDGET_S + 3.0
OK_2X = b'{"code":200}'


@dataclass
class Load:
    """Task shells on the site: each execution a start, a short run, an end with its exit code."""

    site: Site
    answers: list[tuple[float, int, bytes, float]] = field(default_factory=list)  # (at, status, body, took)
    executions: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (begin_s, exit code)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.site.url, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                pid, begin_s, exit_code = self.site.next_pid(), 1_796_216_400 + n * 7, (0, 1, 3)[n % 3]
                self.executions[pid] = (begin_s, exit_code)
                self._send(client, render_status_body(self.site.cron, 0, pid, f"s/{pid}.log", begin_s))
                time.sleep(0.1)
                self._send(client, render_status_body(self.site.cron, 1, pid, f"s/{pid}.log", begin_s, 2, exit_code))
                n += 1
                time.sleep(0.1)

    def _send(self, client: httpx.Client, body: bytes) -> None:
        started = time.monotonic()
        reply = client.put("/open/crons/status?t=1", content=body, headers=self.site.headers())
        self.answers.append((started, reply.status_code, reply.content, time.monotonic() - started))


@dataclass
class Readiness:
    """`/readyz` polled twice a second: (at, status code, the store check's reason, how long it took)."""

    url: str
    seen: list[tuple[float, int, str, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while not self.stop.wait(0.5):
                started = time.monotonic()
                try:
                    reply = client.get("/readyz")
                    reason = reply.json()["store"]["reason"]
                    self.seen.append((started, reply.status_code, reason, time.monotonic() - started))
                except (httpx.HTTPError, ValueError, KeyError):
                    self.seen.append((started, 0, "no answer", time.monotonic() - started))

    def first(self, after: float, check: Callable[[int, str], bool]) -> float | None:
        return next((at - after for at, status, reason, _ in self.seen if at >= after and check(status, reason)),
                    None)


@contextmanager
def running(*workers: Load | Readiness) -> Iterator[None]:
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for worker in workers:
            worker.stop.set()
        for thread in threads:
            thread.join(timeout=60)


def metric(site: Site, name: str) -> float:
    text = httpx.get(site.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")
               or line.startswith(name + "{"))


def wait_drained(site: Site, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metric(site, "ql_bridge_journal_rows") == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the journal still holds {metric(site, 'ql_bridge_journal_rows')} facts")


def runs_by_pid(engine: Engine, cron: int) -> dict[int, tuple[str, object, int | None, str | None]]:
    """pid -> (Run status, Attempt 1's exit code, Run started_at_ms, owner)."""
    attempts = run_attempts_table
    with engine.connect() as conn:
        rows = conn.execute(select(runs_table.c.legacy_pid, runs_table.c.status, attempts.c.exit_code,
                                   runs_table.c.started_at_ms, runs_table.c.owner)
                            .join(attempts, attempts.c.run_id == runs_table.c.id)
                            .where(runs_table.c.legacy_cron_id == cron))
        return {int(pid): (status, code, started, owner) for pid, status, code, started, owner in rows}


def assert_every_execution_recorded(load: Load, engine: Engine, cron: int) -> None:
    recorded = runs_by_pid(engine, cron)
    expected = {pid: ("succeeded" if code == 0 else "failed", code, begin * 1000)
                for pid, (begin, code) in load.executions.items() if pid in _answered_twice(load)}
    assert len(expected) >= 20
    assert {pid: recorded.get(pid, (None, None, None, None))[:3] for pid in expected} == expected


def _answered_twice(load: Load) -> set[int]:
    """The executions whose start and end were both sent before the load stopped."""
    return set(list(load.executions)[:-1])


def assert_answered_as_2x_within_bound(load: Load) -> None:
    assert load.answers
    assert all((status, body) == (200, OK_2X) for _, status, body, _ in load.answers), \
        {(s, b) for _, s, b, _ in load.answers if (s, b) != (200, OK_2X)}
    slowest = max(took for *_, took in load.answers)
    assert slowest < ANSWER_BOUND_S, slowest


def set_every_origin(engine: Engine, mode: str) -> None:
    """An operator's earlier promotion (its gates passed then): the flag rows as `ql-bridge flags set` leaves them,
    on a store already seeded (so `serve` keeps them)."""
    flags = SqlFlagStore(engine)
    now = time.time_ns() // 1_000_000
    for origin in Origin:
        flags.change(FlagChange(origin.value, None, mode, "ops", "test", now))
    flags.put_setting(SEEDED_KEY, str(now), now)


@pytest.fixture
def pg_store(postgres_url: str, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    with fresh_store("postgres", tmp_path, postgres_url, name="silence") as created:
        yield created


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["shadow", "primary"])
@pytest.mark.parametrize("silence_s", [15, 60])
def test_postgres_going_silent_holds_no_task_and_loses_no_fact(tmp_path: Path, pg_store: tuple[str, str | None],
                                                               silence_s: int, mode: str) -> None:
    url, schema = pg_store
    direct = make_engine(url, pg_search_path=schema)
    parsed = make_url(url)
    with fault_relay(parsed.host or "127.0.0.1", parsed.port or 5432) as relay:
        through_relay = parsed.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
        if mode == "primary":
            set_every_origin(direct, "primary")
        for site in start_site(tmp_path, (through_relay, schema)):
            load, readiness = Load(site), Readiness(site.url)
            with running(load, readiness):
                time.sleep(5)
                silent_at = time.monotonic()
                relay.blackhole()
                time.sleep(silence_s)
                relay.reset()
                relay.passing()
                back_at = time.monotonic()
                time.sleep(12)
            wait_drained(site)
            unreachable = readiness.first(silent_at, lambda status, reason: status == 503
                                          and reason == "STORE_UNREACHABLE")
            ready = readiness.first(back_at, lambda status, _reason: status == 200)
            took = sorted(t for *_, t in load.answers)
            print(f"\n{mode}, {silence_s} s silent: {len(load.executions)} executions, {len(took)} callbacks, "
                  f"slowest {took[-1]:.2f} s, p99 {took[int(len(took) * 0.99)]:.3f} s; /readyz unreachable after "
                  f"{unreachable} s, ready {ready} s after the reset; kept "
                  f"{metric(site, 'ql_bridge_journal_kept_total'):.0f}, replayed "
                  f"{metric(site, 'ql_bridge_journal_replayed_total'):.0f}, handed to 2.x "
                  f"{metric(site, 'ql_bridge_primary_fallback_total'):.0f}")
            assert metric(site, "ql_bridge_journal_dropped_total") == 0
            assert_answered_as_2x_within_bound(load)
            assert unreachable is not None and unreachable < 5.0, unreachable
            assert ready is not None and ready < 10.0, ready
            assert max(took for *_, took in readiness.seen) < 1.0
            assert_every_execution_recorded(load, direct, site.cron)
            if mode == "primary":  # some went to 2.x meanwhile
                assert metric(site, "ql_bridge_primary_fallback_total") > 0, site.log()[-4000:]
    direct.dispose()


def test_a_sqlite_store_held_by_another_process_holds_no_task_and_loses_no_fact(tmp_path: Path) -> None:
    with fresh_store("sqlite", tmp_path, "", name="held") as (url, _schema):
        database = Path(make_url(url).database or "")
        engine = make_engine(url)
        for site in start_site(tmp_path, (url, None)):
            load, readiness = Load(site), Readiness(site.url)
            with running(load, readiness):
                time.sleep(3)
                with held_by_another_process(database):
                    held_at = time.monotonic()
                    time.sleep(15)
                released_at = time.monotonic()
                time.sleep(8)
            wait_drained(site)
            assert_answered_as_2x_within_bound(load)
            assert metric(site, "ql_bridge_journal_kept_total") > 0
            failing = readiness.first(held_at, lambda status, _reason: status == 503)
            assert failing is not None and failing < 5.0, failing
            ready = readiness.first(released_at, lambda status, _reason: status == 200)
            assert ready is not None and ready < 10.0, ready
            assert_every_execution_recorded(load, engine, site.cron)
        engine.dispose()


@contextmanager
def bridge_on(root: Path, data: LegacyDataDir, double: Legacy2xDouble, cron: int, store: tuple[str, str | None],
              ) -> Iterator[Site]:
    """A `ql-bridge serve` in front of ``double`` with its data (and so its journal) under ``root``."""
    url, schema = store
    port = free_port()
    env = serve_env(port, double.url, data.root, url, BRIDGE_DATA_DIR=str(root), BRIDGE_SHADOW_BUDGET_MS="2000",
                    **({"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}))
    with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
        yield Site(f"http://127.0.0.1:{port}", port, data, double, proc, url, schema, cron)


@pytest.mark.postgres
def test_facts_kept_when_the_bridge_stops_are_replayed_by_the_next_one(tmp_path: Path,
                                                                       pg_store: tuple[str, str | None]) -> None:
    url, schema = pg_store
    direct = make_engine(url, pg_search_path=schema)
    parsed = make_url(url)
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("restart", "task restart.sh", "0 * * * *")
    with fault_relay(parsed.host or "127.0.0.1", parsed.port or 5432) as relay, Legacy2xDouble(data).start() as double:
        store = (parsed.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False), schema)
        with bridge_on(tmp_path, data, double, cron, store) as site:
            load = Load(site)
            relay.blackhole()
            with running(load):
                time.sleep(12)
            os.killpg(site.proc.pid, signal.SIGTERM)  # type: ignore[attr-defined]
            site.proc.wait(timeout=60)  # type: ignore[attr-defined]  # its lanes keep what they held
        relay.reset()
        relay.passing()
        with bridge_on(tmp_path, data, double, cron, store) as again:  # the same BRIDGE_DATA_DIR: the same journal
            wait_drained(again)
            assert metric(again, "ql_bridge_journal_replayed_total") >= len(_answered_twice(load))
        assert_answered_as_2x_within_bound(load)
        assert_every_execution_recorded(load, direct, cron)
    direct.dispose()
