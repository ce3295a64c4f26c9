"""Benchmark: `bridge import-legacy` (bridge.jobs.import_legacy.run_import) of a large 2.x history into a SQLite store.

    python -m tests.bench.bench_import [--sizes 10000,100000] [--crons 2000] [--batch-size 500] [--keep]

For each size N:

1. A fresh 2.x data dir (create_legacy_data_dir) gets --crons Crontabs rows and N RunningInstances rows
   bulk-inserted with sqlite3 executemany in 2.x's on-disk format (unix-second times, createdAt/updatedAt text,
   rollback journal). The mix: 90% finished (exit 0), 5% error (exit 1..3), 3% stopped by stopInstance
   (finished_at, exit 143), 1.5% stopped by 2.x's boot reset (no finished_at, no exit code), 0.5% still running;
   1% of the instances belong to crons that were deleted since.
2. A fresh SQLite bridge store is upgraded to head.
3. A child process (a fresh interpreter, so its peak RSS belongs to the import alone) runs run_import once and
   reports wall/CPU time, instances per second, VmRSS before, and the peak VmRSS read from /proc/self/status
   every 10 ms by a background thread (cross-checked with VmHWM after resetting it through
   /proc/self/clear_refs), the time each batch took, and the rows written. A batch is built outside any
   transaction; "write tx" is BEGIN IMMEDIATE .. COMMIT of its write, i.e. how long the store's write lock is
   held per batch. A second run_import in the same child must import nothing.

Prints one table, and the target line.

    python -m tests.bench.bench_import --beside-serve [--instances 40000] [--rate 20] [--block-seconds 5]
                                                      [--repeats 3]

Beside `serve`: what an import costs a serving bridge's shadow writes on the same SQLite store. One process
records shadow executions as `serve` does (ShadowRecorder over SqlUnitOfWork, the store opened by make_engine
as serve opens it), ``--rate`` executions a second, each a start and then an end callback, and times every
write: the shell waits for it up to the 50 ms shadow budget. Another process runs run_import over a 2.x history
of ``--instances`` rows, paused between two of its batches during the "off" blocks. Blocks of
``--block-seconds`` alternate off/on (ABBA over ``--repeats``). Prints per side and repetition the shadow
writes' p50 / p99 / max, the share over 50 ms, the p99 ratio on ÷ off, and the import's write transactions
(how long each held the store's write lock) and instances per second while on.

This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing (1 if an import
failed or wrote the wrong number of rows).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.bench.children import mib, run_child, scratch_dir

TARGET_LINE = "target: RSS growth under 50 MiB, independent of the number of instances"
TARGET_GROWTH_MIB = 50.0
BEGIN_S = 1_780_000_000  # 2026-05-28, unix seconds


# ---------------------------------------------------------------------------------------------------
# 2.x side
# ---------------------------------------------------------------------------------------------------


def write_legacy(database_path: Path, n: int, crons: int, seed: int) -> dict[str, int]:
    from legacy_adapters.schema import format_js_date_string, format_updated_at

    rng = random.Random(seed)
    stamp = format_updated_at(BEGIN_S * 1000)
    crontabs = [(c, f"bench {c}", f"task bench_{c}.sh", "0 * * * *", format_js_date_string(BEGIN_S * 1000), 1, 1,
                 0, 0, 0, f"bench_{c}", stamp, stamp) for c in range(1, crons + 1)]
    planned = {"succeeded": 0, "failed": 0, "cancelled": 0, "finish_time_unknown": 0, "running": 0}
    rows = []
    for i in range(n):
        deleted = rng.random() < 0.01
        cron_id = crons + 1 + rng.randrange(50) if deleted else rng.randrange(1, crons + 1)
        begin = BEGIN_S + i * 30 + rng.randrange(3)
        roll = rng.random()
        if roll < 0.90:
            status, finished, exit_code, kind = 1, begin + rng.randrange(1, 300), 0, "succeeded"
        elif roll < 0.95:
            status, finished, exit_code, kind = 3, begin + rng.randrange(1, 300), rng.randrange(1, 4), "failed"
        elif roll < 0.98:
            status, finished, exit_code, kind = 2, begin + rng.randrange(1, 300), 143, "cancelled"
        elif roll < 0.995:
            status, finished, exit_code, kind = 2, None, None, "finish_time_unknown"
        else:
            status, finished, exit_code, kind = 0, None, None, "running"
        planned[kind] += 1
        log_path = f"bench_{cron_id}/{time.strftime('%Y-%m-%d-%H-%M-%S', time.gmtime(begin))}-000.log"
        ended = finished if finished is not None else begin
        rows.append((cron_id, 10_000 + i, log_path, begin, finished, status, exit_code,
                     format_updated_at(begin * 1000), format_updated_at(ended * 1000)))
    with closing(sqlite3.connect(database_path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO Crontabs (id, name, command, schedule, timestamp, saved, status, isSystem, isDisabled, "
            "isPinned, log_name, createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", crontabs)
        conn.executemany(
            "INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, finished_at, status, exit_code, "
            "createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    return planned


# ---------------------------------------------------------------------------------------------------
# Child: one measured import in a fresh interpreter
# ---------------------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class RssSampler(threading.Thread):
    """Peak VmRSS, read from /proc/self/status every ``interval_s``."""

    def __init__(self, interval_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.peak_kib = _status_kib("VmRSS")
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.peak_kib = max(self.peak_kib, _status_kib("VmRSS"))
            self.samples += 1

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        self.peak_kib = max(self.peak_kib, _status_kib("VmRSS"))
        return self.peak_kib


def child_main(spec: dict[str, Any]) -> None:
    from rich.console import Console
    from sqlalchemy import func, select

    import bridge.jobs.import_legacy.job as importer
    from bridge.bootstrap.commands import run_legacy_import
    from bridge.config import Settings
    from bridge.storage.engine import make_engine
    from bridge.storage.schema import run_events_table, runs_table
    from bridge.storage.unit_of_work import SqlUnitOfWork

    settings = Settings(database_url=spec["url"], data_dir=Path(spec["data_dir"]),
                        legacy_data_dir=Path(spec["legacy_dir"]), legacy_tz="UTC", legacy_scheduler="node")
    batch_seconds: list[float] = []
    write_seconds: list[float] = []
    real_commit = importer._Importer._commit
    real_once = SqlUnitOfWork._once

    def timed_commit(self: Any, batch: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real_commit(self, batch)
        finally:
            batch_seconds.append(time.perf_counter() - t0)

    def timed_once(self: Any, work: Any, read_only: bool) -> Any:  # BEGIN IMMEDIATE .. COMMIT: the lock hold
        t0 = time.perf_counter()
        try:
            return real_once(self, work, read_only)
        finally:
            if not read_only:
                write_seconds.append(time.perf_counter() - t0)

    importer._Importer._commit = timed_commit  # type: ignore[method-assign]
    SqlUnitOfWork._once = timed_once  # type: ignore[method-assign]
    quiet = Console(file=io.StringIO())
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        hwm_reset = True
    except OSError:
        hwm_reset = False
    rss_before = _status_kib("VmRSS")
    sampler = RssSampler()
    sampler.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    summary = run_legacy_import(settings, batch_size=spec["batch_size"], console=quiet)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = sampler.stop()
    hwm = _status_kib("VmHWM") if hwm_reset else None
    again = run_legacy_import(settings, batch_size=spec["batch_size"], console=quiet)
    engine = make_engine(spec["url"])
    with engine.connect() as conn:
        runs = conn.execute(select(func.count()).select_from(runs_table)).scalar()
        events = conn.execute(select(func.count()).select_from(run_events_table)).scalar()
        by_mode = dict(conn.execute(select(runs_table.c.mode, func.count()).group_by(runs_table.c.mode)).all())
    engine.dispose()
    out = {"wall_s": wall, "cpu_s": cpu, "rss_before_kib": rss_before, "peak_kib": peak, "hwm_kib": hwm,
           "samples": sampler.samples, "imported": summary.imported, "handed": summary.handed_to_shadow,
           "scanned": summary.scanned, "by_status": summary.by_status, "finish_time_unknown":
           summary.finish_time_unknown, "batches": summary.batches, "runs": runs, "events": events,
           "by_mode": by_mode, "again_imported": again.imported + again.handed_to_shadow, "again_scanned":
           again.scanned, "batch_p50_ms": 1000 * statistics.median(batch_seconds),
           "batch_max_ms": 1000 * max(batch_seconds), "write_p50_ms": 1000 * statistics.median(write_seconds),
           "write_max_ms": 1000 * max(write_seconds)}
    print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------------


def measure(n: int, crons: int, batch_size: int, seed: int, keep: bool) -> dict[str, Any]:
    from bridge.storage.engine import make_engine
    from bridge.storage.migrate import upgrade
    from legacy_adapters.testing.datadir import create_legacy_data_dir

    with scratch_dir(f"bench-import-{n}-", keep) as tmp:
        t0 = time.perf_counter()
        data = create_legacy_data_dir(tmp / "ql", now_s=BEGIN_S)
        planned = write_legacy(data.database_path, n, crons, seed)
        legacy_s = time.perf_counter() - t0
        url = f"sqlite:///{tmp / 'bridge.sqlite'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        spec = {"url": url, "data_dir": str(tmp / "bridge-data"), "legacy_dir": str(data.root),
                "batch_size": batch_size}
        result = run_child("tests.bench.bench_import", spec, timeout_s=1800)
        result.update(size=n, planned=planned, legacy_s=legacy_s,
                      legacy_mib=data.database_path.stat().st_size / 2**20,
                      store_mib=sum(p.stat().st_size for p in tmp.glob("bridge.sqlite*")) / 2**20)
        return result


def report(results: list[dict[str, Any]], batch_size: int) -> bool:
    print(f"\n== SQLite store, batch_size {batch_size}, one run_import per child process ==")
    head = (f"{'size':>8} {'wall s':>7} {'cpu s':>6} {'inst/s':>7} {'RSS before':>10} {'peak RSS':>9} "
            f"{'growth MiB':>10} {'HWM MiB':>8} {'batch p50/max ms':>16} {'write tx p50/max ms':>19} {'runs':>7} "
            f"{'events':>8}")
    print(head)
    print("-" * len(head))
    ok = True
    for r in results:
        growth = (r["peak_kib"] - r["rss_before_kib"]) / 1024
        print(f"{r['size']:>8} {r['wall_s']:>7.1f} {r['cpu_s']:>6.1f} {r['scanned'] / r['wall_s']:>7.0f} "
              f"{mib(r['rss_before_kib']):>10} {mib(r['peak_kib']):>9} {growth:>10.1f} {mib(r['hwm_kib']):>8} "
              f"{r['batch_p50_ms']:>9.0f}/{r['batch_max_ms']:<6.0f} "
              f"{r['write_p50_ms']:>11.0f}/{r['write_max_ms']:<7.0f} "
              f"{r['runs']:>7} {r['events']:>8}")
    print()
    for r in results:
        planned = r["planned"]
        expected = {k: planned[k] for k in ("succeeded", "failed")}
        expected["cancelled"] = planned["cancelled"] + planned["finish_time_unknown"]
        right = (r["by_status"] == {k: v for k, v in expected.items() if v} and r["handed"] == planned["running"]
                 and r["finish_time_unknown"] == planned["finish_time_unknown"] and r["runs"] == r["size"]
                 and r["again_imported"] == 0)
        ok = ok and right
        print(f"  {r['size']:>7}: 2.x file {r['legacy_mib']:.1f} MiB written in {r['legacy_s']:.1f} s; bridge store "
              f"{r['store_mib']:.1f} MiB; {r['batches']} batches; runs by mode {r['by_mode']}; imported by status "
              f"{r['by_status']} (finish_time_unknown {r['finish_time_unknown']}), handed to shadow {r['handed']}; "
              f"RSS samples {r['samples']}; second run imported {r['again_imported']} (scanned "
              f"{r['again_scanned']}) -> {'rows as planned' if right else 'ROWS NOT AS PLANNED'}")
    worst = max((r["peak_kib"] - r["rss_before_kib"]) / 1024 for r in results)
    if len(results) >= 2:
        small, large = results[0], results[-1]
        g_small = (small["peak_kib"] - small["rss_before_kib"]) / 1024
        g_large = (large["peak_kib"] - large["rss_before_kib"]) / 1024
        print(f"\nRSS growth {g_small:.1f} MiB for {small['size']} instances, {g_large:.1f} MiB for {large['size']} "
              f"({large['size'] // small['size']}x the rows); rate {small['scanned'] / small['wall_s']:.0f} vs "
              f"{large['scanned'] / large['wall_s']:.0f} instances/s")
    print(TARGET_LINE)
    verdict = ("NOT MEASURED (an import wrote the wrong rows)" if not ok
               else "MET" if worst < TARGET_GROWTH_MIB else f"NOT MET (growth {worst:.1f} MiB)")
    print(f"  -> {verdict} (worst peak RSS growth {worst:.1f} MiB)")
    return ok


# ---------------------------------------------------------------------------------------------------
# Beside serve: a serving bridge's shadow writes while an import runs, side by side
# ---------------------------------------------------------------------------------------------------

SHADOW_BUDGET_MS = 50.0  # BRIDGE_SHADOW_BUDGET_MS: how long the shell waits for a shadow write


def serve_writer(url: str, crons: list[int], rate: float, stop: Any, pipe: Any) -> None:
    """`serve`'s shadow writes: ``rate`` executions a second, start then end, each write timed."""
    from bridge.service.callback_facts import CallbackFacts, ExecutionContext
    from bridge.service.clock import SystemClock
    from bridge.service.run_service import RunService
    from bridge.service.shadow import ShadowRecorder
    from bridge.storage.engine import make_engine
    from bridge.storage.unit_of_work import SqlUnitOfWork

    engine = make_engine(url)
    recorder = ShadowRecorder(RunService(SqlUnitOfWork(engine), clock=SystemClock()))
    context = ExecutionContext(origin="manual", evidence="bench", task_revision="bench")
    samples: list[tuple[float, float]] = []  # (monotonic time the write began, its duration in ms)
    rng, i, t0 = random.Random(3), 0, time.monotonic()
    while not stop.is_set():
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now_ms = time.time_ns() // 1_000_000
        cron = rng.choice(crons)
        facts = CallbackFacts(cron_id=cron, pid=900_000 + i, log_ref=f"serve-{i}", started_at_ms=now_ms,
                              duration_ms=None, exit_code=None, received_at_ms=now_ms)
        for end in (False, True):
            if end:
                facts = CallbackFacts(cron_id=cron, pid=facts.pid, log_ref=facts.log_ref, started_at_ms=now_ms,
                                      duration_ms=5, exit_code=0, received_at_ms=now_ms + 5)
            began = time.monotonic()
            try:
                recorder.record_end(facts, lambda: context) if end else recorder.record_start(facts, context)
            except Exception:  # noqa: BLE001 - a failed shadow write counts as over budget
                pass
            samples.append((began, (time.monotonic() - began) * 1000))
        i += 1
    engine.dispose()
    pipe.send(samples)


