"""A 2.x double with its files, a shadow store and the real interceptor in-process: the world of the tests of
2.x's database in a bad state and of startup recovery, and the part of it the reconciler's world shares."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.bootstrap import Store
from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.routes import intercepted_route
from bridge.cli.demo import ALL_ORIGINS
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.ports import StaticModes
from bridge.service.run_service import RunService
from bridge.storage.reconcile_queries import SqlReconcileStore
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.support import wiring

NOW = int(time.time())
BEGIN = NOW - 3600 - NOW % 3600 + 1  # matches "0 * * * *"
# BEGIN is one to two hours before this module was imported, and a long suite runs on after that: a grace of
# six hours leaves executions at BEGIN unjudged wherever in the hour, and however late, a test reads the clock.
UNJUDGED_GRACE_S = 6 * 3600


@dataclass
class Bridged:
    """2.x (the double's files, over HTTP), the shadow store and the real interceptor in-process: a callback sent
    through the bridge, one sent around it, and what the store made of them."""

    data: LegacyDataDir
    runs: RunService
    store: SqlReconcileStore
    interceptor: ShadowInterceptor
    http: httpx.Client
    settings: Settings  # the bridge's, in front of ``data``
    bridge: Store  # the store as the composition root hands it out (``runs`` is its RunService)

    def via_bridge(self, body: bytes, path: str = "/open/crons/status") -> int:
        route = intercepted_route("PUT", path)
        assert route is not None, path
        prepared = self.interceptor.before_forward(route, body)
        status = self.direct(body, path)
        self.interceptor.after_forward(prepared, status)
        return status

    def direct(self, body: bytes, path: str = "/open/crons/status") -> int:
        """Straight to 2.x: what the bridge never saw."""
        return self.http.put(path, content=body, headers={"Authorization": f"Bearer {self.data.system_token}",
                                                          "Content-Type": "application/json"}).status_code

    def legacy(self, sql: str, params: tuple[object, ...] = ()) -> None:
        """A write into 2.x's database behind everyone's back."""
        with closing(sqlite3.connect(self.data.database_path)) as conn, conn:
            conn.execute(sql, params)

    def run_row(self, cron_id: int, pid: int, log: str, begin: int = BEGIN) -> dict[str, Any] | None:
        found = self.store.runs_by_keys([f"legacy:{cron_id}:{pid}:{log_path_digest(log)}:{begin * 1000}"])
        return next((asdict(row) for row in found.values()), None)

    def run(self, cron_id: int, pid: int, log: str) -> tuple[str, bool] | None:
        """The Run's status and whether it was synthesized, or None when there is no Run."""
        row = self.run_row(cron_id, pid, log)
        if row is None:
            return None
        run = self.runs.get_run(row["id"])
        return run.status.value, run.synthesized


@dataclass
class World(Bridged):
    metrics: BridgeMetrics

    def unavailable(self, state: str, use: str = "shadow") -> float:
        return self.metrics.value("ql_bridge_legacy_database_unavailable_total", state=state, use=use)


@pytest.fixture
def world(sql_backend: Backend, tmp_path: Path) -> Iterator[World]:
    data = create_legacy_data_dir(tmp_path / "ql")
    for i in range(30):
        data.add_cron(f"filler {i}", f"task filler{i}.sh", "0 * * * *")
    settings = wiring.legacy_settings(data.root)
    store = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    metrics = BridgeMetrics()
    interceptor = wiring.interceptor(settings, store, StaticModes(frozenset(ALL_ORIGINS.split(","))),
                                     metrics=metrics, reader=LegacyReader(data.database_path, keep_connections=2),
                                     keep_ends=False)
    with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
        yield World(data=data, runs=store.runs, store=SqlReconcileStore(sql_backend.engine), interceptor=interceptor,
                    http=http, settings=settings, bridge=store, metrics=metrics)
    interceptor.close()


@contextmanager
def live_shell() -> Iterator[subprocess.Popen[bytes]]:
    """A task shell still at work (bash running a 60 s sleep), killed and reaped when the block ends."""
    shell = subprocess.Popen(["bash", "-c", "sleep 60; true"])
    try:
        time.sleep(0.2)  # past its exec: the process a callback names is bash, as in a real task shell
        yield shell
    finally:
        shell.kill()
        shell.wait()


def start(cron_id: int, pid: int, log: str, begin: int = BEGIN) -> bytes:
    return render_status_body(cron_id, 0, pid, log, begin)


def end(cron_id: int, pid: int, log: str, exit_code: int | None = 0, begin: int = BEGIN) -> bytes:
    return render_status_body(cron_id, 1, pid, log, begin, 3, exit_code)


