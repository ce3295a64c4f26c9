"""Benchmark: the projector in primary mode, its lag and its footprint on 2.x's own writers.

    python -m tests.bench.bench_projection [--rate 50] [--seconds 20] [--crons 20] [--interval 0.2]
                                           [--tick S] [--lock-share F]
                                           [--phase lag|lock|both] [--scenario quiet|busy|both]
                                           [--waits busy-handler,tight-retry] [--block-seconds 10] [--repeats 3]
                                           [--writer-interval 0.01] [--writer-synchronous off|full]
                                           [--reader-interval 0.05] [--dir DIR]

Setup: a fresh SQLite bridge store (WAL, as `bridge serve` uses it) and a throwaway 2.x data dir with 2.x's
exact DDL and ``--crons`` crons. A load thread runs ``--rate`` primary executions per second through the real
primary recording path (ShadowRecorder with mode=primary: Run facts + outbox row in one transaction), each
ending 0.2-2.0 s after it started (10 % with exit code 1), and calls ``ProjectorThread.notify()`` after each
commit as the callback path does. The ProjectorThread (interval ``--interval``; tick ``--tick`` and share of
2.x's lock ``--lock-share`` where the code has them) applies the rows to 2.x.

Phase "lag": lag per row = ``applied_at_ms`` (taken by the projector after the 2.x COMMIT and the mapping
write) minus the wall clock right after the load thread's store commit returned. Scenario "busy" adds a 2.x
panel stand-in on 2.x's database: a reader polling Crontabs every 50 ms and a writer holding ``BEGIN
IMMEDIATE`` for 5 ms every 100 ms, so SQLITE_BUSY retries (and their backoff) show up in the figures. After
the load stops the script waits for the outbox to drain and checks the final 2.x state (every cron idle, one
instance row per execution, each with the right status).

Phase "lock": what 2.x's own writers pay for the projector. A child process stands in for 2.x (Node, its own
process): every ``--writer-interval`` (jittered 0.5-1.5x) it writes one of its own crons' rows in ``BEGIN
IMMEDIATE`` .. COMMIT, as Sequelize does with ``transactionType: IMMEDIATE``, and a panel reader polls
Crontabs every ``--reader-interval``. It samples the lock a hundred times a second, so its own commits do
not sync by default (``--writer-synchronous off``; its locking is the same): at that rate their fsyncs would
crowd the disk and slow every commit, the projector's included, as 2.x's few real writes do not. Its wait
for the lock is the time BEGIN IMMEDIATE took (it does no I/O) plus the time COMMIT waited for readers to
let go (from its first refusal, its journal then written, to the try that succeeds), never the commit's own
I/O: on this class of disk an fsync alone puts the p99 of a whole COMMIT at tens of ms with no other writer
at all. Both ways of waiting: "busy-handler" (SQLite's busy handler with node-sqlite3's 1000 ms busy
timeout, which 2.x inherits: it sleeps 1, 2, 5, 10, 15, 20, 25 ... ms between tries; COMMIT's retries
follow the same schedule) and "tight-retry" (busy timeout 0, every try repeated at once: the lock's real
occupancy). The load and the projector run throughout; blocks of ``--block-seconds`` alternate (ABBA over
``--repeats``) between the projector writing 2.x ("on") and the same projector with a writer that touches
nothing in 2.x and answers as if it had ("off"), so both sides carry the same bridge work. Prints the
writer's p50 / p99 / max wait per side, per repetition, the on/off ratio of the p99s, the share of writes
that waited 1 ms or more (in busy-handler mode exactly those that met a lock: the handler's first sleep is
1 ms; shorter "waits" are the scheduler's), and the projector's 2.x transactions per second and lock holds;
afterwards every row is projected again for real and the final 2.x state checked.

This is a benchmark, not a test: it prints the tables and exits 0 (1 only if the setup failed).
"""

from __future__ import annotations

import argparse
import heapq
import inspect
import itertools
import json
import multiprocessing
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
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import OperationalError

