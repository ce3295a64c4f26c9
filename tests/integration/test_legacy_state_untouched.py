"""The bridge never changes what 2.x writes: the same traffic with and without it leaves equal 2.x tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from bridge.cli.demo import Shell, migrated, serving_bridge
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

FIXED_NOW = 1_796_216_500.0
HOUR = 1_796_216_400
# Columns 2.x stamps with wall-clock time when a row is created by the test fixture itself.
VOLATILE = {"createdAt", "timestamp"}


def traffic(shell: Shell, crons: list[int]) -> None:
    a, b = crons
    shell.status(a, 0, 100, "a/1.log", HOUR + 1)
    shell.status(a, 0, 101, "a/2.log", HOUR + 2)
    shell.status(a, 1, 100, "a/1.log", HOUR + 1, 3, 0)
    shell.status(a, 1, 101, "a/2.log", HOUR + 2, 4, 2)
    shell.status(b, 0, 200, "b/1.log", HOUR + 1)
    shell.status(b, 0, 200, "b/1.log", HOUR + 1)  # duplicate start
    shell.status(b, 1, 200, "b/other.log", HOUR + 1, 5, 0)  # 2.x's log_path mismatch rule
    shell.raw(render_status_body(b, 1, "", "b/1.log", HOUR + 1, 1, 0))  # NaN pid: 500
    shell.status(999, 0, 1, "x.log", HOUR)  # unknown id


def tables(data: LegacyDataDir) -> dict[str, list[dict[str, Any]]]:
    def clean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]

    return {name: clean(data.query(f"SELECT * FROM {name} ORDER BY id"))
            for name in ("Crontabs", "RunningInstances", "CrontabStats")}


def setup_double(root: Path) -> tuple[LegacyDataDir, Legacy2xDouble, list[int]]:
    data = create_legacy_data_dir(root, tokens=["7f1d9c58-2a7e-4a53-9a51-1f7b6c3c2e11"], now_s=int(FIXED_NOW))
    crons = [data.add_cron("a", "task a.sh", "0 * * * *"), data.add_cron("b", "task b.sh", "*/5 * * * * *")]
    return data, Legacy2xDouble(data, clock=lambda: FIXED_NOW).start(), crons


def test_the_same_traffic_with_and_without_the_bridge_leaves_2x_in_the_same_state(tmp_path: Path) -> None:
    direct_data, direct, crons = setup_double(tmp_path / "direct")
    bridged_data, bridged, same_crons = setup_double(tmp_path / "bridged")
    assert crons == same_crons
    store = migrated(f"sqlite:///{tmp_path / 'bridge.sqlite'}")
    try:
        with httpx.Client(base_url=direct.url, timeout=10) as client:
            traffic(Shell(client, direct_data.system_token), crons)
        with serving_bridge(bridged.url, bridged_data.root, store, BRIDGE_DATA_DIR=str(tmp_path)) as url, \
                httpx.Client(base_url=url, timeout=10) as client:
            traffic(Shell(client, bridged_data.system_token), crons)
    finally:
        direct.stop()
        bridged.stop()
    assert tables(bridged_data) == tables(direct_data)
    assert tables(direct_data)["RunningInstances"]  # the traffic did write something
