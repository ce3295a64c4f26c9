"""Benchmark: a cron's reads on the hot paths (the projector's, a callback's), against the length of its history.

    python -m tests.bench.bench_projector_reads [--backend sqlite|postgres|both] [--sizes 1000,50000]
                                                [--reads 50] [--pg-url URL]

For each size N, a fresh bridge store (tests/bench/stores.py) gets one cron whose history is N closed Runs
owned by 2.x (one recorded through the real ShadowRecorder, then cloned with INSERT ... SELECT so a large
history takes seconds), and then, as after a promotion, two bridge-owned Runs of the same cron: one
finished, one running. Three reads are timed --reads times each after a warm-up, and their answers checked:
SqlOutbox.facts_for_cron (what the projector reads for each outbox row: the running Run active, the
finished one newest terminal), ShadowRecorder.read_ahead_end (a cron's open Runs, which every end callback
reads to correlate: the running Run) and ShadowRecorder.has_active_bridge_runs (whether any bridge-owned Run
is open, which primary mode asks, at most once a second, before forwarding an end). Prints p50 per size and
the ratio p50(largest) / p50(smallest): with the partial indexes of bridge-owned and of open Runs no read
depends on the history (target: about 1). The SQLite store is left without ANALYZE, as the bridge leaves it;
the PostgreSQL one is analyzed, as autovacuum leaves it.

This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, text

from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.engine import make_engine
from bridge.storage.outbox import SqlOutbox
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.bench.stores import fresh_store

CRON = 1
BEGIN_MS = 1_796_216_400_000


def callback(pid: int, exit_code: int | None = None) -> CallbackFacts:
    return CallbackFacts(cron_id=CRON, pid=pid, log_ref=f"log-{pid}", started_at_ms=BEGIN_MS + pid,
                         duration_ms=1000 if exit_code is not None else None, exit_code=exit_code,
                         received_at_ms=BEGIN_MS + pid)


def execution(recorder: ShadowRecorder, pid: int, mode: str) -> None:
    context = ExecutionContext(origin="scheduled_system", evidence="bench", task_revision="rev", mode=mode)
    recorder.record_start(callback(pid), context)
    recorder.record_end(callback(pid, exit_code=0), lambda: context)


def clone_history(engine: Engine, copies: int) -> None:
    """N - 1 copies of the one shadow Run, with their own id, idempotency key and creation time."""
    postgres = engine.dialect.name == "postgresql"
    series = ("generate_series(1, :n) AS g(i)" if postgres else
              "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) SELECT i FROM s) AS g")
    replaced = {"id": "'h' || g.i", "idempotency_key": "'history:' || g.i", "created_at_ms": "runs.created_at_ms - g.i"}
    with engine.begin() as conn:
        names = list(conn.execute(text("SELECT * FROM runs WHERE 1 = 0")).keys())
        columns = ", ".join(replaced.get(name, f"runs.{name}") for name in names)
        conn.execute(text(f"INSERT INTO runs ({', '.join(names)}) SELECT {columns} FROM runs, {series}"),
                     {"n": copies})
        if postgres:  # as autovacuum does; nothing analyzes a SQLite store
            conn.execute(text("ANALYZE"))


def p50_ms(read: Callable[[], object], reads: int) -> float:
    times = []
    for _ in range(reads + 5):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return statistics.median(times[5:]) * 1000


READS = ("projector: facts_for_cron", "callback: read_ahead_end", "primary: has_active_bridge_runs")


def measure(backend: str, size: int, reads: int, root: Path, pg_url: str) -> tuple[float, ...]:
    with fresh_store(backend, root, pg_url, name=f"reads{size}") as (url, schema):
        engine = make_engine(url, pg_search_path=schema)
        try:
            recorder = ShadowRecorder(RunService(SqlUnitOfWork(engine), clock=SystemClock()))
            execution(recorder, 1, "shadow")
            clone_history(engine, size - 1)
            execution(recorder, 2, "primary")
            running = ExecutionContext(origin="scheduled_system", evidence="bench", task_revision="rev",
                                       mode="primary")
            recorder.record_start(callback(3), running)
            outbox = SqlOutbox(engine)
            active, _latest, terminal = outbox.facts_for_cron(CRON)
            assert len(active) == 1 and active[0].status == "running", active
            assert terminal is not None and terminal.status == "succeeded", terminal
            open_runs = recorder.read_ahead_end(CRON)
            assert [c.run.status.value for c in open_runs] == ["running"], open_runs
            assert recorder.has_active_bridge_runs()
            return (p50_ms(lambda: outbox.facts_for_cron(CRON), reads),
                    p50_ms(lambda: recorder.read_ahead_end(CRON), reads),
                    p50_ms(recorder.has_active_bridge_runs, reads))
        finally:
            engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--sizes", default="1000,50000", help="shadow Runs in the cron's history, comma list")
    parser.add_argument("--reads", type=int, default=50)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    console = Console()
    table = Table(title="a cron's reads: p50 ms by the length of its shadow history")
    table.add_column("backend")
    table.add_column("read")
    for size in sizes:
        table.add_column(f"{size:,} Runs", justify="right")
    table.add_column("ratio largest/smallest", justify="right")
    with tempfile.TemporaryDirectory(prefix="bench-projector-reads-") as tmp:
        for backend in backends:
            by_size = [measure(backend, size, args.reads, Path(tmp), args.pg_url) for size in sizes]
            for i, read in enumerate(READS):
                p50 = [measured[i] for measured in by_size]
                table.add_row(backend, read, *[f"{v:.2f}" for v in p50], f"{p50[-1] / p50[0]:.2f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