from bridge.jobs.project import ProjectorThread
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.engine import READ_ONLY, make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.outbox import SqlOutbox
from bridge.storage.schema import projection_outbox_table
from bridge.storage.unit_of_work import SqlUnitOfWork
from legacy_adapters.status_writer import LegacyStatusWriter
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from projections.projector import Projector

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
             rng: random.Random, stop: threading.Event | None = None) -> Load:
    """``rate`` executions per second for ``seconds`` (or until ``stop`` is set), then their ends."""
    load = Load()
    ends: list[tuple[float, int, CallbackFacts]] = []
    t0 = time.monotonic()
    total = int(rate * seconds)
    i = 0
    while i < total or ends:
        if stop is not None and stop.is_set():
            total = i
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
        with engine.connect() as conn:  # a read: no BEGIN IMMEDIATE racing the projector's writes
            conn = conn.execution_options(**{READ_ONLY: True})
            left = conn.execute(select(t.c.id).where(t.c.state != "applied").limit(1)).first()
        if left is None:
            return True
        time.sleep(0.05)
    return False


def lags(engine: Engine, load: Load) -> dict[str, list[int]]:
    t = projection_outbox_table
    with engine.connect() as conn:
        conn = conn.execution_options(**{READ_ONLY: True})
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
    writer = CountingWriter(legacy.database_path)
    thread = projector_thread(engine, writer, metrics, args).start()
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
        "passes": thread.passes, "commits": writer.commits,
    }
    engine.dispose()
    return result


class CountingWriter(LegacyStatusWriter):
    """The real writer, timing each 2.x transaction it opens (BEGIN IMMEDIATE .. COMMIT or ROLLBACK): how long
    2.x's write lock was ours."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holds_ms: list[float] = []

    @property
    def commits(self) -> int:
        return len(self.holds_ms)

    @contextmanager
    def _immediate(self, conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> Iterator[None]:
        started = time.perf_counter()
        with super()._immediate(conn, *args, **kwargs):
            yield
        if not kwargs:  # not the once-per-connection write probe, which writes nothing
            self.holds_ms.append((time.perf_counter() - started) * 1000)


class SwitchedWriter:
    """The real writer while ``on``; while off it touches nothing in 2.x and answers as if it had written,
    so the projector around it does the same bridge-store work either way."""

    def __init__(self, real: CountingWriter) -> None:
        self.real, self.on = real, True

    def apply(self, cron_id: int, crontab: Any, instance: Any, instance_id: int | None, now_ms: int) -> int | None:
        return self.apply_batch([(cron_id, crontab, instance, instance_id)], now_ms)[0]

    def apply_batch(self, writes: Any, now_ms: int) -> list[int | None]:
        if self.on:
            return self.real.apply_batch(writes, now_ms)
        return [write[3] for write in writes]

    @property
    def held_s(self) -> float:
        return float(getattr(self.real, "held_s", 0.0))


def projector_thread(engine: Engine, writer: Any, metrics: BridgeMetrics, args: argparse.Namespace) -> ProjectorThread:
    """The serving projector's thread (without the lease), with ``--tick`` and the lock share where this
    code has them, and told how long the writer held 2.x's lock, as `bridge serve` wires it."""
    options: dict[str, Any] = {}
    parameters = inspect.signature(ProjectorThread).parameters
    if args.tick is not None and "tick_s" in parameters:
        options["tick_s"] = args.tick
    if "lock_held" in parameters:
        options["lock_held"] = lambda: writer.held_s
        if args.lock_share is not None:
            options["lock_share"] = args.lock_share
    return ProjectorThread(Projector(SqlOutbox(engine), writer, metrics, SystemClock()), args.interval, **options)


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
        console.print(f"{r['name']}: drained: {r['drained']}; projector passes: {r['passes']}, 2.x transactions "
                      f"{r['commits']} ({r['commits'] / r['wall_s']:.1f}/s); "
                      f"load generator at worst {r['behind_ms']:.1f} ms behind schedule; "
                      f"2.x stand-in: {r['noise']['reads']} reads, {r['noise']['writes']} writes", markup=False)
        console.print(f"{r['name']}: final 2.x state: {r['check']}", markup=False)


