"""A real 2.x data directory plus shadow Runs written by ShadowRecorder on each SQL store, and a report over both.

2.x's RunningInstances rows are inserted with sqlite3 using 2.x's own columns; the cron command and log paths
carry secret-looking markers so the tests can prove no report ever shows them.
"""

from __future__ import annotations

import itertools
import sqlite3
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from bridge.bootstrap.commands import report_sources
from bridge.config import Settings
from bridge.jobs.report.build import build_report
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.schema import mismatches_table, runs_table
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.reader import LegacyReader
from legacy_adapters.schema import format_updated_at
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from projections.gates import GateThresholds
from tests.conftest import Backend

NOW_MS = 1_796_216_400_000  # 2026-12-02T13:00:00Z
NOW_S = NOW_MS // 1000
SINCE_MS = NOW_MS - 7 * 86_400_000
SECRET_COMMAND = "task secret_job.js --token=TOKEN-c0ffee-SECRET-7731 && echo PASSWORD=hunter2-SECRET"
SECRET_LOG_DIR = "LOGPATH-SECRET-a9b8"
SECRETS = ("TOKEN-c0ffee-SECRET-7731", "hunter2-SECRET", SECRET_LOG_DIR, "secret_job.js", "/ql/data/log")


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.at = now_ms

    def now_ms(self) -> int:
        return self.at


@dataclass
class Scenario:
    """One 2.x data dir and one bridge store; ``execution`` writes both sides of one run."""

    legacy: LegacyDataDir
    backend: Backend
    clock: FixedClock
    recorder: ShadowRecorder
    settings: Settings
    pids: itertools.count = field(default_factory=lambda: itertools.count(4000))

    def cron(self, schedule: str = "0 3 * * *", command: str = SECRET_COMMAND) -> int:
        return self.legacy.add_cron(None, command, schedule)

    def execution(self, cron_id: int, started_s: int, *, status: int = 1, exit_code: int | None = 0,
                  shadow: str = "end", shadow_exit: int | None = None, origin: str = "manual") -> dict[str, Any]:
        """A 2.x instance (status/exit_code as 2.x holds them) and, unless shadow == "none", its shadow Run:
        "end" closes it with ``shadow_exit`` (default: the 2.x exit code), "unreported" closes it with no exit code
        (every end before v2.21), "stop" cancels it, "open" leaves it."""
        pid = next(self.pids)
        log_path = f"/ql/data/log/{SECRET_LOG_DIR}/{cron_id}/{pid}.log"
        finished = started_s + 5 if status != 0 else None
        stamp = format_updated_at(started_s * 1000)
        with closing(sqlite3.connect(self.legacy.database_path)) as conn, conn:
            conn.execute("INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, finished_at, status, "
                         "exit_code, createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (cron_id, pid, log_path, started_s, finished, status, exit_code, stamp, stamp))
        if shadow == "none":
            return {"pid": pid, "log_path": log_path}
        context = ExecutionContext(origin=origin, evidence="test", task_revision="rev")
        facts = CallbackFacts(cron_id=cron_id, pid=pid, log_ref=log_path_digest(log_path),
                              started_at_ms=started_s * 1000, duration_ms=None, exit_code=None,
                              received_at_ms=started_s * 1000 + 200)
        self.clock.at = started_s * 1000 + 200
        run_id = self.recorder.record_start(facts, context).run_id
        self.clock.at = started_s * 1000 + 5000
        if shadow in ("end", "unreported"):
            given = None if shadow == "unreported" else exit_code if shadow_exit is None else shadow_exit
            end = CallbackFacts(cron_id=cron_id, pid=pid, log_ref=facts.log_ref, started_at_ms=facts.started_at_ms,
                                duration_ms=5000, exit_code=given, received_at_ms=self.clock.at)
            self.recorder.record_end(end, lambda: context)
        elif shadow == "stop":
            self.recorder.record_stop(cron_id, self.clock.at)
        return {"pid": pid, "log_path": log_path, "run_id": run_id}

    def mismatch(self, kind: str, *, first_seen_ms: int, origin: str | None = "manual", resolved: bool = False,
                 cron_id: int | None = None, run_id: str | None = None, diff: str = "{}",
                 expired: str | None = None, closed_ms: int = NOW_MS) -> None:
        """A mismatch row: open, closed as resolved (``resolved``) or as expired with a reason, at ``closed_ms``."""
        assert self.backend.engine is not None
        closed = {"resolved_at_ms": closed_ms} if resolved or expired else {}
        with self.backend.engine.begin() as conn:
            conn.execute(insert(mismatches_table).values(
                kind=kind, origin=origin, legacy_cron_id=cron_id, run_id=run_id,
                dedupe_key=f"{kind}:{uuid.uuid4().hex}",
                first_seen_ms=first_seen_ms, last_seen_ms=first_seen_ms, occurrences=1, diff=diff,
                **closed, **({"expired_reason": expired} if expired else {})))

    def run_status(self, run_id: str) -> str:
        assert self.backend.engine is not None
        with self.backend.engine.connect() as conn:
            return str(conn.execute(select(runs_table.c.status).where(runs_table.c.id == run_id)).scalar_one())

    def mark_imported(self, run_id: str) -> None:
        assert self.backend.engine is not None
        with self.backend.engine.begin() as conn:
            conn.execute(update(runs_table).where(runs_table.c.id == run_id).values(mode="legacy_import"))

    def report(self, *, min_executions: int = 20, origins: list[str] | None = None) -> dict[str, Any]:
        return build_report(self.settings, report_sources(self.backend.engine), LegacyReader(self.legacy.database_path),
                            since_ms=SINCE_MS, until_ms=NOW_MS, origins=origins, now_ms=NOW_MS,
                            thresholds=GateThresholds(min_executions=min_executions), batch_size=7)


def make_scenario(backend: Backend, tmp_path: Path, legacy_tz: str | None = "UTC") -> Scenario:
    legacy = create_legacy_data_dir(tmp_path / "ql-data")
    clock = FixedClock(NOW_MS)
    recorder = ShadowRecorder(RunService(backend.uow, clock=clock))  # type: ignore[arg-type]
    settings = Settings(database_url=backend.url or "", data_dir=tmp_path, legacy_data_dir=legacy.root,
                        legacy_tz=legacy_tz, legacy_scheduler="node")
    return Scenario(legacy, backend, clock, recorder, settings)


@pytest.fixture
def scenario(sql_backend: Backend, tmp_path: Path) -> Scenario:
    """Parametrized over SQLite and PostgreSQL (tests/conftest.py SQL_BACKENDS)."""
    return make_scenario(sql_backend, tmp_path)


def entry(report: dict[str, Any], origin: str) -> dict[str, Any]:
    return next(o for o in report["origins"] if o["origin"] == origin)


def gate(report: dict[str, Any], origin: str, name: str) -> dict[str, Any]:
    return next(g for g in entry(report, origin)["gates"] if g["gate"] == name)
