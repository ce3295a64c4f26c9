"""A store hiccup never changes what is recorded: through dropped connections and failed reads of the flags,
every execution 2.x accepted gets its shadow Run, and no callback is passed through as if its origin were off.

PostgreSQL: a real `bridge serve` whose pooled connections the server drops (`pg_terminate_backend`, as a
failover, a restart or a pooler's idle timeout does), between bursts of callbacks. SQLite: the real callback path
in-process, its flag reads failing while callbacks keep coming.
"""

from __future__ import annotations

import itertools
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, event, select, text
from sqlalchemy.pool import NullPool

from bridge.cli.demo import Shell, migrated, serving_bridge
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.service.flags import CachedModes, FlagService
from bridge.storage.engine import make_engine
from bridge.storage.flags import SqlFlagStore
from bridge.storage.schema import runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.integration.conftest import _postgres_store
from tests.support import wiring
from tests.support.routes import SHELL_STATUS

HOUR = 1_796_216_400  # a whole hour (UTC): "0 * * * *" matches a begin one second later
PIDS = itertools.count(20_000)
ROUNDS = 4


def recorded(engine, cron_id: int) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """pid → status of the cron's shadow Runs."""
    with engine.connect() as conn:
        rows = conn.execute(select(runs_table.c.legacy_pid, runs_table.c.status)
                            .where(runs_table.c.legacy_cron_id == cron_id))
        return {int(pid): status for pid, status in rows}


def drop_connections(url: str, app_name: str) -> int:
    admin = create_engine(url, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            return int(conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND application_name = :name"), {"name": app_name}).scalar() or 0)
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_every_execution_2x_accepted_is_recorded_through_dropped_store_connections(tmp_path: Path) -> None:
    url, schema = _postgres_store()  # type: ignore[misc]
    app_name = f"bridge-hiccup-{uuid.uuid4().hex[:10]}"
    bridge_url = f"{url}?application_name={app_name}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("hiccup", "task hiccup.sh", "0 * * * *")
    migrated(bridge_url, schema=schema)
    accepted: list[int] = []
    try:
        with Legacy2xDouble(data).start() as double, \
                serving_bridge(double.url, data.root, bridge_url, schema=schema,
                               BRIDGE_SHADOW_BUDGET_MS="5000", BRIDGE_DATA_DIR=str(tmp_path)) as url_, \
                httpx.Client(base_url=url_, timeout=30) as client:
            shell = Shell(client, data.system_token)
            swept = 0
            for _ in range(ROUNDS):
                time.sleep(1.2)  # past the flags' cache: the next callback reads them first after the sweep
                swept += drop_connections(url, app_name)
                for _ in range(6):
                    pid = next(PIDS)
                    if shell.status(cron, 0, pid, f"hiccup/{pid}.log", HOUR + 1) == 200 and \
                            shell.status(cron, 1, pid, f"hiccup/{pid}.log", HOUR + 1, 2, 0) == 200:
                        accepted.append(pid)
            off = _metric(client, "ql_bridge_legacy_callback_total", mode="off")
        engine = make_engine(url, pg_search_path=schema)
        try:
            runs = recorded(engine, cron)
        finally:
            engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
    assert swept >= ROUNDS and len(accepted) == 6 * ROUNDS
    assert off == 0, "callbacks were passed through as if their origin were off"
    assert runs == {pid: "succeeded" for pid in accepted}


def _metric(client: httpx.Client, name: str, **labels: str) -> float:
    total = 0.0
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_every_execution_is_recorded_while_sqlite_fails_the_flag_reads(sqlite_backend: Backend,
                                                                      tmp_path: Path) -> None:
    engine = sqlite_backend.engine
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("hiccup", "task hiccup.sh", "0 * * * *")
    flags = FlagService(SqlFlagStore(engine), SystemClock().now_ms)
    flags.set_mode("scheduled_system", "shadow", actor="ops", reason="measure")
    metrics = BridgeMetrics()
    modes = CachedModes(flags, ttl_s=0.0, on_failure=metrics.flags_refresh_failed)
    failing = {"on": False}

    @event.listens_for(engine, "before_cursor_execute")
    def _fail_flag_reads(_conn, _cursor, statement, *_args):  # type: ignore[no-untyped-def]
        if failing["on"] and "origin_flags" in statement:
            raise engine.dialect.dbapi.OperationalError("disk I/O error")

    reader = LegacyReader(data.database_path, keep_connections=1)
    interceptor = wiring.interceptor(wiring.legacy_settings(data.root),
                                     wiring.store_on(engine, sqlite_backend.uow),  # type: ignore[arg-type]
                                     modes, metrics=metrics, reader=reader, keep_ends=False)
    pids = [next(PIDS) for _ in range(6)]
    try:
        with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
            def via_bridge(body: bytes) -> int:
                prepared = interceptor.before_forward(SHELL_STATUS, body)
                status = http.put("/open/crons/status", content=body, headers={
                    "Authorization": f"Bearer {data.system_token}", "Content-Type": "application/json"}).status_code
                interceptor.after_forward(prepared, status)
                return status

            assert modes.any_enabled()  # read once while the store answers
            failing["on"] = True
            for pid in pids:
                assert via_bridge(render_status_body(cron, 0, pid, f"h/{pid}.log", HOUR + 1)) == 200
                assert via_bridge(render_status_body(cron, 1, pid, f"h/{pid}.log", HOUR + 1, 2, 0)) == 200
    finally:
        interceptor.close()
        reader.close()
    assert recorded(engine, cron) == {pid: "succeeded" for pid in pids}
    assert metrics.value("ql_bridge_flags_refresh_failed_total", error="store_unavailable") >= len(pids)
    assert [metrics.value("ql_bridge_legacy_callback_total", kind=kind, mode=mode)
            for kind in ("start", "end") for mode in ("off", "shadow")] == [0, len(pids), 0, len(pids)]