# -- phase "lock": what 2.x's own writer waits for its lock ------------------------------------------------

BUSY_TIMEOUT_S = 1.0  # node-sqlite3 opens every connection with sqlite3_busy_timeout(db, 1000); 2.x sets none
SETTLE_S = 0.5  # after switching the projector's writes on or off, before a block is measured
OWN_CRONS = 10  # crons only 2.x's writer stand-in writes
# sqliteDefaultBusyCallback's sleeps in ms; after the last, 100 ms each until the timeout.
BUSY_HANDLER_SLEEPS_MS = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _commit_wait(conn: sqlite3.Connection, wait: str) -> float:
    """COMMIT, and how long it waited (s) for readers to let go, apart from its own I/O: tried once without
    waiting (its journal is then written and synced, only the EXCLUSIVE lock is missing), then retried on the
    busy handler's schedule or at once; the wait runs from the first refusal to the try that succeeds."""
    try:
        conn.execute("COMMIT")
        return 0.0
    except sqlite3.OperationalError as exc:
        if not _is_busy(exc):
            raise
    refused = time.perf_counter()
    for attempt in itertools.count():
        if wait == "busy-handler":
            step = BUSY_HANDLER_SLEEPS_MS[min(attempt, len(BUSY_HANDLER_SLEEPS_MS) - 1)]
            time.sleep(step / 1000)
        tried = time.perf_counter()
        try:
            conn.execute("COMMIT")
            return tried - refused
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or tried - refused > BUSY_TIMEOUT_S:
                raise
    raise AssertionError("unreachable")


def _begin_wait(conn: sqlite3.Connection, wait: str) -> float:
    """BEGIN IMMEDIATE, and how long it took (s): it does no I/O, so all of it is the wait for the lock,
    in SQLite's own busy handler (timeout 1000 ms) or in a loop of tries without waiting."""
    started = time.perf_counter()
    if wait == "busy-handler":
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute("PRAGMA busy_timeout = 0")
        return time.perf_counter() - started
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return time.perf_counter() - started
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.perf_counter() - started > BUSY_TIMEOUT_S:
                raise


def legacy_writer_block(conn: sqlite3.Connection, wait: str, seconds: float, interval: float, own: list[int],
                        rng: random.Random) -> list[float]:
    """2.x's writer for one block: each write's wait for the lock in ms (BEGIN IMMEDIATE's, plus COMMIT's
    wait for readers), not its own I/O."""
    conn.execute("PRAGMA busy_timeout = 0")
    waits: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(interval * rng.uniform(0.5, 1.5))
        stamp = time.strftime("%Y-%m-%d %H:%M:%S.000 +00:00", time.gmtime())
        started = time.perf_counter()
        try:
            begin = _begin_wait(conn, wait)
            conn.execute("UPDATE Crontabs SET status = 1, updatedAt = ? WHERE id = ?", (stamp, rng.choice(own)))
            waits.append((begin + _commit_wait(conn, wait)) * 1000)
        except sqlite3.OperationalError:  # still busy after 1 s: Sequelize would retry the whole query
            waits.append((time.perf_counter() - started) * 1000)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    return waits


def legacy_child(pipe: Any, path: str, own: list[int], reader_interval: float, synchronous: str) -> None:
    """2.x in a process of its own: a panel reader polling Crontabs, and the writer, one block per request."""
    stop = threading.Event()

    def reader() -> None:
        with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as conn:
            while not stop.wait(reader_interval):
                conn.execute("SELECT id, status, pid FROM Crontabs").fetchall()

    if reader_interval > 0:
        threading.Thread(target=reader, daemon=True).start()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        while (request := pipe.recv()) is not None:
            wait, seconds, interval, seed = request
            pipe.send(legacy_writer_block(conn, wait, seconds, interval, own, random.Random(seed)))
    stop.set()


