"""`ql-bridge doctor` end to end, against a 2.x-shaped data directory, a process that looks like 2.x's
backend to /proc, and the 2.x test double."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.cli.demo import free_port, migrated
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble


@pytest.fixture
def install(tmp_path: Path) -> Iterator[tuple[LegacyDataDir, Legacy2xDouble, int]]:
    data = create_legacy_data_dir(tmp_path / "ql")
    with Legacy2xDouble(data).start() as double:
        backend_port = int(double.url.rsplit(":", 1)[1])
        # Looks like pm2's `node /ql/static/build/app.js` to /proc, with the environment the entrypoint gave it
        # (QL_DATA_DIR: the data directory it serves, as back/config/index.ts reads it).
        fake_backend = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                         str(tmp_path / "static" / "build" / "app.js")],
                                        env={"QlPort": str(backend_port), "BACK_PORT": str(backend_port),
                                             "QL_DATA_DIR": str(data.root), "PATH": os.environ["PATH"]})
        try:
            yield data, double, backend_port
        finally:
            fake_backend.kill()
            fake_backend.wait()


def doctor(tmp_path: Path, data: LegacyDataDir, double: Legacy2xDouble,
           listen_port: int = 5700) -> subprocess.CompletedProcess[str]:
    store = migrated(f"sqlite:///{tmp_path / 'bridge.sqlite'}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env |= {"BRIDGE_DATABASE_URL": store, "BRIDGE_DATA_DIR": str(tmp_path), "BRIDGE_LEGACY_DATA_DIR": str(data.root),
            "BRIDGE_LEGACY_URL": double.url, "BRIDGE_LISTEN": f"0.0.0.0:{listen_port}", "BRIDGE_LEGACY_TZ": "UTC"}
    return subprocess.run([sys.executable, "-m", "bridge.cli", "doctor"], env=env, capture_output=True, text=True,
                          timeout=60)


def test_doctor_fails_on_the_layout_that_lets_2xs_own_tasks_bypass_the_bridge(
        tmp_path: Path, install: tuple[LegacyDataDir, Legacy2xDouble, int]) -> None:
    data, double, backend_port = install

    result = doctor(tmp_path, data, double)

    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    shells = next(line for line in lines if "seam: task shells" in line)
    assert shells.startswith("fail") and f"port {backend_port}" in shells and "bypass the bridge" in shells
    assert any("fix:" in line and "ql-bridge seam install" in line for line in lines)
    assert next(line for line in lines if "seam: 2.x's backend" in line).startswith("ok")
    assert next(line for line in lines if "2.x over HTTP" in line).startswith("ok")
    assert next(line for line in lines if "bridge store" in line).startswith("ok")
    assert "Traceback" not in result.stderr


def test_doctor_passes_the_seam_once_config_sh_points_task_shells_at_the_bridge(
        tmp_path: Path, install: tuple[LegacyDataDir, Legacy2xDouble, int]) -> None:
    data, double, _ = install
    bridge_port = free_port()
    (data.root / "config" / "config.sh").write_text(f"# user settings\nexport QlPort={bridge_port}\n")

    result = doctor(tmp_path, data, double, listen_port=bridge_port)

    shells = next(line for line in result.stdout.splitlines() if "seam: task shells" in line)
    assert shells.startswith("ok") and f"port {bridge_port}" in shells
