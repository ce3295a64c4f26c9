"""`bridge serve` refuses to start, with one line, where it would otherwise run blind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], env=env, capture_output=True, text=True,
                          timeout=30)


def test_a_shadow_flag_without_2xs_data_directory_refuses_to_serve_naming_the_variable(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(store)
    upgrade(engine)
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env |= {"BRIDGE_DATABASE_URL": store, "BRIDGE_DATA_DIR": str(tmp_path), "BRIDGE_LISTEN": "127.0.0.1:1"}
    flipped = _cli(env, "flags", "set", "manual", "shadow", "--actor", "ops", "--reason", "try it")
    assert flipped.returncode == 0, flipped.stderr

    served = _cli(env, "serve")

    assert served.returncode != 0
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1 and "BRIDGE_LEGACY_DATA_DIR" in lines[0] and "manual" in lines[0], served.stderr
