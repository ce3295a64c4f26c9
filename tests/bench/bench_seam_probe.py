"""What the ql-bridge block in config.sh adds to one status callback: bash sources config.sh (with and without
the block) as `shell/share.sh` `import_config` does, then sends 2.x's own callback (v2.19.2's `update_cron`
curl: the literal `http://0.0.0.0:<port>/open/crons/status`, its headers and body) over and over, timing each
call with `$EPOCHREALTIME`. Cases: no block (straight to 2.x's double); the block with a real `ql-bridge serve`
answering (the bridge forwards to the double); the bridge down (connection refused: the call fails over to the
double); the bridge not accepting (a listener whose backlog is full drops the connect: the block's connect
timeout runs out, then the call fails over); and a curl call that is not a callback (passed through). Run by
hand:

    .venv/bin/python -m tests.bench.bench_seam_probe [--runs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from bridge.cli.demo import bridge_process, free_port, migrated, serve_env
from legacy_adapters.seam_block import render_block
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.support.listeners import unused_port

# import_config as share.sh has it, then N calls timed one by one (µs, one per line).
LOOP = r"""
file_config_user=$1; url=$2; token=$3; body=$4; runs=$5
import_config() { [[ -f $file_config_user ]] && . $file_config_user; ql_port=${QlPort:-"5700"}; }
import_config
for ((i = 0; i < runs; i++)); do
  t0=${EPOCHREALTIME/./}
  api=$(curl -s --noproxy "*" "$url" -X 'PUT' -H "Accept: application/json" -H "Authorization: Bearer $token" \
    -H "Content-Type: application/json;charset=UTF-8" --data-raw "$body" --compressed)
  t1=${EPOCHREALTIME/./}
  echo $((t1 - t0))
done
"""


def call_times_ms(config: Path, url: str, token: str, body: str, runs: int) -> tuple[float, float]:
    done = subprocess.run(["bash", "-c", LOOP, "bench", str(config), url, token, body, str(runs)],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=600, check=True)
    times = sorted(int(line) / 1000 for line in done.stdout.split())
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


@contextmanager
def not_accepting() -> Iterator[int]:
    """A port whose listen backlog is full: the kernel drops new connects, as for a bridge that is wedged."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        try:
            yield port
        finally:
            for filler in fillers:
                filler.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    runs = parser.parse_args().runs
    folder = Path(tempfile.mkdtemp(prefix="bench-seam-"))
    data = create_legacy_data_dir(folder / "ql")
    cron = data.add_cron("bench", "task bench.py", "0 * * * *")
    token = json.loads((data.root / "config" / "token.json").read_text())["value"]
    body = json.dumps({"ids": [str(cron)], "status": "0", "pid": "4321", "log_path": "bench_1/a.log",
                       "last_execution_time": 1784340000, "last_running_time": 0}, separators=(",", ":"))
    store = migrated(f"sqlite:///{folder / 'bridge.sqlite'}")
    plain = folder / "plain.sh"
    plain.write_text("export TZ=Asia/Shanghai\n")

    def with_block(port: int) -> Path:
        path = folder / f"block-{port}.sh"
        path.write_text(plain.read_text() + render_block(port, datetime.now(UTC)))
        return path

    with Legacy2xDouble(data).start() as double:
        twos = double.url.rsplit(":", 1)[1]
        callback = f"http://0.0.0.0:{twos}/open/crons/status?t=1784340000"
        other = f"http://0.0.0.0:{twos}/open/crons?t=1784340000"  # not a status callback: passed through
        rows = [("no block: straight to 2.x", call_times_ms(plain, callback, token, body, runs))]
        port = free_port()
        env = serve_env(port, double.url, data.root, store, BRIDGE_DATA_DIR=str(folder))
        with bridge_process(env, f"http://127.0.0.1:{port}"):
            rows.append(("block, bridge up (serve -> 2.x)", call_times_ms(with_block(port), callback, token, body,
                                                                          runs)))
        rows.append(("block, bridge down (refused)", call_times_ms(with_block(unused_port()), callback, token, body,
                                                                   runs)))
        with not_accepting() as wedged:
            rows.append(("block, bridge not accepting", call_times_ms(with_block(wedged), callback, token, body,
                                                                      max(3, runs // 10))))
        rows.append(("no block: another curl call", call_times_ms(plain, other, token, "{}", runs)))
        rows.append(("block: another curl call", call_times_ms(with_block(port), other, token, "{}", runs)))
    base = rows[0][1][0]
    for label, (median, p95) in rows:
        print(f"{label:<36} median {median:8.1f} ms  p95 {p95:8.1f} ms  ({median - base:+8.1f} ms against no block)")


if __name__ == "__main__":
    main()
