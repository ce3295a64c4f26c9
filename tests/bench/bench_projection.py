"""Benchmark: projection lag in primary mode, from the commit of an outbox row to the 2.x row being updated.

    python -m tests.bench.bench_projection [--rate 50] [--seconds 20] [--crons 20] [--interval 0.2]
                                           [--scenario quiet|busy|both]

Setup: a fresh SQLite bridge store (WAL, as `bridge serve` uses it) and a throwaway 2.x data dir with 2.x's
exact DDL and ``--crons`` crons. A load thread runs ``--rate`` primary executions per second through the real
primary recording path (ShadowRecorder with mode=primary: Run facts + outbox row in one transaction), each
ending 0.2-2.0 s after it started (10 % with exit code 1), and calls ``ProjectorThread.notify()`` after each
commit as the callback path does. The ProjectorThread (interval ``--interval``) applies the rows to 2.x.

Lag per row = ``applied_at_ms`` (taken by the projector after the 2.x COMMIT and the mapping write) minus the
wall clock right after the load thread's store commit returned. Scenario "busy" adds a 2.x panel stand-in on
2.x's database: a reader polling Crontabs every 50 ms and a writer holding ``BEGIN IMMEDIATE`` for 5 ms every
100 ms, so SQLITE_BUSY retries (and their backoff) show up in the figures.

After the load stops the script waits for the outbox to drain and checks the final 2.x state (every cron idle,
one instance row per execution, each with the right status). This is a benchmark, not a test: it prints the
table and exits 0 (1 only if the setup failed).
"""

from __future__ import annotations

import argparse
import heapq
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, select

from bridge.metrics import BridgeMetrics
from bridge.projector import ProjectorThread, build_projector
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import CallbackFacts, ExecutionContext, ShadowRecorder
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.schema import projection_outbox_table
from bridge.storage.unit_of_work import SqlUnitOfWork
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir

console = Console(width=150)
CONTEXT = ExecutionContext(origin="manual", evidence="bench", task_revision="bench", mode="primary")


@dataclass
class Load:
    commits: dict[tuple[str, str], int] = field(default_factory=dict)  # (run_id, event) -> commit wall ms
    expected: dict[int, int] = field(default_factory=dict)  # pid -> 2.x instance status
    started: int = 0
    behind_ms: float = 0.0  # how far the generator fell behind its schedule, at worst


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def run_load(recorder: ShadowRecorder, thread: ProjectorThread, crons: list[int], rate: float, seconds: float,
             rng: random.Random) -> Load:
    load = Load()
    ends: list[tuple[float, int, CallbackFacts]] = []
    t0 = time.monotonic()
    total = int(rate * seconds)
    i = 0
    while i < total or ends:
        next_start = t0 + i / rate if i < total else float("inf")
        if ends and ends[0][0] <= next_start:
            due, _, facts = heapq.heappop(ends)
            _sleep_until(due)
            result = recorder.record_end(facts, lambda: CONTEXT)
            load.commits[(result.run_id or "", "end")] = now_ms()
            thread.notify()
            continue
        _sleep_until(next_start)
        load.behind_ms = max(load.behind_ms, (time.monotonic() - next_start) * 1000)
        cron, pid = crons[i % len(crons)], 10_000 + i
        begin = now_ms()
        start = CallbackFacts(cron_id=cron, pid=pid, log_ref=f"ref{i}", started_at_ms=begin, duration_ms=None,
                              exit_code=None, received_at_ms=begin, log_path=f"bench_{cron}/{i}.log")
        result = recorder.record_start(start, CONTEXT)
        load.commits[(result.run_id or "", "start")] = now_ms()
        thread.notify()
        duration = rng.uniform(0.2, 2.0)
        exit_code = 1 if rng.random() < 0.1 else 0
        load.expected[pid] = 3 if exit_code else 1
        end = CallbackFacts(cron_id=cron, pid=pid, log_ref=f"ref{i}", started_at_ms=begin,
                            duration_ms=int(duration * 1000), exit_code=exit_code,
                            received_at_ms=begin + int(duration * 1000), log_path=start.log_path)
        heapq.heappush(ends, (time.monotonic() + duration, i, end))
        i += 1
        load.started = i
    return load


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@contextmanager
def panel_noise(legacy: LegacyDataDir, enabled: bool) -> Iterator[dict[str, int]]:
    """A stand-in for 2.x's own traffic on database.sqlite: polling reads and short IMMEDIATE writes."""
    stop, stats = threading.Event(), {"reads": 0, "writes": 0}

    def reader() -> None:
        with closing(sqlite3.connect(legacy.database_path, timeout=1, isolation_level=None)) as conn:
            while not stop.wait(0.05):
                conn.execute("SELECT id, status, pid FROM Crontabs").fetchall()
                stats["reads"] += 1

    def writer() -> None:
        with closing(sqlite3.connect(legacy.database_path, timeout=1, isolation_level=None)) as conn:
            while not stop.wait(0.1):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE Apps SET updatedAt = updatedAt")
                time.sleep(0.005)
                conn.execute("COMMIT")
                stats["writes"] += 1

    threads = [threading.Thread(target=fn, daemon=True) for fn in (reader, writer)] if enabled else []
    for t in threads:
        t.start()
    try:
        yield stats
    finally:
        stop.set()
        for t in threads:
            t.join()