def lock_phase(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    engine = make_engine(f"sqlite:///{workdir / 'lock-bridge.sqlite'}")
    upgrade(engine)
    legacy = create_legacy_data_dir(workdir / "lock-ql", limited_app=False, expired_token=False)
    crons = [legacy.add_cron(f"bench{i}", f"task bench{i}.js", "*/5 * * * *") for i in range(args.crons)]
    own = [legacy.add_cron(f"own{i}", f"task own{i}.js", "0 * * * *") for i in range(OWN_CRONS)]
    metrics = BridgeMetrics()
    runs = RunService(SqlUnitOfWork(engine), clock=SystemClock(), metrics=metrics)
    counting = CountingWriter(legacy.database_path)
    switched = SwitchedWriter(counting)
    thread = projector_thread(engine, switched, metrics, args).start()
    stop, loads = threading.Event(), []
    load_thread = threading.Thread(target=lambda: loads.append(run_load(
        ShadowRecorder(runs), thread, crons, args.rate, 1e9, random.Random(2), stop)), daemon=True)
    parent, child_end = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=legacy_child, args=(child_end, str(legacy.database_path), own, args.reader_interval,
                                   args.writer_synchronous), daemon=True)
    child.start()
    load_thread.start()
    blocks: list[dict[str, Any]] = []
    try:
        time.sleep(1.0)
        for rep in range(args.repeats):
            for k, wait in enumerate(args.waits):
                for side in (("off", "on") if (rep + k) % 2 == 0 else ("on", "off")):
                    switched.on = side == "on"
                    time.sleep(SETTLE_S)
                    commits, started = counting.commits, time.monotonic()
                    parent.send((wait, args.block_seconds, args.writer_interval, len(blocks)))
                    waits = parent.recv()
                    blocks.append({"rep": rep, "wait": wait, "side": side, "waits": waits,
                                   "tx_per_s": (counting.commits - commits) / (time.monotonic() - started),
                                   "holds": counting.holds_ms[commits:]})
    finally:
        stop.set()
        load_thread.join()
        parent.send(None)
        child.join(10)
    switched.on = True  # every row again, for real: the final 2.x state must be whole
    for _ in range(50):  # the projector may hold the store's write lock for a moment
        try:
            with engine.begin() as conn:
                conn.execute(update(projection_outbox_table).values(state="pending", applied_at_ms=None))
            break
        except OperationalError:
            time.sleep(0.1)
    thread.notify()
    drained = wait_drained(engine, 300)
    thread.close()
    check = check_legacy(legacy, crons, loads[0]) if loads else "no load"
    engine.dispose()
    return {"blocks": blocks, "drained": drained, "check": check, "executions": loads[0].started if loads else 0,
            "parked": metrics.value("ql_bridge_projection_retry_total", result="parked")}


def report_lock(result: dict[str, Any], args: argparse.Namespace) -> None:
    blocks = result["blocks"]
    table = Table(title=f"2.x writer's wait for its lock (BEGIN IMMEDIATE, COMMIT's wait for readers), projector "
                        f"writing 2.x on vs "
                        f"off, {args.rate:g} primary executions/s, {args.crons} crons, blocks of "
                        f"{args.block_seconds:g} s alternated")
    for column in ("waiting by", "rep", "side", "writes", "p50 ms", "p99 ms", "max ms", "waited ≥ 1 ms",
                   "projector 2.x tx/s", "its lock held p50/max ms", "p99 on ÷ off"):
        table.add_column(column, justify="left" if column in ("waiting by", "side") else "right")
    summary: dict[str, list[float]] = {}
    for wait in args.waits:
        for rep in range(args.repeats):
            sides = {b["side"]: b for b in blocks if b["wait"] == wait and b["rep"] == rep}
            if len(sides) < 2:
                continue
            ratio = pct(sides["on"]["waits"], .99) / max(pct(sides["off"]["waits"], .99), 1e-9)
            summary.setdefault(wait, []).append(ratio)
            for side in ("off", "on"):
                w = sides[side]["waits"]
                table.add_row(wait if rep == 0 and side == "off" else "", str(rep + 1), side, str(len(w)),
                              f"{pct(w, .5):.2f}", f"{pct(w, .99):.2f}", f"{max(w):.1f}",
                              f"{100 * sum(x >= 1 for x in w) / len(w):.2f} %", f"{sides[side]['tx_per_s']:.1f}",
                              _holds(sides[side]["holds"]), f"{ratio:.2f}" if side == "on" else "")
        pooled = {side: [x for b in blocks if b["wait"] == wait and b["side"] == side for x in b["waits"]]
                  for side in ("off", "on")}
        if all(pooled.values()):
            met = [f"{100 * sum(x >= 1 for x in pooled[side]) / len(pooled[side]):.2f}" for side in ("off", "on")]
            table.add_row("", "all", "off / on", f"{len(pooled['off'])} / {len(pooled['on'])}",
                          f"{pct(pooled['off'], .5):.2f} / {pct(pooled['on'], .5):.2f}",
                          f"{pct(pooled['off'], .99):.2f} / {pct(pooled['on'], .99):.2f}", "", " / ".join(met), "", "",
                          f"{pct(pooled['on'], .99) / max(pct(pooled['off'], .99), 1e-9):.2f}")
    console.print(table)
    for wait, ratios in summary.items():
        console.print(f"{wait}: p99 on ÷ off per repetition {min(ratios):.2f}-{max(ratios):.2f} "
                      f"({', '.join(f'{r:.2f}' for r in ratios)})", markup=False)
    console.print(f"lock phase: {result['executions']} executions; re-projected for real afterwards, drained: "
                  f"{result['drained']}, parked {result['parked']:.0f}; final 2.x state: {result['check']}",
                  markup=False)


