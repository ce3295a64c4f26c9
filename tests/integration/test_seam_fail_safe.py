"""The ql-bridge block fails safe, checked the way 2.x runs it: real bash sources config.sh as `shell/share.sh`
`import_config` does, starting from the environment of 2.x's backend (both README layouts), with a real
listener answering /livez (a stand-in, and a real `ql-bridge serve`), a listener that hangs, 2.x's own frontend
answering every path, and nothing at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bridge.cli.demo import bridge_process, free_port, migrated, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.schema import runs_table
from legacy_adapters.seam_block import PROBE_TIMEOUT_S, render_block
from legacy_adapters.task_shell import task_shell_port
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.support.listeners import BRIDGE_LIVEZ, PANEL_PAGE, answering, hung, unused_port

SHELL = Path(__file__).parent / "shell" / "task_shell_double.sh"
PYTHON_CLI = [sys.executable, "-m", "bridge.cli"]
BACKEND_MOVED = "5701"  # layout 1: 2.x's backend moved inside; its QlPort is what its task shells inherit


def config_with_block(tmp_path: Path, bridge_port: int, before: str = "## user settings\n") -> Path:
    path = tmp_path / "config.sh"
    path.write_text(before + render_block(bridge_port, datetime.now(UTC)))
    return path


def backend_environment(layout: str, **extra: str) -> dict[str, str]:
    """What 2.x's backend has, and so every task shell it spawns: QlPort only when 2.x was moved (layout 1)."""
    env = {"HOME": "/root", "QL_DIR": "/ql", **extra}
    return env | {"QlPort": BACKEND_MOVED} if layout == "moved" else env


@pytest.mark.parametrize("layout, without_bridge", [("moved", 5701), ("default", 5700)],
                         ids=["bridge on the public port, 2.x moved inside", "only the tasks' callbacks"])
def test_shells_call_the_bridge_while_it_answers_and_2x_otherwise(tmp_path: Path, layout: str,
                                                                  without_bridge: int) -> None:
    with answering(BRIDGE_LIVEZ) as up:
        assert task_shell_port(config_with_block(tmp_path, up), backend_environment(layout)).port == up
    down = unused_port()
    assert task_shell_port(config_with_block(tmp_path, down), backend_environment(layout)).port == without_bridge
    with answering(PANEL_PAGE) as panel:  # 2.x's frontend answers /livez too, with its page: not a bridge
        assert task_shell_port(config_with_block(tmp_path, panel), backend_environment(layout)).port == without_bridge


def test_a_hung_bridge_costs_a_task_start_the_probes_bound_and_no_more(tmp_path: Path) -> None:
    with hung() as port:
        started = time.monotonic()
        shell = task_shell_port(config_with_block(tmp_path, port), backend_environment("moved"))
        elapsed = time.monotonic() - started

    assert shell.port == int(BACKEND_MOVED)
    assert PROBE_TIMEOUT_S <= elapsed < PROBE_TIMEOUT_S + 1.0  # bounded, with room for a loaded machine


@pytest.mark.parametrize("remembered, without_bridge", [(BACKEND_MOVED, 5701), ("", 5700)])
def test_a_backend_restarted_from_a_shell_that_ran_the_block_does_not_pin_its_shells_to_the_bridge(
        tmp_path: Path, remembered: str, without_bridge: int) -> None:
    # `ql reload` (pm2 --update-env) or the entrypoint sourced config.sh while the bridge answered: the backend
    # now hands the bridge's port to every shell, and the port 2.x had before in QlPortWithoutBridge.
    down = unused_port()
    inherited = {"QlPort": str(down), "QlPortWithoutBridge": remembered}

    assert task_shell_port(config_with_block(tmp_path, down), backend_environment("default", **inherited)).port \
        == without_bridge


def test_the_block_leaves_the_shells_other_settings_and_works_under_set_u(tmp_path: Path) -> None:
    with answering(BRIDGE_LIVEZ) as up:
        path = config_with_block(tmp_path, up, before='export TZ=Asia/Shanghai\nRandomDelay="300"\n')
        done = subprocess.run(["bash", "-uc", '. "$1"; echo "$QlPort $TZ $RandomDelay"', "sh", str(path)],
                              env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=10)

    assert done.returncode == 0 and done.stderr == "" and done.stdout.split() == [str(up), "Asia/Shanghai", "300"]


def test_2x_records_every_execution_itself_while_the_bridge_is_down_and_the_bridge_records_it_when_up(
        tmp_path: Path) -> None:
    """End to end: `ql-bridge seam install` against a real `ql-bridge serve`, then 2.x's task shell (its double)
    with the backend's environment, bridge up and bridge down."""
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("seam", "task seam.sh", "0 * * * *")
    (data.root / "config" / "config.sh").write_text("## user settings\n")
    store = migrated(f"sqlite:///{tmp_path / 'bridge.sqlite'}")
    bridge_port = free_port()
    with Legacy2xDouble(data).start() as double:
        shell_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "QlPort": double.url.rsplit(":", 1)[1]}
        env = serve_env(bridge_port, double.url, data.root, store, BRIDGE_DATA_DIR=str(tmp_path))
        with bridge_process(env, f"http://127.0.0.1:{bridge_port}"):
            install = subprocess.run([*PYTHON_CLI, "seam", "install"], env=env, capture_output=True, text=True,
                                     timeout=60)
            up = run_task_shell(data.root, cron, shell_env)
        down = run_task_shell(data.root, cron, shell_env)
        status_calls = [r for r in double.requests() if r.path == "/open/crons/status"]
    engine = make_engine(store)
    with engine.connect() as conn:
        runs = conn.execute(select(func.count()).select_from(runs_table).where(runs_table.c.legacy_cron_id == cron))
        recorded = runs.scalar()
    engine.dispose()

    assert install.returncode == 0, install.stdout + install.stderr
    assert up.returncode == 0 and down.returncode == 0, up.stderr + down.stderr
    assert len(status_calls) == 4  # 2.x saw both executions' start and end: through the bridge, then directly
    assert recorded == 1  # the bridge recorded the one it saw; the reconciler reports the other as missing


def run_task_shell(data_root: Path, cron: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SHELL), str(data_root), str(cron), str(int(time.time()) - 30)], env=env,
                          capture_output=True, text=True, timeout=60)
