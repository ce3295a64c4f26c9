"""Kill the bridge while callbacks flow, restart it, and account for every execution 2.x accepted.

Shadow recording must never lose an execution silently: each one 2.x accepted has a Run, or the reconciler
names it `missing`. A call 2.x rejected leaves no fact at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from bridge.cli.demo import CURL_HEADERS, bridge_process, free_port, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.schema import mismatches_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

ROUNDS = 3
REJECTED_PID_BASE = 900_000


def test_sigkills_under_load_lose_no_execution_silently_and_rejected_calls_leave_no_fact(
        tmp_path: Path, store: tuple[str, str | None]) -> None:
    url, schema = store
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("victim", "task victim.sh", "0 * * * *")
    port = free_port()
    accepted: list[int] = []  # pids whose start 2.x accepted through the bridge
    rejected: list[int] = []
    with Legacy2xDouble(data).start() as double:
        env = serve_env(port, double.url, data.root, url, BRIDGE_DATA_DIR=str(tmp_path),
                        BRIDGE_RECONCILE_GRACE_S="0", **({"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}))
        next_pid = iter(range(10_000, 20_000))
        for _ in range(ROUNDS):
            with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
                stop = threading.Event()
                sender = threading.Thread(target=_send, args=(port, data.system_token, cron, next_pid, stop,
                                                              accepted, rejected))
                sender.start()
                time.sleep(1.5)
                os.kill(proc.pid, signal.SIGKILL)  # mid-flight: no drain, no shutdown of any kind
                proc.wait(10)
                stop.set()
                sender.join(30)
        with bridge_process(env, f"http://127.0.0.1:{port}"):
            pass  # the restart's recovery settles what the kills left open
        reconciled = subprocess.run([sys.executable, "-m", "bridge.cli", "reconcile"], env=env, capture_output=True,
                                    text=True, timeout=120)

    assert reconciled.returncode == 0, reconciled.stderr
    assert len(accepted) >= ROUNDS and rejected
    engine = make_engine(url, pg_search_path=schema)
    try:
        with engine.connect() as conn:
            recorded = {row.legacy_pid for row in conn.execute(select(runs_table.c.legacy_pid)
                                                               .where(runs_table.c.legacy_cron_id == cron))}
            missing = {json.loads(row.diff)["legacy"]["pid"] for row in conn.execute(
                select(mismatches_table.c.diff).where(mismatches_table.c.kind == "missing",
                                                      mismatches_table.c.resolved_at_ms.is_(None)))}
    finally:
        engine.dispose()
    unaccounted = [pid for pid in accepted if pid not in recorded and pid not in missing]
    assert unaccounted == [], f"{len(unaccounted)} of {len(accepted)} accepted executions vanished silently"
    assert not recorded & set(rejected)  # a call 2.x refused created nothing


def _send(port: int, token: str, cron: int, pids: object, stop: threading.Event, accepted: list[int],
          rejected: list[int]) -> None:
    """Executions (start, then end) through the bridge, with a refused call (bad token) every few."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        n = 0
        while not stop.is_set():
            n += 1
            if n % 5 == 0:
                pid = REJECTED_PID_BASE + n
                try:
                    reply = client.put("/open/crons/status?t=1", content=render_status_body(cron, 0, pid, "r.log", 1),
                                       headers={**CURL_HEADERS, "Authorization": "Bearer not-a-token"})
                    if reply.status_code == 401:
                        rejected.append(pid)
                except httpx.HTTPError:
                    pass
                continue
            pid = next(pids)  # type: ignore[call-overload]
            begin = int(time.time())
            headers = {**CURL_HEADERS, "Authorization": f"Bearer {token}"}
            try:
                if client.put("/open/crons/status?t=1", content=render_status_body(cron, 0, pid, f"v{pid}.log", begin),
                              headers=headers).status_code != 200:
                    continue
                accepted.append(pid)
                client.put("/open/crons/status?t=1", content=render_status_body(cron, 1, pid, f"v{pid}.log", begin,
                                                                                 1, 0), headers=headers)
            except httpx.HTTPError:
                continue  # the bridge died under this call: the shell's curl would have failed too
