"""Fixtures for the 2.x projection: a real 2.x data dir, bridge-owned primary Runs, a projector on each store."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from bridge.domain.events import Actor, ActorType
from bridge.domain.model import AttemptStatus, Mode, Owner, Run, RunAttempt, RunStatus
from bridge.metrics import BridgeMetrics
from bridge.service.run_service import RunService, RunTransaction
from bridge.storage.outbox import SqlOutbox
from bridge.storage.schema import projection_outbox_table
from legacy_adapters.status_writer import LegacyStatusWriter
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from projections.projector import Projector
from tests.conftest import Backend
from tests.support.waiting import wait_for  # noqa: F401 - the projection tests wait on the projector thread

T0_MS = 1_796_216_497_123  # 2026-12-02 13:01:37.123 UTC
EXECUTOR = Actor(ActorType.EXECUTOR, "projection-test")
ON_DISK_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} \+00:00$")


class ManualClock:
    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@dataclass(frozen=True)
class Execution:
    cron_id: int
    run_id: str
    attempt_id: str | None
    pid: int | None
    log_path: str | None
    started_at_ms: int | None


@dataclass
class PrimaryRuns:
    """Opens and closes bridge-owned Runs the way the primary path will: facts + outbox row, one transaction."""

    runs: RunService
    clock: ManualClock
    executions: list[Execution] = field(default_factory=list)

    def start(self, cron_id: int, pid: int | None = 4321, *, log_path: str | None = None,
              started_at_ms: int | None = None) -> Execution:
        started = self.clock.now if started_at_ms is None else started_at_ms
        log_path = log_path if log_path is not None else f"task_{cron_id}/{started}.log"

        def work(tx: RunTransaction) -> Execution:
            run = _new_run(tx, cron_id)
            change = tx.create(run, actor=EXECUTOR)
            change.move_run(RunStatus.QUEUED)
            change.move_run(RunStatus.DISPATCHING)
            attempt = change.add_attempt(RunAttempt(
                id=tx.new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED, executor_type="local_shell",
                callback_sequence=0, created_at_ms=tx.at_ms, pid=pid, legacy_log_path=log_path))
            attempt = change.move_attempt(attempt, AttemptStatus.STARTING)
            change.move_attempt(attempt, AttemptStatus.RUNNING, started_at_ms=started)
            change.move_run(RunStatus.RUNNING, started_at_ms=started)
            tx.commit(change)
            tx.store.enqueue_projection(cron_id, run.id, attempt.id, "start", tx.at_ms)
            return Execution(cron_id, run.id, attempt.id, pid, log_path, started)

        execution = self.runs.transaction(work)
        self.executions.append(execution)
        return execution

    def queue(self, cron_id: int) -> Execution:
        """A Run accepted but not yet dispatched: no Attempt."""
        def work(tx: RunTransaction) -> Execution:
            run = _new_run(tx, cron_id)
            change = tx.create(run, actor=EXECUTOR)
            change.move_run(RunStatus.QUEUED)
            tx.commit(change)
            tx.store.enqueue_projection(cron_id, run.id, None, "start", tx.at_ms)
            return Execution(cron_id, run.id, None, None, None, None)

        return self.runs.transaction(work)

    def finish(self, execution: Execution, exit_code: int | None = 0, *, duration_ms: int | None = None) -> None:
        failed = exit_code not in (None, 0)

        def work(tx: RunTransaction) -> None:
            run, attempt = _load(tx, execution)
            change = tx.begin(run, actor=EXECUTOR)
            done = AttemptStatus.FAILED if failed else AttemptStatus.SUCCEEDED
            change.move_attempt(attempt, done, exit_code=exit_code, finished_at_ms=tx.at_ms)
            elapsed = duration_ms if duration_ms is not None else tx.at_ms - (run.started_at_ms or tx.at_ms)
            change.move_run(RunStatus.FAILED if failed else RunStatus.SUCCEEDED, duration_ms=elapsed,
                            finished_at_ms=tx.at_ms)
            tx.commit(change)
            tx.store.enqueue_projection(execution.cron_id, run.id, attempt.id, "end", tx.at_ms)

        self.runs.transaction(work)

    def cancel(self, execution: Execution) -> None:
        def work(tx: RunTransaction) -> None:
            run, attempt = _load(tx, execution)
            change = tx.begin(run, actor=EXECUTOR)
            change.set_run_fields(cancel_requested_at_ms=tx.at_ms, cancel_reason="user_stop")
            change.move_attempt(attempt, AttemptStatus.CANCELLED, finished_at_ms=tx.at_ms)
            change.move_run(RunStatus.CANCELLED, finished_at_ms=tx.at_ms)
            tx.commit(change)
            tx.store.enqueue_projection(execution.cron_id, run.id, attempt.id, "cancel", tx.at_ms)

        self.runs.transaction(work)


def _new_run(tx: RunTransaction, cron_id: int) -> Run:
    return Run(id=tx.new_id(), project_id="default", task_id=f"legacy-cron:{cron_id}", task_revision="rev",
               trigger_type="manual", status=RunStatus.CREATED, version=0, event_sequence=0,
               created_at_ms=tx.at_ms, legacy_cron_id=cron_id, origin="manual", mode=Mode.PRIMARY.value,
               owner=Owner.BRIDGE.value)


def _load(tx: RunTransaction, execution: Execution) -> tuple[Run, RunAttempt]:
    run = tx.store.get_run(execution.run_id)
    attempt = tx.store.get_attempt(execution.attempt_id or "")
    assert run is not None and attempt is not None
    return run, attempt


@dataclass
class World:
    backend: Backend
    legacy: LegacyDataDir
    clock: ManualClock
    runs: RunService
    primary: PrimaryRuns
    outbox: SqlOutbox
    writer: LegacyStatusWriter
    metrics: BridgeMetrics
    projector: Projector

    def cron(self, name: str = "sample") -> int:
        return self.legacy.add_cron(name, f"task {name}.js", "*/5 * * * *")

    def projector_with(self, **kw: Any) -> Projector:
        parts: dict[str, Any] = {"outbox": self.outbox, "writer": self.writer, "metrics": self.metrics,
                                 "clock": self.clock, "rng": random.Random(7)}
        options = {k: kw.pop(k) for k in list(kw) if k not in parts}
        parts.update(kw)
        return Projector(parts["outbox"], parts["writer"], parts["metrics"], parts["clock"], rng=parts["rng"],
                         **options)

    def outbox_states(self) -> list[str]:
        """The outbox rows' states in id order: what a test polls while a thread projects, instead of reading
        2.x's database, whose every read would take the lock the projector's write then finds busy."""
        return [row["state"] for row in self.outbox_rows()]

    def outbox_rows(self) -> list[dict[str, Any]]:
        t = projection_outbox_table
        with self.backend.engine.connect() as conn:  # type: ignore[union-attr]
            return [dict(m) for m in conn.execute(select(t).order_by(t.c.id)).mappings()]

    def set_all_pending(self) -> None:
        with self.backend.engine.begin() as conn:  # type: ignore[union-attr]
            conn.execute(update(projection_outbox_table).values(state="pending", applied_at_ms=None))

    def retry_metric(self, result: str) -> float:
        return self.metrics.value("ql_bridge_projection_retry_total", result=result)


@pytest.fixture
def legacy(tmp_path: Path) -> LegacyDataDir:
    return create_legacy_data_dir(tmp_path / "ql", limited_app=False, expired_token=False)


@pytest.fixture
def world(sql_backend: Backend, legacy: LegacyDataDir) -> World:
    clock = ManualClock()
    runs = RunService(sql_backend.uow, clock=clock)  # type: ignore[arg-type]
    outbox = SqlOutbox(sql_backend.engine)  # type: ignore[arg-type]
    writer = LegacyStatusWriter(legacy.database_path)
    metrics = BridgeMetrics()
    projector = Projector(outbox, writer, metrics, clock, rng=random.Random(7))
    return World(sql_backend, legacy, clock, runs, PrimaryRuns(runs, clock), outbox, writer, metrics, projector)
