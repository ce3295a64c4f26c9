"""`ql-bridge status` says when an origin's callbacks bypass the bridge, not only how many Runs there are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from tests.conftest import Backend
from tests.contract.test_seam_queries import _seed


def test_status_names_an_origin_whose_callbacks_bypass_the_bridge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    _seed(Backend("sqlite", engine, None))  # manual: 4 recent executions missing, 1 recorded
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env |= {"BRIDGE_DATABASE_URL": url, "BRIDGE_DATA_DIR": str(tmp_path)}

    result = subprocess.run([sys.executable, "-m", "bridge.cli", "status"], env=env, capture_output=True, text=True,
                            timeout=60)

    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("seam")]
    assert "manual: callbacks are bypassing the bridge" in line and "config.sh" in line
    assert "scheduled_system" not in line