def time_write_transactions(unit_of_work: Any, writes: list[tuple[float, float, int]], rows: list[int]) -> None:
    """Patch ``unit_of_work``'s one transaction so that each write appends (monotonic end, held ms, ``rows[0]``)
    to ``writes``: how long it held the store's write lock, and how many rows the caller said it carries."""
    real_once = unit_of_work._once

    def timed_once(self: Any, work: Any, read_only: bool) -> Any:
        t0 = time.monotonic()
        try:
            return real_once(self, work, read_only)
        finally:
            if not read_only:
                writes.append((time.monotonic(), (time.monotonic() - t0) * 1000, rows[0]))

    unit_of_work._once = timed_once


def paused_import(spec: dict[str, Any], paused: Any, idle: Any, pipe: Any) -> None:
    """run_import, holding still between two batches while ``paused`` is set (``idle`` says it is)."""
    from rich.console import Console

    import bridge.jobs.import_legacy.job as importer
    from bridge.bootstrap.commands import run_legacy_import
    from bridge.config import Settings
    from bridge.storage.unit_of_work import SqlUnitOfWork

    writes: list[tuple[float, float, int]] = []  # (monotonic end, held ms, instances) per write transaction
    real_write = importer._Importer._write
    rows: list[int] = [0]

    def counted_write(self: Any, tx: Any, planned: Any, batch: Any) -> Any:
        rows[0] = len(batch)
        return real_write(self, tx, planned, batch)

    def hold_still(_last_id: int) -> None:
        while paused.is_set():
            idle.set()
            time.sleep(0.005)
        idle.clear()

    time_write_transactions(SqlUnitOfWork, writes, rows)
    importer._Importer._write = counted_write  # type: ignore[method-assign]
    settings = Settings(database_url=spec["url"], data_dir=Path(spec["data_dir"]),
                        legacy_data_dir=Path(spec["legacy_dir"]), legacy_tz="UTC", legacy_scheduler="node")
    summary = run_legacy_import(settings, console=Console(file=io.StringIO()), after_batch=hold_still)
    idle.set()
    pipe.send({"writes": writes, "imported": summary.imported + summary.handed_to_shadow,
               "batches": summary.batches})


