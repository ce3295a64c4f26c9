"""What the ql-bridge block in config.sh adds to a task's start: bash sourcing config.sh as `shell/share.sh`
`import_config` does, with and without the block, against a real `ql-bridge serve` (up), the same port
with nothing on it (down), and a listener that accepts and never answers (hung). Run by hand:

    .venv/bin/python -m tests.bench.bench_seam_probe [--runs 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bridge.cli.demo import bridge_process, free_port, migrated, serve_env
from legacy_adapters.seam_block import render_block
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.support.listeners import hung as hung_port

# share.sh's import_config, reduced to what decides the port (legacy_adapters/task_shell.py runs the same).
IMPORT_CONFIG = ('file_config_user=$1; import_config() { [[ -f $file_config_user ]] && . $file_config_user; '
                 'ql_port=${QlPort:-"5700"}; }; import_config; echo "$ql_port"')
BEFORE = "export TZ=Asia/Shanghai\n"


def source_times_ms(config: Path, runs: int) -> tuple[float, float, str]:
    """Median and p95 wall time of one bash sourcing ``config`` (a task start's share of it), and its port."""
    times, port = [], ""
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(["bash", "-c", IMPORT_CONFIG, "task", str(config)], capture_output=True, text=True,
                              env={"PATH": os.environ["PATH"], "QlPort": "5701"})
        times.append((time.perf_counter() - started) * 1000)
        port = done.stdout.strip()
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)], port


def report(label: str, folder: Path, port: int, runs: int) -> None:
    plain, with_block = folder / "plain.sh", folder / "block.sh"
    plain.write_text(BEFORE)
    with_block.write_text(BEFORE + render_block(port, datetime.now(UTC)))
    base, block = source_times_ms(plain, runs), source_times_ms(with_block, runs)
    print(f"{label:<28} without block {base[0]:6.1f} ms (p95 {base[1]:6.1f}); with block {block[0]:6.1f} ms "
          f"(p95 {block[1]:6.1f}) -> port {block[2]}; the block adds {block[0] - base[0]:6.1f} ms at the median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    runs = parser.parse_args().runs
    folder = Path(tempfile.mkdtemp(prefix="bench-seam-"))
    data = create_legacy_data_dir(folder / "ql")
    store = migrated(f"sqlite:///{folder / 'bridge.sqlite'}")
    port = free_port()
    with Legacy2xDouble(data).start() as double:
        env = serve_env(port, double.url, data.root, store, BRIDGE_DATA_DIR=str(folder))
        with bridge_process(env, f"http://127.0.0.1:{port}"):
            report("bridge up (ql-bridge serve)", folder, port, runs)
    report("bridge down (refused)", folder, port, runs)
    with hung_port() as hung:
        report("bridge hung (never answers)", folder, hung, max(5, runs // 10))


if __name__ == "__main__":
    main()
