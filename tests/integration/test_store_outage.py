"""A store that does not take writes loses no fact: while another process holds the SQLite store's write lock,
every callback is answered within its budget, what 2.x accepted is kept in the local journal, and once the lock
is gone the journal is replayed so that every execution has the same Run facts as in a run without the outage.

The real callback path in-process (bootstrap's builder, the 2.x double over HTTP), on a clock the test moves, so
that two runs of the same executions can be compared fact for fact.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import select

from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.keeper import FactKeeper, StoreStillOut
from bridge.metrics import BridgeMetrics
from bridge.service.ports import StaticModes
from bridge.storage.engine import make_engine
from bridge.storage.journal import SqliteFactJournal
from bridge.storage.migrate import upgrade
from bridge.storage.schema import run_attempts_table, runs_table
from bridge.storage.unit_of_work import SqlUnitOfWork
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.support import wiring
from tests.support.routes import SHELL_STATUS
from tests.support.sqlite_lock import held_by_another_process

HOUR = 1_796_216_400  # a whole hour (UTC): "0 * * * *" matches a begin one second later
EVERY_ORIGIN = StaticModes(frozenset({"manual", "boot", "scheduled_node", "scheduled_system", "script"}))
BUDGET_MS = 200
FACT_COLUMNS = ("legacy_cron_id", "legacy_pid", "status", "started_at_ms", "finished_at_ms", "duration_ms", "origin",
                "mode", "owner", "error_code", "synthesized")
ATTEMPT_COLUMNS = ("status", "exit_code", "started_at_ms", "finished_at_ms", "error_code")


class SteppedClock:
    """The bridge's clock: each reading one millisecond after the last, from a fixed instant."""

    def __init__(self) -> None:
        self.now = (HOUR + 5) * 1000

    def now_ms(self) -> int:
        self.now += 1
        return self.now


@dataclass
class World:
    data: LegacyDataDir
    interceptor: ShadowInterceptor
    keeper: FactKeeper
    http: httpx.Client
    backend: Backend
    metrics: BridgeMetrics

    def send(self, body: bytes) -> float:
        """One callback through the bridge; returns how long the bridge held it (its own steps, not 2.x's)."""
        started = time.monotonic()
        prepared = self.interceptor.before_forward(SHELL_STATUS, body)
        held = time.monotonic() - started
        status = self.http.put("/open/crons/status", content=body, headers={
            "Authorization": f"Bearer {self.data.system_token}", "Content-Type": "application/json"}).status_code
        assert status == 200
        started = time.monotonic()
        if prepared is not None:
            self.interceptor.after_forward(prepared, status)  # type: ignore[arg-type]
        return held + time.monotonic() - started

    def execution(self, cron: int, pid: int, exit_code: int) -> list[float]:
        log = f"o/{pid}.log"
        return [self.send(render_status_body(cron, 0, pid, log, HOUR + 1)),
                self.send(render_status_body(cron, 1, pid, log, HOUR + 1, 2, exit_code))]

    def drain(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self.keeper.holding:
            try:
                self.keeper.replay_once(self.interceptor.execute_fact)
            except StoreStillOut:
                assert time.monotonic() < deadline, "the store never took the kept facts"
                time.sleep(0.2)

    def facts(self) -> list[tuple[object, ...]]:
        engine = self.backend.engine
        assert engine is not None
        attempts = run_attempts_table
        with engine.connect() as conn:
            rows = conn.execute(select(*(runs_table.c[c] for c in FACT_COLUMNS),
                                       *(attempts.c[c] for c in ATTEMPT_COLUMNS))
                                .join(attempts, attempts.c.run_id == runs_table.c.id)
                                .order_by(runs_table.c.legacy_cron_id, runs_table.c.legacy_pid, attempts.c.attempt))
            return [tuple(row) for row in rows]


@contextmanager
def world(backend: Backend, root: Path) -> Iterator[World]:
    data = create_legacy_data_dir(root / "ql")
    for name in ("a", "b", "c"):
        data.add_cron(name, f"task {name}.sh", "0 * * * *")
    metrics = BridgeMetrics()
    journal = SqliteFactJournal(root / "journal.sqlite", capacity=1000)
    keeper = FactKeeper(journal, metrics, SteppedClock())
    settings = wiring.legacy_settings(data.root, BRIDGE_SHADOW_BUDGET_MS=str(BUDGET_MS))
    store = wiring.store_on(backend.engine, backend.uow, metrics=metrics)  # type: ignore[arg-type]
    path = wiring.callback_path(settings, store, EVERY_ORIGIN, metrics=metrics, keep_ends=False, keeper=keeper,
                                clock=SteppedClock())
    try:
        with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
            yield World(data, path.interceptor, keeper, http, backend, metrics)
    finally:
        path.interceptor.close()
        journal.close()


EXECUTIONS = [(cron, 30_000 + n, exit_code) for n, (cron, exit_code)
              in enumerate([(1, 0), (2, 3), (3, 1), (1, 0), (2, 0), (3, 3)])]


def test_a_store_held_by_another_process_loses_no_fact_and_holds_no_callback(sqlite_backend: Backend,
                                                                             tmp_path: Path) -> None:
    url = str(sqlite_backend.url)
    database = url.removeprefix("sqlite:///")
    with world(sqlite_backend, tmp_path / "outage") as outage:
        before, during, after = EXECUTIONS[:2], EXECUTIONS[2:5], EXECUTIONS[5:]
        for execution in before:
            outage.execution(*execution)
        with held_by_another_process(database):
            held = [s for execution in during for s in outage.execution(*execution)]
            assert outage.keeper.holding
        # Every callback answered within the budget and what the lock costs a write (its busy budget).
        assert max(held) < BUDGET_MS / 1000 + 1.0
        for execution in after:  # the journal still holds facts: these join it, in order
            outage.execution(*execution)
        outage.drain()
        with_outage = outage.facts()
        kept = outage.metrics.value("ql_bridge_journal_kept_total", reason="store_busy")
        queued = outage.metrics.value("ql_bridge_journal_kept_total", reason="queued")
        replayed = outage.metrics.value("ql_bridge_journal_replayed_total", result="ok")

    assert kept >= 1 and replayed == kept + queued
    assert len(with_outage) == len(EXECUTIONS)
    assert all(row[2] in ("succeeded", "failed") for row in with_outage)


def test_the_facts_after_an_outage_are_those_of_a_run_without_it(sqlite_backend: Backend, tmp_path: Path) -> None:
    database = str(sqlite_backend.url).removeprefix("sqlite:///")
    with world(sqlite_backend, tmp_path / "outage") as outage:
        outage.execution(*EXECUTIONS[0])
        with held_by_another_process(database):
            for execution in EXECUTIONS[1:4]:
                outage.execution(*execution)
        for execution in EXECUTIONS[4:]:
            outage.execution(*execution)
        outage.drain()
        with_outage = outage.facts()

    calm_backend = fresh_sqlite(tmp_path / "calm.sqlite")
    try:
        with world(calm_backend, tmp_path / "calm") as calm:
            for execution in EXECUTIONS:
                calm.execution(*execution)
            without_outage = calm.facts()
    finally:
        assert calm_backend.engine is not None
        calm_backend.engine.dispose()
    assert len(with_outage) == len(EXECUTIONS)
    assert with_outage == without_outage


def fresh_sqlite(path: Path) -> Backend:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    return Backend("sqlite", engine, SqlUnitOfWork(engine), url=url)