def beside_serve(args: argparse.Namespace) -> int:
    import multiprocessing

    from bridge.storage.engine import make_engine
    from bridge.storage.migrate import upgrade
    from legacy_adapters.testing.datadir import create_legacy_data_dir

    tmp = Path(tempfile.mkdtemp(prefix="bench-import-beside-"))
    try:
        data = create_legacy_data_dir(tmp / "ql", now_s=BEGIN_S)
        write_legacy(data.database_path, args.instances, args.crons, args.seed)
        url = f"sqlite:///{tmp / 'bridge.sqlite'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        spec = {"url": url, "data_dir": str(tmp / "bridge-data"), "legacy_dir": str(data.root)}
        ctx = multiprocessing.get_context("spawn")
        stop, paused, idle = ctx.Event(), ctx.Event(), ctx.Event()
        paused.set()  # the import does its first batch, then waits for the first "on" block
        serve_end, serve_pipe = ctx.Pipe()
        import_end, import_pipe = ctx.Pipe()
        importer_proc = ctx.Process(target=paused_import, args=(spec, paused, idle, import_pipe), daemon=True)
        serve_proc = ctx.Process(target=serve_writer, args=(url, list(range(1, args.crons + 1)), args.rate, stop,
                                                            serve_pipe), daemon=True)
        importer_proc.start()
        if not idle.wait(300):
            raise RuntimeError("the import did not reach its first batch")
        serve_proc.start()
        time.sleep(2.0)  # the writer's process starts and warms up
        blocks: list[dict[str, Any]] = []
        for rep in range(args.repeats):
            for side in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                if side == "off":
                    paused.set()
                    idle.wait(30)  # between two batches
                else:
                    paused.clear()
                time.sleep(0.2)
                started = time.monotonic()
                time.sleep(args.block_seconds)
                blocks.append({"rep": rep, "side": side, "from": started, "to": time.monotonic(),
                               "finished": side == "on" and not importer_proc.is_alive()})
        stop.set()
        samples = serve_end.recv()
        paused.clear()
        result = import_end.recv()
        importer_proc.join(600)
        serve_proc.join(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report_beside(args, blocks, samples, result)
    return 0


def report_beside(args: argparse.Namespace, blocks: list[dict[str, Any]], samples: list[tuple[float, float]],
                  result: dict[str, Any]) -> None:
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")

    print(f"\n== beside serve: shadow writes at {args.rate:g} executions/s (start + end) on the SQLite store, "
          f"an import of {args.instances} 2.x instances paused (off) or running (on), blocks of "
          f"{args.block_seconds:g} s ==")
    head = (f"{'rep':>3} {'side':>4} {'writes':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'> 50 ms':>8} "
            f"{'import tx':>9} {'tx held p50/p99/max ms':>23} {'inst/s':>7} {'p99 on/off':>10}")
    print(head)
    print("-" * len(head))
    ratios, pooled = [], {"off": [], "on": []}  # type: ignore[var-annotated]
    for rep in range(args.repeats):
        sides = {}
        for side in ("off", "on"):
            (block,) = [b for b in blocks if b["rep"] == rep and b["side"] == side]
            inside = [w for w in result["writes"] if block["from"] <= w[0] < block["to"]]
            sides[side] = (block, [ms for at, ms in samples if block["from"] <= at < block["to"]],
                           [ms for _, ms, _ in inside], sum(n for _, _, n in inside))
        ratio = pct(sides["on"][1], .99) / max(pct(sides["off"][1], .99), 1e-9)
        ratios.append(ratio)
        for side, (block, waits, held, rows) in sides.items():
            pooled[side] += waits
            print(f"{rep + 1:>3} {side:>4} {len(waits):>6} {pct(waits, .5):>7.2f} {pct(waits, .99):>7.2f} "
                  f"{max(waits, default=float('nan')):>7.1f} "
                  f"{100 * sum(w > SHADOW_BUDGET_MS for w in waits) / max(len(waits), 1):>7.1f}% {len(held):>9} "
                  f"{pct(held, .5):>7.1f}/{pct(held, .99):>6.1f}/{max(held, default=float('nan')):>6.1f} "
                  f"{rows / (block['to'] - block['from']):>7.0f} {f'{ratio:.2f}' if side == 'on' else '':>10}"
                  + ("  (import had finished)" if block["finished"] else ""))
    print(f"all: off p99 {pct(pooled['off'], .99):.2f} ms, on p99 {pct(pooled['on'], .99):.2f} ms; over 50 ms: "
          f"off {sum(w > SHADOW_BUDGET_MS for w in pooled['off'])} of {len(pooled['off'])}, on "
          f"{sum(w > SHADOW_BUDGET_MS for w in pooled['on'])} of {len(pooled['on'])}; p99 on ÷ off per repetition "
          f"{min(ratios):.2f}-{max(ratios):.2f}")
    print(f"import: {result['imported']} instances in {result['batches']} batches")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--crons", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--beside-serve", action="store_true", help="shadow writes with and without an import")
    parser.add_argument("--instances", type=int, default=40_000, help="beside serve: 2.x instances to import")
    parser.add_argument("--rate", type=float, default=20.0, help="beside serve: shadow executions a second")
    parser.add_argument("--block-seconds", type=float, default=5.0, help="beside serve: one measured block")
    parser.add_argument("--repeats", type=int, default=3, help="beside serve: off/on pairs")
    args = parser.parse_args(argv)
    if args.child:
        child_main(json.loads(args.child))
        return 0
    if args.beside_serve:
        return beside_serve(args)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print(f"bench_import: sizes {sizes}, {args.crons} crons, batch {args.batch_size}, python "
          f"{sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs")
    results = []
    for n in sizes:
        try:
            results.append(measure(n, args.crons, args.batch_size, args.seed, args.keep))
        except Exception as exc:  # noqa: BLE001 - report and go on with the next size
            print(f"size {n}: failed: {exc}")
            return 1
    return 0 if report(results, args.batch_size) else 1


if __name__ == "__main__":
    sys.exit(main())
