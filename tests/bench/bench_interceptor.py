"""Benchmark: the CPU the shadow interceptor spends per status callback, in one process, without HTTP.

    python -m tests.bench.bench_interceptor [--executions N] [--rounds R] [--profile]

A 2.x data dir (five crons) and a SQLite bridge store in a temp dir; the interceptor the composition root builds
(`bridge.bootstrap.build_interceptor`, shadow on for every origin, 2.x's database read through kept connections as
`bridge serve` does). Each execution is a start and an end callback, with the exact bytes of 2.x's shell/api.sh,
through ``before_forward`` and ``after_forward`` (2.x's answer taken as 200): parsing, the Crontabs read, origin
inference, the hand-off to the cron's lane and the shadow write. CPU is ``time.process_time`` (every thread of the
process), after 200 warm-up executions; one line per round, with the part spent in the lanes' threads.

Run it against another version of the code by putting that checkout first on the path:
``PYTHONPATH=<checkout> python tests/bench/bench_interceptor.py``, alternating the two, to compare them side by side.
``--profile`` prints cProfile's top functions of the calling thread (the lane threads' own work is not in it).
This is a benchmark, not a test: it asserts nothing and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

from bridge.bootstrap import build_interceptor, build_legacy_reader, build_store
from bridge.config import Settings
from bridge.domain.model import Origin
from bridge.metrics import BridgeMetrics
from bridge.service.ports import StaticModes
from bridge.storage.migrate import upgrade
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir

HEADERS = {"Content-Type": "application/json", "User-Agent": "curl/8.5.0"}
STATUS_PATH = "/open/crons/status"


def lane_cpu() -> float:
    """CPU seconds of the shadow lanes' threads so far (the rest of ``process_time`` is the calling thread's)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
               for thread in threading.enumerate() if thread.name.startswith("shadow-") and thread.ident)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=1500, help="start/end pairs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-interceptor-") as tmp:
        root = Path(tmp)
        data = create_legacy_data_dir(root / "ql")
        crons = [data.add_cron(f"c{i}", f"task c{i}.js", "* * * * *") for i in range(5)]
        settings = Settings.from_env({"BRIDGE_DATABASE_URL": f"sqlite:///{root}/bridge.sqlite",
                                      "BRIDGE_DATA_DIR": str(root), "BRIDGE_LEGACY_DATA_DIR": str(data.root),
                                      "BRIDGE_LEGACY_SCHEDULER": "system"})
        store = build_store(settings)
        upgrade(store.engine)
        every_origin = StaticModes(frozenset(o.value for o in Origin))
        interceptor = build_interceptor(settings, store, BridgeMetrics(), every_origin,
                                        reader=build_legacy_reader(settings, keep_connections=4))
        sent = 0

        def execution() -> None:
            nonlocal sent
            cron, pid, begin_s = crons[sent % len(crons)], 20_000 + sent, int(time.time()) // 60 * 60
            sent += 1
            for body in (render_status_body(cron, 0, pid, f"c/{pid}.log", begin_s),
                         render_status_body(cron, 1, pid, f"c/{pid}.log", begin_s, 1, 0)):
                prepared = interceptor.before_forward(STATUS_PATH, body, HEADERS)
                interceptor.after_forward(prepared, 200, None)

        try:
            for _ in range(200):
                execution()
            for r in range(args.rounds):
                profile = cProfile.Profile() if args.profile and r == 0 else None
                cpu0, lanes0 = time.process_time(), lane_cpu()
                if profile:
                    profile.enable()
                for _ in range(args.executions):
                    execution()
                if profile:
                    profile.disable()
                cpu, lanes = time.process_time() - cpu0, lane_cpu() - lanes0
                per_callback = 1000 / (2 * args.executions)
                print(f"round {r + 1}: {cpu * per_callback:.3f} ms CPU per callback, of it {lanes * per_callback:.3f} "
                      f"in the lanes ({args.executions} executions){' (profiled)' if profile else ''}", flush=True)
                if profile:
                    pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
        finally:
            interceptor.close()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
