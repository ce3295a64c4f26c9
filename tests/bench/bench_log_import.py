"""Benchmark: what `import-legacy` of task logs (v2.17–v2.20) costs a serving bridge's shadow writes on the same
SQLite store, this build against a baseline checkout, side by side in one run.

    python -m tests.bench.bench_log_import --baseline <checkout> [--logs 20000] [--crons 200] [--rate 20]
                                           [--block-seconds 5] [--repeats 2]

Two v2.20.2 data dirs get ``--logs`` ended task logs each, in their crons' folders as 2.x's shells leave them (the
second's at other times, so neither import finds the other's Runs). One process records shadow executions as
`serve` does (bench_import.serve_writer: ``--rate`` executions a second, start then end, each write timed; the
shell waits for it up to the 50 ms shadow budget). Two more run `run_legacy_import` over one data dir each: this
build's, and the baseline's (``bridge`` imported from ``--baseline``). Each is held still between two of its chunks
(outside any transaction) except in its own blocks. Blocks of ``--block-seconds`` rotate off / this / baseline over
``--repeats``. Prints per side the shadow writes' p50 / p99 / max and the share over 50 ms, the import's write
transactions (how long each held the store's write lock) and logs per second, and per repetition the p99 ratios.

This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.bench_import import SHADOW_BUDGET_MS, serve_writer, time_write_transactions
from tests.bench.children import ROOT

BEGIN_S = {"this": 1_780_000_000, "baseline": 1_785_000_000}  # each data dir's first log, unix seconds
RELEASE = "v2.20.2"
SIDES = ("off", "this", "baseline")


def write_logs(root: Path, logs: int, crons: int, begin_s: int) -> Path:
    """A v2.20.2 data dir with ``crons`` crons and ``logs`` ended task logs spread over them."""
    from legacy_adapters.testing.datadir import create_legacy_data_dir

    data = create_legacy_data_dir(root, release=RELEASE)
    for c in range(1, crons + 1):
        assert data.add_cron(f"job{c}", f"task job{c}.sh", "0 * * * *", log_name=f"job{c}_{c}") == c
        (data.log_dir / f"job{c}_{c}").mkdir(parents=True)
    for i in range(logs):
        c = i % crons + 1
        begun = datetime.fromtimestamp(begin_s + i * 7, UTC)
        ended = datetime.fromtimestamp(begin_s + i * 7 + 3, UTC)
        (data.log_dir / f"job{c}_{c}" / f"{begun:%Y-%m-%d-%H-%M-%S}-000.log").write_text(
            f"## 开始执行... {begun:%Y-%m-%d %H:%M:%S}\n\nwork\n\n"
            f"## 执行结束... {ended:%Y-%m-%d %H:%M:%S}  耗时 3 秒　　　　　\n", encoding="utf-8")
    return data.root


def paused_log_import(spec: dict[str, Any], paused: Any, idle: Any, pipe: Any) -> None:
    """run_legacy_import of task logs with ``bridge`` from ``spec['checkout']``, held still between two chunks
    while ``paused`` is set (``idle`` says it is); sends each write transaction's (end, held ms, logs)."""
    sys.path.insert(0, spec["checkout"])
    from rich.console import Console

    import bridge.jobs.import_legacy.logs as log_import
    from bridge.bootstrap.commands import run_legacy_import
    from bridge.config import Settings
    from bridge.storage.unit_of_work import SqlUnitOfWork

    assert Path(log_import.__file__).resolve().is_relative_to(Path(spec["checkout"]).resolve()), log_import.__file__
    writes: list[tuple[float, float, int]] = []
    real_write, real_chunks = log_import._write, log_import._chunks
    rows = [0]

    def counted_write(store: Any, batch: Any, **kw: Any) -> Any:
        rows[0] = len(batch)
        return real_write(store, batch, **kw)

    def held_chunks(items: Any, size: int) -> Any:
        for chunk in real_chunks(items, size):
            while paused.is_set():
                idle.set()
                time.sleep(0.005)
            idle.clear()
            yield chunk

    time_write_transactions(SqlUnitOfWork, writes, rows)
    log_import._write = counted_write
    log_import._chunks = held_chunks
    settings = Settings(database_url=spec["url"], data_dir=Path(spec["data_dir"]),
                        legacy_data_dir=Path(spec["legacy_dir"]), legacy_tz="UTC", legacy_scheduler="node",
                        legacy_release=RELEASE)
    summary = run_legacy_import(settings, console=Console(file=io.StringIO()))
    idle.set()
    pipe.send({"writes": writes, "imported": summary.imported, "batches": summary.batches})