def _holds(holds: list[float]) -> str:
    return f"{pct(holds, .5):.1f} / {max(holds):.1f}" if holds else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="executions started per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the load runs (phase lag)")
    parser.add_argument("--crons", type=int, default=20, help="2.x crons the executions spread over")
    parser.add_argument("--interval", type=float, default=0.2, help="ProjectorThread polling interval, seconds")
    parser.add_argument("--tick", type=float, default=None, help="ProjectorThread tick, seconds (default: the "
                        "code's own; ignored by code without one)")
    parser.add_argument("--lock-share", type=float, default=None, help="ProjectorThread's share of 2.x's lock "
                        "(default: the code's own; ignored by code without one)")
    parser.add_argument("--phase", choices=("lag", "lock", "both"), default="both")
    parser.add_argument("--scenario", choices=("quiet", "busy", "both"), default="both", help="phase lag")
    parser.add_argument("--waits", default="busy-handler,tight-retry",
                        type=lambda text: [w for w in text.split(",") if w in ("busy-handler", "tight-retry")],
                        help="phase lock: how 2.x's writer waits (busy-handler, tight-retry or both)")
    parser.add_argument("--block-seconds", type=float, default=10.0, help="phase lock: one measured block")
    parser.add_argument("--repeats", type=int, default=3, help="phase lock: on/off pairs per way of waiting")
    parser.add_argument("--writer-interval", type=float, default=0.01, help="phase lock: 2.x writes every ...")
    parser.add_argument("--writer-synchronous", choices=("off", "full"), default="off",
                        help="phase lock: the stand-in's own commits sync (full, as 2.x's) or not (off: it samples "
                        "often without its syncs crowding the disk; its locking is the same)")
    parser.add_argument("--reader-interval", type=float, default=0.05, help="phase lock: 2.x panel reads every "
                        "... (0: none)")
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args(argv)
    names = ["quiet", "busy"] if args.scenario == "both" else [args.scenario]
    console.print(f"bench_projection: {json.dumps({k: str(v) for k, v in vars(args).items()})}", markup=False)
    with tempfile.TemporaryDirectory(prefix="bench-projection-", dir=args.dir) as tmp:
        try:
            results = [scenario(name, args, Path(tmp)) for name in names] if args.phase != "lock" else []
            lock = lock_phase(args, Path(tmp)) if args.phase != "lag" else None
        except Exception as exc:  # noqa: BLE001 - a setup failure is reported, not a traceback
            console.print(f"setup failed: {type(exc).__name__}: {exc}")
            return 1
    if results:
        report(results, args)
    if lock is not None:
        report_lock(lock, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