def wait_drained(engine: Engine, timeout_s: float) -> bool:
    t = projection_outbox_table
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            left = conn.execute(select(t.c.id).where(t.c.state != "applied").limit(1)).first()
        if left is None:
            return True
        time.sleep(0.05)
    return False


def lags(engine: Engine, load: Load) -> dict[str, list[int]]:
    t = projection_outbox_table
    with engine.connect() as conn:
        rows = conn.execute(select(t.c.run_id, t.c.event, t.c.applied_at_ms, t.c.state)).all()
    found: dict[str, list[int]] = {"start": [], "end": [], "all": []}
    for run_id, event, applied, state in rows:
        committed = load.commits.get((run_id, event))
        if state != "applied" or committed is None or applied is None:
            continue
        lag = max(0, applied - committed)
        found[event].append(lag)
        found["all"].append(lag)
    return found


def check_legacy(legacy: LegacyDataDir, crons: list[int], load: Load) -> str:
    statuses = {row["status"] for row in legacy.query("SELECT status FROM Crontabs")}
    instances = legacy.query("SELECT pid, status FROM RunningInstances")
    wrong = sum(1 for r in instances if load.expected.get(r["pid"]) != r["status"])
    return (f"crons idle: {statuses == {1}}; instance rows {len(instances)} for {len(load.expected)} executions; "
            f"wrong status: {wrong}")


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))])


def scenario(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    store_path = workdir / f"{name}-bridge.sqlite"
    engine = make_engine(f"sqlite:///{store_path}")
    upgrade(engine)
    legacy = create_legacy_data_dir(workdir / f"{name}-ql", limited_app=False, expired_token=False)
    crons = [legacy.add_cron(f"bench{i}", f"task bench{i}.js", "*/5 * * * *") for i in range(args.crons)]
    metrics = BridgeMetrics()
    runs = RunService(SqlUnitOfWork(engine), clock=SystemClock(), metrics=metrics)
    thread = ProjectorThread(build_projector(engine, legacy.database_path, metrics), args.interval).start()
    try:
        with panel_noise(legacy, name == "busy") as noise:
            started = time.monotonic()
            load = run_load(ShadowRecorder(runs), thread, crons, args.rate, args.seconds, random.Random(1))
            drained = wait_drained(engine, 60)
            wall = time.monotonic() - started
    finally:
        thread.close()
    found = lags(engine, load)
    result = {
        "name": name, "executions": load.started, "rows": len(found["all"]), "drained": drained, "wall_s": wall,
        "lags": found, "behind_ms": load.behind_ms, "noise": dict(noise), "check": check_legacy(legacy, crons, load),
        "retried": metrics.value("ql_bridge_projection_retry_total", result="retried"),
        "parked": metrics.value("ql_bridge_projection_retry_total", result="parked"),
        "passes": thread.passes,
    }
    engine.dispose()
    return result


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    table = Table(title=f"projection lag, outbox commit -> 2.x row updated "
                        f"({args.rate:g} executions/s for {args.seconds:g} s, {args.crons} crons, SQLite store)")
    for column in ("scenario", "rows", "event", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms",
                   "busy retries", "parked"):
        table.add_column(column, justify="right" if column not in ("scenario", "event") else "left")
    for r in results:
        for event in ("all", "start", "end"):
            values = r["lags"][event]
            table.add_row(r["name"] if event == "all" else "", str(len(values)), event, f"{pct(values, .5):.0f}",
                          f"{pct(values, .9):.0f}", f"{pct(values, .99):.0f}",
                          f"{max(values) if values else float('nan'):.0f}",
                          f"{statistics.fmean(values) if values else float('nan'):.1f}",
                          f"{r['retried']:.0f}" if event == "all" else "",
                          f"{r['parked']:.0f}" if event == "all" else "")
    console.print(table)
    for r in results:
        console.print(f"{r['name']}: drained: {r['drained']}; projector passes: {r['passes']}; "
                      f"load generator at worst {r['behind_ms']:.1f} ms behind schedule; "
                      f"2.x stand-in: {r['noise']['reads']} reads, {r['noise']['writes']} writes", markup=False)
        console.print(f"{r['name']}: final 2.x state: {r['check']}", markup=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="executions started per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the load runs")
    parser.add_argument("--crons", type=int, default=20, help="2.x crons the executions spread over")
    parser.add_argument("--interval", type=float, default=0.2, help="ProjectorThread polling interval, seconds")
    parser.add_argument("--scenario", choices=("quiet", "busy", "both"), default="both")
    args = parser.parse_args(argv)
    names = ["quiet", "busy"] if args.scenario == "both" else [args.scenario]
    with tempfile.TemporaryDirectory(prefix="bench-projection-") as tmp:
        try:
            results = [scenario(name, args, Path(tmp)) for name in names]
        except Exception as exc:  # noqa: BLE001 - a setup failure is reported, not a traceback
            console.print(f"setup failed: {type(exc).__name__}: {exc}")
            return 1
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
