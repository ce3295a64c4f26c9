"""The ql-bridge block fails safe per callback, checked the way 2.x runs it: real bash sources config.sh as
`shell/share.sh` `import_config` does, from the environment of 2.x's backend (both README layouts), and the
checks ask bash where the shells' callbacks go; then `ql-bridge seam install` against a real `ql-bridge serve`
and 2.x's task shell double, bridge up and down. Every release's own real shell: test_release_shells.py.
"""

from __future__ import annotations

import os
import shutil
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
from legacy_adapters.seam_block import render_block
from legacy_adapters.task_shell import task_shell_targets
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.support.listeners import unused_port

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
def test_the_block_sends_callbacks_to_the_bridge_and_leaves_qlport_to_2x(tmp_path: Path, layout: str,
                                                                        without_bridge: int) -> None:
    bridge = unused_port()  # nothing is sent: bash is only asked where a callback would go

    shell = task_shell_targets(config_with_block(tmp_path, bridge), backend_environment(layout))

    assert shell.bridge_port == bridge and shell.error is None
    assert shell.qlport == without_bridge and not shell.set_by_config_sh  # where 2.x's own fail-over goes


def test_sourcing_the_block_costs_no_network_and_no_wait(tmp_path: Path) -> None:
    path = config_with_block(tmp_path, unused_port())
    started = time.monotonic()
    bash = shutil.which("bash") or "/bin/bash"
    done = subprocess.run([bash, "-c", '. "$1"', "sh", str(path)], env={"PATH": "/nonexistent"},
                          capture_output=True, text=True, timeout=10)  # not even curl on PATH: nothing runs it

    assert done.returncode == 0 and done.stdout == done.stderr == ""
    assert time.monotonic() - started < 1.0


def test_the_block_leaves_the_shells_other_settings_and_curl_calls_and_works_under_set_u(tmp_path: Path) -> None:
    path = config_with_block(tmp_path, unused_port(), before='export TZ=Asia/Shanghai\nRandomDelay="300"\n')
    script = '. "$1"; echo "${QlPort-unset} $TZ $RandomDelay"; curl -s -o /dev/null -w "%{http_code}" file:///dev/null'
    done = subprocess.run(["bash", "-uc", script, "sh", str(path)], env={"PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=10)

    assert done.returncode == 0 and done.stderr == "" and done.stdout.split() == ["unset", "Asia/Shanghai", "300",
                                                                                   "000"]


def test_a_posix_sh_sourcing_config_sh_skips_the_block(tmp_path: Path) -> None:
    done = subprocess.run(["sh", "-c", '. "$1"; command -v curl >/dev/null; type curl', "sh",
                           str(config_with_block(tmp_path, unused_port()))], capture_output=True, text=True,
                          timeout=10, env={"PATH": os.environ["PATH"]})

    assert done.returncode == 0 and "function" not in done.stdout and done.stderr == ""


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
