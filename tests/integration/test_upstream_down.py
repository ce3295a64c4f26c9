"""2.x unreachable: the shell gets 2.x's error shape with 502, nothing is recorded, nothing secret is logged."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from sqlalchemy import func, select

from bridge.cli.demo import CURL_HEADERS, bridge_process, free_port, read_log, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.schema import runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir

SECRET_TOKEN = "5b0f6f0e-secret-token-4a2b-9c1d"
SECRET_PATH = "very_private_job_7/2026-12-02-10-00-00-001.log"


def test_an_unreachable_2x_gives_a_502_in_2x_shape_records_nothing_and_logs_no_secret(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql-data")
    cron = data.add_cron("job", "task job.sh", "0 * * * *")
    store = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(store)
    upgrade(engine)
    port, dead = free_port(), free_port()  # nothing listens on `dead`
    env = serve_env(port, f"http://127.0.0.1:{dead}", data.root, store, BRIDGE_DATA_DIR=str(tmp_path))
    with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            reply = client.put("/open/crons/status?t=1", content=render_status_body(cron, 0, 77, SECRET_PATH, 1),
                               headers={**CURL_HEADERS, "Authorization": f"Bearer {SECRET_TOKEN}"})
            health = client.get("/healthz")
    logs = read_log(proc)
    assert reply.status_code == 502
    body = json.loads(reply.content)
    assert body["code"] == 502 and body["message"]
    assert health.status_code == 503
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(runs_table)).scalar_one() == 0
    engine.dispose()
    assert "unreachable" in logs  # it did log the failure ...
    assert SECRET_TOKEN not in logs and SECRET_PATH not in logs and "Bearer" not in logs  # ... and nothing secret