def run(args: argparse.Namespace) -> None:
    import multiprocessing

    from bridge.storage.engine import make_engine
    from bridge.storage.migrate import upgrade

    tmp = Path(tempfile.mkdtemp(prefix="bench-log-import-"))
    try:
        url = f"sqlite:///{tmp / 'bridge.sqlite'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        importers: dict[str, Any] = {}
        for side, checkout in (("this", str(ROOT)), ("baseline", args.baseline)):
            legacy = write_logs(tmp / f"ql-{side}", args.logs, args.crons, BEGIN_S[side])
            spec = {"url": url, "data_dir": str(tmp / f"bridge-{side}"), "legacy_dir": str(legacy),
                    "checkout": checkout}
            paused, idle = ctx.Event(), ctx.Event()
            paused.set()
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=paused_log_import, args=(spec, paused, idle, theirs), daemon=True)
            proc.start()
            importers[side] = (proc, paused, idle, mine)
        for side, (_, _, idle, _) in importers.items():
            if not idle.wait(300):
                raise RuntimeError(f"the {side} import did not reach its first chunk")
        serve_end, serve_pipe = ctx.Pipe()
        serve = ctx.Process(target=serve_writer, args=(url, list(range(1, args.crons + 1)), args.rate, stop,
                                                       serve_pipe), daemon=True)
        serve.start()
        time.sleep(2.0)  # the writer's process starts and warms up
        blocks: list[dict[str, Any]] = []
        for rep in range(args.repeats):
            order = SIDES if rep % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                for other, (_, paused, idle, _) in importers.items():
                    if other != side:
                        paused.set()
                        idle.wait(30)  # between two chunks
                if side in importers:
                    importers[side][1].clear()
                time.sleep(0.2)
                started = time.monotonic()
                time.sleep(args.block_seconds)
                blocks.append({"rep": rep, "side": side, "from": started, "to": time.monotonic(),
                               "finished": side in importers and not importers[side][0].is_alive()})
        stop.set()
        samples = serve_end.recv()
        results = {}
        for side, (proc, paused, _, pipe) in importers.items():
            paused.clear()
            results[side] = pipe.recv()
            proc.join(900)
        serve.join(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(args, blocks, samples, results)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def report(args: argparse.Namespace, blocks: list[dict[str, Any]], samples: list[tuple[float, float]],
           results: dict[str, dict[str, Any]]) -> None:
    print(f"\n== shadow writes at {args.rate:g} executions/s on the SQLite store beside an import of {args.logs} "
          f"task logs: none (off), this build's, the baseline's ({args.baseline}); blocks of "
          f"{args.block_seconds:g} s ==")
    head = (f"{'rep':>3} {'side':>8} {'writes':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'> 50 ms':>8} "
            f"{'import tx':>9} {'tx held p50/max ms':>19} {'logs/s':>7}")
    print(head)
    print("-" * len(head))
    p99: dict[tuple[int, str], float] = {}
    for block in blocks:
        waits = [ms for at, ms in samples if block["from"] <= at < block["to"]]
        writes = results.get(block["side"], {}).get("writes", [])
        inside = [w for w in writes if block["from"] <= w[0] < block["to"]]
        held = [ms for _, ms, _ in inside]
        p99[(block["rep"], block["side"])] = _pct(waits, .99)
        print(f"{block['rep'] + 1:>3} {block['side']:>8} {len(waits):>6} {_pct(waits, .5):>7.2f} "
              f"{_pct(waits, .99):>7.2f} {max(waits, default=float('nan')):>7.1f} "
              f"{100 * sum(w > SHADOW_BUDGET_MS for w in waits) / max(len(waits), 1):>7.1f}% {len(held):>9} "
              f"{_pct(held, .5):>9.1f}/{max(held, default=float('nan')):>8.1f} "
              f"{sum(n for _, _, n in inside) / (block['to'] - block['from']):>7.0f}"
              + ("  (import had finished)" if block["finished"] else ""))
    for side in ("this", "baseline"):
        ratios = [p99[(rep, side)] / max(p99[(rep, "off")], 1e-9) for rep in range(args.repeats)]
        print(f"p99 {side} ÷ off per repetition: {', '.join(f'{r:.2f}' for r in ratios)} "
              f"(median {statistics.median(ratios):.2f})")
    ratios = [p99[(rep, "this")] / max(p99[(rep, "baseline")], 1e-9) for rep in range(args.repeats)]
    print(f"p99 this ÷ baseline per repetition: {', '.join(f'{r:.2f}' for r in ratios)}")
    for side, result in results.items():
        print(f"{side}: imported {result['imported']} logs in {result['batches']} write batches")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="checkout to compare with (e.g. a worktree of 39105e6)")
    parser.add_argument("--logs", type=int, default=20_000, help="task logs in each data dir")
    parser.add_argument("--crons", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="shadow executions a second")
    parser.add_argument("--block-seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    run(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
