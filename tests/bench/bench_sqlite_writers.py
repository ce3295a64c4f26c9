"""Benchmark: concurrent shadow writers on one SQLite store, queued in the process vs left to SQLite's busy handler.

    python -m tests.bench.bench_sqlite_writers [--threads T] [--executions N] [--rounds R]

T threads (the serving worker's shadow lanes) each record N executions (a start, then an end callback)
through ShadowRecorder on one SQLite store, pausing 1 ms between executions. The same workload runs with
SqlUnitOfWork's writer gate (the default: writers of one process take turns before they take a pooled
connection) and with queue_writers=False (each writer takes a connection at once and SQLite's busy handler
makes it sleep and poll until the lock is free). The two alternate for R rounds, each on a fresh store, so
machine noise hits both alike.

Printed per mode: writes per second, write latency p50 / p99 / max, and the most pooled connections checked
out at once. This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.engine import make_engine
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.bench.stores import fresh_store
from tests.pool_probe import PoolProbe

CONTEXT = ExecutionContext(origin="scheduled_system", evidence="schedule_match:main:5_field:system",
                           task_revision="bench")


@dataclass
class Round:
    writes_per_s: float
    latencies_s: list[float]
    peak_connections: int


def one_round(queue_writers: bool, threads: int, executions: int) -> Round:
    with tempfile.TemporaryDirectory() as tmp, fresh_store("sqlite", Path(tmp), "") as (url, _schema):
        engine = make_engine(url)
        probe, lock = PoolProbe(engine), threading.Lock()
        recorder = ShadowRecorder(RunService(SqlUnitOfWork(engine, queue_writers=queue_writers),
                                             clock=SystemClock()))
        latencies: list[float] = []
        now_ms = int(time.time()) * 1000

        def lane(k: int) -> None:
            mine = []
            for i in range(executions):
                pid = 100_000 * (k + 1) + i
                start = CallbackFacts(k + 1, pid, f"log-{pid}", now_ms, None, None, now_ms)
                end = CallbackFacts(k + 1, pid, f"log-{pid}", now_ms, 1000, 0, now_ms + 1000)
                t0 = time.perf_counter()
                recorder.record_start(start, CONTEXT)
                t1 = time.perf_counter()
                recorder.record_end(end, lambda: CONTEXT)
                mine += [t1 - t0, time.perf_counter() - t1]
                time.sleep(0.001)
            with lock:
                latencies.extend(mine)

        started = time.perf_counter()
        workers = [threading.Thread(target=lane, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        engine.dispose()
        return Round(len(latencies) / elapsed, latencies, probe.peak)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=4, help="concurrent writers (the shadow lanes)")
    parser.add_argument("--executions", type=int, default=400, help="executions per writer per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode, alternating")
    args = parser.parse_args(argv)
    results: dict[str, list[Round]] = {"queued in the process": [], "SQLite busy handler": []}
    for _ in range(args.rounds):
        results["queued in the process"].append(one_round(True, args.threads, args.executions))
        results["SQLite busy handler"].append(one_round(False, args.threads, args.executions))
    print(f"{args.threads} writers x {args.executions} executions (start + end) x {args.rounds} rounds per mode")
    print(f"{'mode':<24}{'writes/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'peak conns':>12}")
    for mode, rounds in results.items():
        latencies = [x for r in rounds for x in r.latencies_s]
        print(f"{mode:<24}{statistics.fmean(r.writes_per_s for r in rounds):>10.0f}"
              f"{quantile(latencies, 0.5) * 1e3:>9.2f}{quantile(latencies, 0.99) * 1e3:>9.2f}"
              f"{max(latencies) * 1e3:>9.1f}{max(r.peak_connections for r in rounds):>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
