"""The README's layouts, checked the way 2.x spawns its task shells.

2.x's backend takes its port from `QlPort` at container start (BACK_PORT), and every task shell it spawns
inherits that environment; the shell then sources `config/config.sh` and calls `localhost:${QlPort}`.
So moving 2.x to another port moves its own tasks' callbacks with it, around the bridge, unless
config.sh points the shells back at the bridge. `task_shell_double.sh` is a double of that shell.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bridge.cli.demo import bridge_process, free_port, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.schema import runs_table
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

SHELL = Path(__file__).parent / "shell" / "task_shell_double.sh"


@pytest.mark.parametrize("layout, config_sh_points_at_bridge, recorded", [
    ("bridge on the public port, 2.x moved inside", True, 1),
    ("bridge on the public port, 2.x moved inside", False, 0),  # the layout that lost 2.x's own tasks
    ("only the tasks' callbacks through the bridge", True, 1),
])
def test_a_task_shell_spawned_by_2x_reaches_the_bridge_only_through_config_sh(
        tmp_path: Path, layout: str, config_sh_points_at_bridge: bool, recorded: int) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("seam", "task seam.sh", "0 * * * *")
    store = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(store)
    upgrade(engine)
    bridge_port = free_port()
    with Legacy2xDouble(data).start() as double:
        backend_port = double.url.rsplit(":", 1)[1]
        # What 2.x's backend process has in its environment, and so every shell it spawns.
        backend_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "QlPort": backend_port}
        if layout.startswith("only"):
            backend_env.pop("QlPort")  # 2.x left on its default port: the container sets no QlPort
        if config_sh_points_at_bridge:
            (data.root / "config" / "config.sh").write_text(f"export QlPort={bridge_port}\n")
        env = serve_env(bridge_port, double.url, data.root, store, BRIDGE_DATA_DIR=str(tmp_path))
        with bridge_process(env, f"http://127.0.0.1:{bridge_port}"):
            shell = subprocess.run(["bash", str(SHELL), str(data.root), str(cron), str(int(time.time()) - 30)],
                                   env=backend_env, capture_output=True, text=True, timeout=60)
        status_calls = [r for r in double.requests() if r.path == "/open/crons/status"]
    with engine.connect() as conn:
        runs = conn.execute(select(func.count()).select_from(runs_table)
                            .where(runs_table.c.legacy_cron_id == cron)).scalar()
    engine.dispose()

    assert shell.returncode == 0, shell.stderr
    assert len(status_calls) == 2  # 2.x saw both callbacks either way
    assert runs == recorded
