"""Benchmark: the status-callback path over real HTTP, direct to 2.x vs through `bridge serve` (shadow off / on).

    python -m tests.bench.bench_shadow_http [--pairs N] [--rss-callbacks M] [--backend sqlite|postgres]
                                            [--pg-url URL] [--blocks B] [--threads T] [--throughput-seconds S]
                                            [--throughput-rounds R] [--budget-ms MS] [--newconn-pairs K]
                                            [--double-nagle] [--reconciler]

What runs (all on loopback, all started and always stopped by this script):

  * a 2.x data dir in a temp dir with five crons on 5-field schedules;
  * the 2.x test double (Legacy2xDouble) in its OWN process (multiprocessing "spawn"), so its CPU does not share
    the GIL with the load generator;
  * `bridge serve` (uvicorn, one process) in front of it, shadow ON for every origin
    (BRIDGE_SHADOW_ORIGINS=manual,boot,...,system, BRIDGE_SHADOW_BUDGET_MS default 50);
  * a second `bridge serve` with BRIDGE_SHADOW_ORIGINS empty: the pure pass-through, same settings otherwise, on
    a store of its own (origin modes may be kept in the store, so a shared one could turn shadow on for it);
  * the bridges' periodic reconcile pass is pushed out of the run (BRIDGE_RECONCILE_INTERVAL_S=86400; --reconciler
    keeps the default): it would compare the pruned RunningInstances (below) with the store and flag every row.

The bridges' stderr goes to files in the temp dir (a pipe nobody reads fills up under load and blocks the worker);
the summary counts their warning/error lines, and the 2.x double's request errors.

Each "execution" is one start callback and one end callback (exit 0) with a distinct pid and a begin time on a
fire time of the cron's schedule, sent as the exact bytes of shell/api.sh (render_status_body, curl's headers,
`?t=<now>`), so the bridge records it as a scheduled_system run.

Phases:

  1. Latency. N pairs to each of direct / pass-through / shadow-on, one request at a time, interleaved in B blocks
     whose target order cycles through all six permutations, so drift and machine noise hit all three alike.
     One persistent httpx.Client per target (keep-alive), then a smaller "new connection per call" variant
     (max_keepalive_connections=0: connect, request, close - closer to the shell's curl). perf_counter_ns around
     each request. The target compares shadow-on p50 with pass-through-only p50. Each bridge's CPU (its whole
     process, from /proc) is read around each of its blocks: CPU per callback with one keep-alive client, and
     its shadow ÷ pass-through ratio per pair of blocks (--pairs 1200 --blocks 12: blocks of 100 executions).
  2. Throughput. T client threads (keep-alive) for S seconds per target, in R rounds; each round visits every
     target once, starting one target later than the round before (ABCD, BCDA, ...), so no side always runs
     first or last. Besides direct / pass-through / shadow-on, a bare gunicorn + Flask app answering
     every PUT with 2.x's JSON (one process, gthread, T threads; skipped when gunicorn is not installed) gives a
     floor for a Python HTTP service on this machine. Each ratio (shadow-on ÷ pass-through, ÷ bare, ÷ direct) is
     taken within a round and printed as its range over the rounds. Then the run_events per run and the runs
     created vs executions sent are counted in the store (after the bridges stopped and their shadow lanes
     drained).
  3. RSS. A FRESH shadow-on bridge; VmRSS of the `bridge serve` process (it serves
     itself) at boot (raw-before), after ~2,000 warm-up callbacks
     (warm-before), every 10,000 callbacks, and after M callbacks sent by T threads (after); with its thread
     count and the store connections it holds open (fds on the SQLite file / sockets to PostgreSQL). Each
     progress line also gives that stretch's rate, mean shadow write and forward time from /metrics.

CPU per callback (bridge worker, double, load generator) comes from /proc/<pid>/stat around each load run.

Two things about the double are adjusted INSIDE its process (legacy_adapters/ is not edited):

  * TCP_NODELAY on its accepted sockets (--double-nagle turns this off). Python's http.server writes a reply's
    head and body in two send()s with Nagle on, so on a kept-alive connection every reply waits for the peer's
    delayed ACK (~40 ms on Linux): that stall would be most of "direct" and of every bridge->2.x hop and would
    hide what is being measured. Node's http server, which 2.x runs on, sets noDelay by default since Node 18.
  * Its RunningInstances table has no index (as in 2.x), so every end callback scans it. Before each phase, and
    every 2 s during the throughput and RSS phases, the finished rows (never a running one) are deleted so the
    double does not slow down as the table grows; the latency phase runs on a small table without pruning. The
    double also forgets the requests it records (it keeps every one, for tests) every 2 s.

This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing (1 if the store
could not be set up).
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select

from bridge.cli.demo import CURL_HEADERS, free_port, stop_process
from bridge.storage.engine import make_engine
from bridge.storage.schema import mismatches_table, run_events_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.origin import schedule_matches
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.testing.datadir import LegacyDataDir, connect, create_legacy_data_dir, immediate
from legacy_adapters.testing.double import Legacy2xDouble
from tests.bench.stores import fresh_store

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ALL_ORIGINS = "manual,boot,scheduled_node,scheduled_system,script,subscription,system"
TARGET_RATIO = 1.5
TARGET_LINE = "target: shadow-on p50 ≤ 1.5× pass-through-only p50"
EVENTS_TARGET = 10
RSS_TARGET_MIB = 5.0
RSS_WARMUP_CALLBACKS = 2_000
PROGRESS_EVERY = 10_000
# Every one of these fires at the top of each even UTC hour, so one begin time (fire time + 1 s) matches all.
CRONS = (
    ("every minute", "task every_minute.js", "* * * * *"),
    ("every five", "task every_five.py", "*/5 * * * *"),
    ("hourly report", "task report.sh", "0 * * * *"),
    ("quarter", "task quarter.js", "*/15 * * * *"),
    ("two-hourly", "task two_hourly.py", "0 */2 * * *"),
)
DIRECT, PASS, SHADOW, BARE = "direct", "pass-through", "shadow-on", "bare gunicorn+Flask"

console = Console(width=150)


# --- the 2.x double, in its own process -------------------------------------------------------------------------------


def _prune_finished(data: LegacyDataDir) -> int:
    try:
        with closing(connect(data.database_path)) as db, immediate(db):
            return db.execute("DELETE FROM RunningInstances WHERE status != ?",
                              (int(InstanceStatus.RUNNING),)).rowcount
    except sqlite3.Error:
        return -1


def _double_main(data: LegacyDataDir, conn: Connection, nodelay: bool, log_path: str) -> None:
    """Child process: serve the double until told to stop; prune finished RunningInstances when asked."""
    from legacy_adapters.testing.express_rules import RequestHandler

    sys.stderr = open(log_path, "w", buffering=1)  # noqa: SIM115 - http.server prints request errors here

    # Python's http.server leaves Nagle on and writes the head and the body of a reply in two send()s: on a
    # kept-alive connection the body then waits for the client's delayed ACK (~40 ms on Linux). Node's http
    # server (2.x) sets TCP_NODELAY on every accepted socket by default since Node 18 (nodejs/node#42163).
    RequestHandler.disable_nagle_algorithm = nodelay  # this process only; the file is untouched
    double = Legacy2xDouble(data).start()
    conn.send(double.url)
    autoprune = False
    try:
        while True:
            if not conn.poll(2.0):
                double.clear_requests()
                if autoprune:
                    _prune_finished(data)
                continue
            message = conn.recv()
            if message == "stop":
                break
            if isinstance(message, tuple) and message[0] == "autoprune":
                autoprune = bool(message[1])
            elif message == "prune":
                double.clear_requests()
                conn.send(_prune_finished(data))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        double.stop()


@dataclass
class DoubleHandle:
    url: str
    conn: Connection
    pid: int

    def prune(self) -> int:
        self.conn.send("prune")
        return int(self.conn.recv()) if self.conn.poll(30) else -1

    def autoprune(self, on: bool) -> None:
        self.conn.send(("autoprune", on))


@contextmanager
def double_process(data: LegacyDataDir, log_path: Path, *, nodelay: bool = True) -> Iterator[DoubleHandle]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_double_main, args=(data, child, nodelay, str(log_path)), name="legacy-2x-double",
                       daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while not parent.poll(0.1):
            if proc.exitcode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the 2.x double did not start (exit code {proc.exitcode})")
        yield DoubleHandle(parent.recv(), parent, proc.pid or 0)
    finally:
        try:
            parent.send("stop")
        except (OSError, ValueError):
            pass
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


# --- `bridge serve` children ------------------------------------------------------------------------------------------


@dataclass
class BridgeHandle:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def worker_pid(self) -> int:
        """The serving process: `bridge serve` itself (uvicorn, one process)."""
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        return scrape_metrics(self.url)


def child_pids(pid: int) -> list[int]:
    """Children of ``pid`` from /proc/<pid>/task/*/children, else by scanning /proc/*/stat for the ppid."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(x) for x in (task / "children").read_text().split())
        except OSError:
            continue
    if found:
        return sorted(found)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return sorted(found)


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS / RssAnon / RssFile / VmHWM of a process in KiB, and its thread count."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


def store_connections(pid: int, sqlite_file: Path | None, pg_port: int = 5432) -> int:
    """How many store connections the process holds open: fds on the SQLite file, or TCP sockets to PostgreSQL."""
    fd_dir = Path(f"/proc/{pid}/fd")
    targets = []
    for fd in fd_dir.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            continue
    if sqlite_file is not None:
        return sum(1 for t in targets if t == str(sqlite_file))
    inodes = {t[8:-1] for t in targets if t.startswith("socket:[")}
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[2].rpartition(":")[2], 16) == pg_port and fields[9] in inodes:
                count += 1
    return count


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a whole process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bridge_env(base: dict[str, str], **values: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("BRIDGE_")}  # nothing inherited from the shell
    env.update(values)
    return env


@contextmanager
def bridge_server(name: str, env: dict[str, str], url: str, log_path: Path) -> Iterator[BridgeHandle]:
    """Like bridge.cli.demo.bridge_process, but stderr goes to a file: a pipe nobody reads would fill up under load
    (the server's log and the shadow warnings go to stderr) and block the worker."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "bridge.cli", "serve"], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} bridge exited: " + log_path.read_text(errors="replace")[-600:])
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 503):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} bridge did not start within 30 s")
            time.sleep(0.1)
        yield BridgeHandle(name, url, proc, log_path)
    finally:
        stop_process(proc, 20)


# The floor: a Flask app that reads the JSON body and answers every PUT the way 2.x does, under gunicorn.
BARE_APP = """
from flask import Flask, jsonify, request

app = Flask(__name__)


@app.route("/<path:path>", methods=["PUT"])
def put(path):
    request.get_json(silent=True)
    return jsonify(code=200)
"""


@dataclass
class BareHandle:
    url: str
    worker: int  # gunicorn's one worker process


@contextmanager
def bare_server(root: Path, threads: int, log_path: Path) -> Iterator[BareHandle | None]:
    """gunicorn (one gthread worker, ``threads`` threads, keep-alive) serving BARE_APP; None without gunicorn."""
    try:
        import gunicorn  # noqa: F401 - only whether it is installed
    except ImportError:
        console.print(f"[yellow]gunicorn is not installed: no {BARE} side (pip install gunicorn)[/]")
        yield None
        return
    (root / "bare_app.py").write_text(BARE_APP)
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--chdir", str(root), "-b", f"127.0.0.1:{port}",
                                 "-w", "1", "-k", "gthread", "--threads", str(threads), "--keep-alive", "30",
                                 "bare_app:app"], stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.put(f"{url}/open/crons/status", json={}, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{BARE} did not start: " + log_path.read_text(errors="replace")[-600:])
            time.sleep(0.1)
        workers = child_pids(proc.pid)
        yield BareHandle(url, workers[0] if workers else proc.pid)
    finally:
        stop_process(proc)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape_metrics(url: str) -> dict[str, float]:
    body = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in body.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def metric_sum(samples: dict[str, float], name: str, **labels: str) -> float:
    total = 0.0
    for key, value in samples.items():
        base, _, rest = key.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


# --- the workload -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cron:
    id: int
    log_name: str
    schedule: str


class Workload:
    """Start/end body pairs with distinct pids; begin times on a fire time of every schedule (even UTC hours)."""

    def __init__(self, crons: list[Cron], now_s: int) -> None:
        self.crons = crons
        self.base_begin = now_s - now_s % 7200 - 7200 + 1  # one second after a past even hour
        self._pids = itertools.count(100_000)

    def begin_for(self, pid: int) -> int:
        return self.base_begin - 7200 * (pid % 12)

    def next_pair(self) -> tuple[bytes, bytes]:
        pid = next(self._pids)  # itertools.count is atomic under the GIL
        cron = self.crons[pid % len(self.crons)]
        begin = self.begin_for(pid)
        log_path = f"{cron.log_name}/2026-01-01-00-00-{pid}.log"
        start = render_status_body(cron.id, 0, pid, log_path, begin)
        end = render_status_body(cron.id, 1, pid, log_path, begin, 1 + pid % 7, 0)
        return start, end


class Sender:
    """One HTTP client sending exactly what shell/api.sh update_cron sends."""

    def __init__(self, base_url: str, token: str, *, keepalive: bool = True) -> None:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4 if keepalive else 0)
        self.client = httpx.Client(base_url=base_url, timeout=30, limits=limits, trust_env=False)
        self.headers = {**CURL_HEADERS, "Authorization": f"Bearer {token}"}

    def put(self, body: bytes) -> tuple[int, int]:
        """(HTTP status or 0 for a transport error, latency in ns)."""
        url = f"/open/crons/status?t={int(time.time())}"
        started = time.perf_counter_ns()
        try:
            status = self.client.put(url, content=body, headers=self.headers).status_code
        except httpx.HTTPError:
            status = 0
        return status, time.perf_counter_ns() - started

    def close(self) -> None:
        self.client.close()


@dataclass
class Tally:
    """Executions (start and end both answered 2xx) sent through a shadow-on bridge, for the store check."""

    shadow_pairs_ok: int = 0
    shadow_pairs_failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ok: int, failed: int) -> None:
        with self.lock:
            self.shadow_pairs_ok += ok
            self.shadow_pairs_failed += failed


# --- statistics -------------------------------------------------------------------------------------------------------


def pct(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile in ms."""
    if not sorted_ns:
        return math.nan
    return sorted_ns[min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns)) - 1))] / 1e6


@dataclass
class Series:
    ns: list[int] = field(default_factory=list)
    errors: int = 0

    def summary(self) -> dict[str, float]:
        data = sorted(self.ns)
        return {"n": len(data), "p50": pct(data, .50), "p95": pct(data, .95), "p99": pct(data, .99),
                "mean": (sum(data) / len(data) / 1e6) if data else math.nan,
                "max": (data[-1] / 1e6) if data else math.nan}


def load_avg() -> str:
    """The 1-minute load average (other work on the machine shows up here)."""
    return f"load {os.getloadavg()[0]:.2f}"


def ms(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


# --- phase 1: latency -------------------------------------------------------------------------------------------------


@dataclass
class LatencyResult:
    all: dict[str, Series]
    start: dict[str, Series]
    end: dict[str, Series]
    block_p50: dict[str, list[float]]
    seconds: float
    # CPU of the bridge process (all its threads) during each of its blocks: (CPU seconds, callbacks answered).
    block_cpu: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def cpu_ms_per_callback(self, name: str) -> float | None:
        spent = self.block_cpu.get(name) or []
        callbacks = sum(n for _, n in spent)
        return 1000 * sum(s for s, _ in spent) / callbacks if callbacks else None


def latency_phase(targets: dict[str, str], token: str, work: Workload, tally: Tally, *, pairs: int, blocks: int,
                  keepalive: bool, warmup_pairs: int, pids: dict[str, int] | None = None) -> LatencyResult:
    names = list(targets)
    senders = {n: Sender(u, token, keepalive=keepalive) for n, u in targets.items()}
    result = LatencyResult({n: Series() for n in names}, {n: Series() for n in names}, {n: Series() for n in names},
                           {n: [] for n in names}, 0.0)

    def pair(name: str, record: bool) -> list[int]:
        start, end = work.next_pair()
        got = []
        ok = True
        for kind, body in (("start", start), ("end", end)):
            status, ns = senders[name].put(body)
            good = 200 <= status < 300
            ok = ok and good
            if record:
                if good:
                    result.all[name].ns.append(ns)
                    getattr(result, kind)[name].ns.append(ns)
                    got.append(ns)
                else:
                    result.all[name].errors += 1
        if name == SHADOW:
            tally.add(int(ok), int(not ok))
        return got

    try:
        for name in names:
            for _ in range(warmup_pairs):
                pair(name, record=False)
        orders = list(itertools.permutations(names))
        sizes = [pairs // blocks + (1 if b < pairs % blocks else 0) for b in range(blocks)]
        began = time.perf_counter()
        for b, size in enumerate(sizes):
            for name in orders[b % len(orders)]:
                block: list[int] = []
                pid = (pids or {}).get(name)
                cpu0 = cpu_seconds(pid) if pid else 0.0
                for _ in range(size):
                    block.extend(pair(name, record=True))
                if pid:
                    result.block_cpu.setdefault(name, []).append((cpu_seconds(pid) - cpu0, len(block)))
                if block:
                    result.block_p50[name].append(statistics.median(block) / 1e6)
        result.seconds = time.perf_counter() - began
    finally:
        for sender in senders.values():
            sender.close()
    return result


# --- phases 2 and 3: concurrent load ----------------------------------------------------------------------------------


@dataclass
class LoadResult:
    callbacks_ok: int
    errors: int
    seconds: float
    latency: Series
    cpu_s: dict[str, float] = field(default_factory=dict)  # process label -> CPU seconds used during the load

    def cpu_ms_per_callback(self, label: str) -> str:
        used = self.cpu_s.get(label)
        return "-" if used is None or not self.callbacks_ok else f"{1000 * used / self.callbacks_ok:.2f}"

    @property
    def rate(self) -> float:
        return self.callbacks_ok / self.seconds if self.seconds else 0.0


def concurrent_load(url: str, token: str, work: Workload, tally: Tally | None, *, threads: int,
                    seconds: float | None = None, callbacks: int | None = None,
                    tick: Callable[[int, float], None] | None = None, tick_every: int = PROGRESS_EVERY,
                    keep_latency: bool = True, cpu_pids: dict[str, int] | None = None) -> LoadResult:
    """``threads`` keep-alive clients sending start/end pairs for ``seconds`` or until ``callbacks`` were sent.

    ``tick(done, elapsed)`` runs on the calling thread each time another ``tick_every`` callbacks completed."""
    stop = threading.Event()
    tickets = itertools.count()
    total_pairs = (callbacks + 1) // 2 if callbacks is not None else None
    done = [0] * threads
    errs = [0] * threads
    lats: list[list[int]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []

    def run(i: int) -> None:
        sender = Sender(url, token)
        ok_pairs = bad_pairs = 0
        try:
            while not stop.is_set():
                if total_pairs is not None and next(tickets) >= total_pairs:
                    break
                start, end = work.next_pair()
                pair_ok = True
                for body in (start, end):
                    status, ns = sender.put(body)
                    if 200 <= status < 300:
                        done[i] += 1
                        if keep_latency:
                            lats[i].append(ns)
                    else:
                        errs[i] += 1
                        pair_ok = False
                ok_pairs += pair_ok
                bad_pairs += not pair_ok
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            failures.append(exc)
        finally:
            sender.close()
            if tally is not None:
                tally.add(ok_pairs, bad_pairs)

    workers = [threading.Thread(target=run, args=(i,), name=f"load-{i}", daemon=True) for i in range(threads)]
    cpu_pids = {**(cpu_pids or {}), "load generator": os.getpid()}
    cpu_before = {label: cpu_seconds(pid) for label, pid in cpu_pids.items()}
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    next_tick = tick_every
    try:
        while any(w.is_alive() for w in workers):
            elapsed = time.perf_counter() - began
            if seconds is not None and elapsed >= seconds:
                stop.set()
            if tick is not None and sum(done) >= next_tick:
                tick(next_tick, elapsed)
                next_tick += tick_every
            time.sleep(0.02)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    elapsed = time.perf_counter() - began
    cpu = {label: cpu_seconds(pid) - cpu_before[label] for label, pid in cpu_pids.items()}
    while tick is not None and not failures and sum(done) >= next_tick:  # the last ones, after the threads ended
        tick(next_tick, elapsed)
        next_tick += tick_every
    if failures:
        raise RuntimeError(f"load thread failed: {failures[0]!r}")
    return LoadResult(sum(done), sum(errs), elapsed, Series([ns for lat in lats for ns in lat], sum(errs)), cpu)


# --- the store --------------------------------------------------------------------------------------------------------


@dataclass
class StoreReport:
    runs: int
    by_origin_status: dict[tuple[str, str], int]
    events: int
    events_per_run: dict[int, int]  # events in a run -> number of runs
    mismatches: int
    events_by_type: dict[str, int] = field(default_factory=dict)
    mismatches_by_kind: dict[str, int] = field(default_factory=dict)


def store_report(database_url: str, schema: str | None) -> StoreReport:
    engine = make_engine(database_url, pg_search_path=schema)
    try:
        with engine.connect() as conn:
            r = runs_table.c
            grouped = conn.execute(select(r.origin, r.status, func.count()).group_by(r.origin, r.status)).all()
            per_run = select(run_events_table.c.run_id, func.count().label("n")).group_by(
                run_events_table.c.run_id).subquery()
            dist = dict(conn.execute(select(per_run.c.n, func.count()).group_by(per_run.c.n)).all())
            events = conn.execute(select(func.count()).select_from(run_events_table)).scalar_one()
            mismatches = conn.execute(select(func.count()).select_from(mismatches_table)).scalar_one()
            e, m = run_events_table.c, mismatches_table.c
            by_type = dict(conn.execute(select(e.type, func.count()).group_by(e.type)).all())
            by_kind = dict(conn.execute(select(m.kind, func.count()).group_by(m.kind)).all())
    finally:
        engine.dispose()
    by = {(o or "unknown", s): int(n) for o, s, n in grouped}
    return StoreReport(sum(by.values()), by, int(events), {int(k): int(v) for k, v in dist.items()}, int(mismatches),
                       {str(k): int(v) for k, v in by_type.items()}, {str(k): int(v) for k, v in by_kind.items()})


store = fresh_store  # a fresh, migrated store per bridge under test


# --- output -----------------------------------------------------------------------------------------------------------


def latency_table(title: str, result: LatencyResult) -> Table:
    table = Table("target", "callbacks", "errors", "p50 ms", "p95 ms", "p99 ms", "mean ms", "max ms",
                  "start p50 ms", "end p50 ms", title=title)
    for name in result.all:
        s = result.all[name].summary()
        table.add_row(name, str(s["n"]), str(result.all[name].errors), ms(s["p50"]), ms(s["p95"]), ms(s["p99"]),
                      ms(s["mean"]), ms(s["max"]), ms(result.start[name].summary()["p50"]),
                      ms(result.end[name].summary()["p50"]))
    return table


def comparison_rows(table: Table, variant: str, result: LatencyResult) -> None:
    s = {n: result.all[n].summary() for n in result.all}
    d, p, sh = s[DIRECT], s[PASS], s[SHADOW]
    blocks = [a / b for a, b in zip(result.block_p50[SHADOW], result.block_p50[PASS], strict=False) if b]
    spread = (f"{min(blocks):.2f} / {statistics.median(blocks):.2f} / {max(blocks):.2f}" if blocks else "-")
    table.add_row(variant, f"+{ms(p['p50'] - d['p50'])} / +{ms(p['p99'] - d['p99'])}",
                  f"+{ms(sh['p50'] - d['p50'])} / +{ms(sh['p99'] - d['p99'])}",
                  f"+{ms(sh['p50'] - p['p50'])} / +{ms(sh['p99'] - p['p99'])}",
                  f"{sh['p50'] / d['p50']:.2f}×", f"{p['p50'] / d['p50']:.2f}×",
                  f"{sh['p50'] / p['p50']:.2f}×", spread)


@dataclass
class Results:
    args: argparse.Namespace
    tally: Tally = field(default_factory=Tally)
    timings: dict[str, float] = field(default_factory=dict)
    lat_keep: LatencyResult | None = None
    lat_new: LatencyResult | None = None
    loads: dict[str, LoadResult] = field(default_factory=dict)  # the RSS run
    throughput: dict[str, list[LoadResult]] = field(default_factory=dict)  # per target, one per round
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # shadow-on worker's /metrics after a phase
    rss: dict[str, Any] = field(default_factory=dict)
    store: StoreReport | None = None
    pass_store: StoreReport | None = None
    log_lines: dict[str, list[str]] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=500, help="start/end pairs per target in the latency phase")
    parser.add_argument("--rss-callbacks", type=int, default=100_000, help="callbacks in the RSS phase (0: skip)")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pg-url", default=os.environ.get("BRIDGE_TEST_POSTGRES_URL") or DEFAULT_PG_URL)
    parser.add_argument("--blocks", type=int, default=20, help="interleaved latency blocks per target")
    parser.add_argument("--threads", type=int, default=4, help="client threads for throughput and RSS")
    parser.add_argument("--throughput-seconds", type=float, default=6.0, help="per target and round (0: skip)")
    parser.add_argument("--throughput-rounds", type=int, default=3, help="rounds over all targets")
    parser.add_argument("--budget-ms", type=int, default=50, help="BRIDGE_SHADOW_BUDGET_MS")
    parser.add_argument("--double-nagle", action="store_true", help="leave Nagle on in the 2.x double "
                        "(stock http.server; adds a ~40 ms delayed-ACK stall to every kept-alive reply)")
    parser.add_argument("--reconciler", action="store_true", help="leave `bridge serve`'s periodic reconcile pass "
                        "on (off by default: it compares 2.x's RunningInstances, which this script prunes, with the "
                        "store, and would report every pruned row as a mismatch)")
    parser.add_argument("--newconn-pairs", type=int, default=None, help="pairs per target, new connection per "
                        "call (default pairs/5, 0: skip)")
    args = parser.parse_args(argv)
    args.newconn_pairs = max(0, args.pairs // 5) if args.newconn_pairs is None else args.newconn_pairs
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2]).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    console.print(f"[bold]bench_shadow_http[/] backend={args.backend} pairs={args.pairs} "
                  f"newconn-pairs={args.newconn_pairs} blocks={args.blocks} threads={args.threads} "
                  f"throughput={args.throughput_rounds}x{args.throughput_seconds:g}s "
                  f"rss-callbacks={args.rss_callbacks:,} "
                  f"budget={args.budget_ms}ms double-nodelay={not args.double_nagle} "
                  f"reconciler={'on' if args.reconciler else 'off'}")
    console.print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
                  f"{load_avg()}; HEAD {commit}" + (f" + {len(dirty.splitlines())} modified tracked files"
                                                    if dirty else ""))
    results = Results(args)
    with tempfile.TemporaryDirectory(prefix="bench-shadow-http-") as tmp:
        try:
            run(results, Path(tmp))
        except StoreSetupError as exc:
            console.print(f"[red]could not set up the {args.backend} store: {exc}[/]")
            return 1
    results.timings["total"] = time.perf_counter() - started
    report(results)
    return 0


class StoreSetupError(Exception):
    pass


def run(res: Results, root: Path) -> None:
    """All phases; every child process is stopped and every PostgreSQL schema dropped on the way out."""
    args = res.args
    data = create_legacy_data_dir(root / "ql-data")
    crons = []
    for name, command, schedule in CRONS:
        cron_id = data.add_cron(name, command, schedule)
        crons.append(Cron(cron_id, str(data.cron_row(cron_id)["log_name"]), schedule))
    work = Workload(crons, int(time.time()))
    utc = ZoneInfo("UTC")
    unmatched = {c.schedule for c in crons for k in range(12)
                 if not schedule_matches(c.schedule, work.base_begin - 7200 * k, utc)}
    if unmatched:
        console.print(f"[red]begin times do not match the schedules {sorted(unmatched)}: runs will not be "
                      "scheduled ones[/]")
    with ExitStack() as outer:
        try:
            shadow_url, shadow_schema = outer.enter_context(store(args.backend, root, args.pg_url))
            # The pass-through bridge gets a store of its own: the origin modes may live in the store (seeded
            # once from BRIDGE_SHADOW_ORIGINS), so a shared store could switch shadow on for it too.
            pass_url, pass_schema = outer.enter_context(store(args.backend, root, args.pg_url, "pass"))
        except Exception as exc:  # noqa: BLE001 - reported by main
            raise StoreSetupError(f"{type(exc).__name__}: {exc}") from exc
        double_log = root / "double.log"
        double = outer.enter_context(double_process(data, double_log, nodelay=not args.double_nagle))
        console.print(f"2.x double: pid {double.pid}, {double.url}; 2.x data dir and stores in {root}")
        common = dict(BRIDGE_LEGACY_URL=double.url, BRIDGE_LEGACY_DATA_DIR=str(data.root), BRIDGE_LEGACY_TZ="UTC",
                      BRIDGE_LEGACY_SCHEDULER="system", BRIDGE_SHADOW_BUDGET_MS=str(args.budget_ms),
                      BRIDGE_DATA_DIR=str(root))
        if not args.reconciler:
            common["BRIDGE_RECONCILE_INTERVAL_S"] = "86400"  # no pass within the run (a no-op for a bridge without one)
        log_files: list[Path] = []

        def start_bridge(stack: ExitStack, name: str, origins: str, tag: str) -> BridgeHandle:
            port = free_port()
            url, schema = (shadow_url, shadow_schema) if origins else (pass_url, pass_schema)
            extra = {"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}
            env = bridge_env(dict(os.environ), BRIDGE_LISTEN=f"127.0.0.1:{port}", BRIDGE_SHADOW_ORIGINS=origins,
                             BRIDGE_DATABASE_URL=url, **extra, **common)
            handle = stack.enter_context(bridge_server(name, env, f"http://127.0.0.1:{port}", root / f"{tag}.log"))
            log_files.append(handle.log_path)
            said = [ln.split("origins not off: ", 1)[1] for ln in
                    handle.log_path.read_text(errors="replace").splitlines() if "origins not off: " in ln]
            console.print(f"{name} bridge: serve pid {handle.proc.pid}, {handle.url}; origins not off: "
                          + (said[0] if said else "?"))
            return handle

        with ExitStack() as bridges:  # phases 1 and 2: both bridges up side by side
            shadow = start_bridge(bridges, SHADOW, ALL_ORIGINS, "bridge-shadow")
            passthru = start_bridge(bridges, PASS, "", "bridge-pass")
            targets = {DIRECT: double.url, PASS: passthru.url, SHADOW: shadow.url}
            latency_phases(res, targets, data.system_token, work, double,
                           pids={SHADOW: shadow.worker_pid(), PASS: passthru.worker_pid()})
            res.metrics["latency"] = shadow.metrics()
            if args.throughput_seconds > 0:
                workers = {SHADOW: shadow.worker_pid(), PASS: passthru.worker_pid()}
                bare = bridges.enter_context(bare_server(root, args.threads, root / "bare.log"))
                sides = dict(targets)
                if bare is not None:
                    sides[BARE] = bare.url
                    workers[BARE] = bare.worker
                throughput_phase(res, sides, workers, data.system_token, work, double)
            res.metrics["throughput"] = shadow.metrics()

        if args.rss_callbacks > 0:  # phase 3: a fresh shadow-on bridge
            double.prune()
            double.autoprune(True)
            with ExitStack() as bridges:
                fresh = start_bridge(bridges, SHADOW, ALL_ORIGINS, "bridge-shadow-rss")
                sqlite_file = (root / "bridge.sqlite").resolve() if args.backend == "sqlite" else None
                rss_phase(res, fresh, data.system_token, work, double, sqlite_file)
                res.metrics["rss"] = fresh.metrics()

        # Every bridge has stopped here: SIGTERM made its worker drain the shadow lanes before exiting.
        res.store = store_report(shadow_url, shadow_schema)
        res.pass_store = store_report(pass_url, pass_schema)
        res.log_lines = {p.name: p.read_text(errors="replace").splitlines() for p in log_files}
        double_errors = [ln for ln in double_log.read_text(errors="replace").splitlines()
                         if ln.startswith(("sqlite3.", "Exception occurred"))]
        res.log_lines["2.x double (request errors)"] = [
            f"x WARNING {ln}" for ln in double_errors if not ln.startswith("Exception occurred")]


def latency_phases(res: Results, targets: dict[str, str], token: str, work: Workload, double: DoubleHandle,
                   pids: dict[str, int] | None = None) -> None:
    args = res.args
    double.prune()
    began = time.perf_counter()
    console.print(f"[bold]phase 1[/] latency: {args.pairs} pairs per target, keep-alive, {args.blocks} interleaved "
                  f"blocks ... ({load_avg()})")
    res.lat_keep = latency_phase(targets, token, work, res.tally, pairs=args.pairs, blocks=args.blocks,
                                 keepalive=True, warmup_pairs=20, pids=pids)
    if args.newconn_pairs:
        console.print(f"[bold]phase 1b[/] latency: {args.newconn_pairs} pairs per target, a new connection per "
                      f"call ... ({load_avg()})")
        res.lat_new = latency_phase(targets, token, work, res.tally, pairs=args.newconn_pairs,
                                    blocks=max(1, min(args.blocks, args.newconn_pairs // 5)), keepalive=False,
                                    warmup_pairs=5)
    res.timings["latency"] = time.perf_counter() - began


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """Each round visits every name once, starting one later than the round before (ABCD, BCDA, CDAB, ...): over
    len(names) rounds each name runs once in every position, so drift and noise meet every side alike."""
    return [names[r % len(names):] + names[:r % len(names)] for r in range(rounds)]


def throughput_phase(res: Results, targets: dict[str, str], workers: dict[str, int], token: str, work: Workload,
                     double: DoubleHandle) -> None:
    """Every target once per round, for ``--throughput-seconds`` each, in the orders of ``round_orders``."""
    args = res.args
    began = time.perf_counter()
    double.autoprune(True)
    for round_no, order in enumerate(round_orders(list(targets), args.throughput_rounds)):
        for name in order:
            double.prune()
            console.print(f"[bold]phase 2[/] throughput, round {round_no + 1}/{args.throughput_rounds}: {name}, "
                          f"{args.threads} threads, {args.throughput_seconds:g} s ... ({load_avg()})")
            pids = ({"2.x double": double.pid} if name != BARE else {}) | (
                {"bridge worker": workers[name]} if name in workers else {})
            res.throughput.setdefault(name, []).append(concurrent_load(
                targets[name], token, work, res.tally if name == SHADOW else None, threads=args.threads,
                seconds=args.throughput_seconds, cpu_pids=pids))
    res.timings["throughput"] = time.perf_counter() - began


def rss_phase(res: Results, bridge: BridgeHandle, token: str, work: Workload, double: DoubleHandle,
              sqlite_file: Path | None) -> None:
    args, rss = res.args, res.rss
    worker = bridge.worker_pid()

    def sample() -> dict[str, int]:
        return rss_kib(worker) | {"StoreConns": store_connections(worker, sqlite_file)}

    time.sleep(1.0)
    rss["raw"] = sample()
    console.print(f"[bold]phase 3[/] RSS: worker pid {worker} raw VmRSS {rss['raw']['VmRSS'] / 1024:.1f} MiB; "
                  f"{RSS_WARMUP_CALLBACKS:,} warm-up callbacks ... ({load_avg()})")
    concurrent_load(bridge.url, token, work, res.tally, threads=args.threads, callbacks=RSS_WARMUP_CALLBACKS,
                    keep_latency=False)
    time.sleep(1.0)
    rss["warm"] = sample()
    rss["curve"] = [(0, 0.0, rss["warm"]["VmRSS"])]
    console.print(f"  warm VmRSS {rss['warm']['VmRSS'] / 1024:.1f} MiB; sending {args.rss_callbacks:,} callbacks "
                  f"with {args.threads} threads ...")
    last: dict[str, Any] = {"done": 0, "elapsed": 0.0, "metrics": bridge.metrics()}

    def tick(done: int, elapsed: float) -> None:
        now_sample = sample()
        now = now_sample["VmRSS"]
        rss["curve"].append((done, elapsed, now))
        m, m0 = bridge.metrics(), last["metrics"]

        def delta(name: str, **labels: str) -> float:
            return metric_sum(m, name, **labels) - metric_sum(m0, name, **labels)

        write_ms = (1000 * delta("ql_bridge_shadow_write_seconds_sum")
                    / max(1.0, delta("ql_bridge_shadow_write_seconds_count")))
        fwd_ms = 1000 * delta("ql_bridge_forward_seconds_sum") / max(1.0, delta("ql_bridge_forward_seconds_count"))
        rate = (done - last["done"]) / max(1e-9, elapsed - last["elapsed"])
        last.update(done=done, elapsed=elapsed, metrics=m)
        console.print(f"  {done:>7,} / {args.rss_callbacks:,} callbacks {elapsed:6.1f} s | last {PROGRESS_EVERY:,}: "
                      f"{rate:4.0f} cb/s, shadow write {write_ms:5.2f} ms, forward {fwd_ms:5.2f} ms, "
                      f"{delta('ql_bridge_shadow_write_failed_total', error='timeout'):.0f} over budget | VmRSS "
                      f"{now / 1024:6.1f} MiB ({(now - rss['warm']['VmRSS']) / 1024:+.1f}), "
                      f"{now_sample['Threads']} threads, {now_sample['StoreConns']} store conns | {load_avg()}")

    began = time.perf_counter()
    res.loads["rss"] = concurrent_load(bridge.url, token, work, res.tally, threads=args.threads,
                                       callbacks=args.rss_callbacks, tick=tick,
                                       cpu_pids={"bridge worker": worker, "2.x double": double.pid})
    res.timings["rss"] = time.perf_counter() - began
    rss["after_now"] = sample()
    time.sleep(2.0)  # let the shadow lanes drain
    rss["after"] = sample()


def spread(values: list[float], digits: int = 2) -> str:
    """min–max (median) of one figure over the rounds."""
    if not values:
        return "-"
    return f"{min(values):.{digits}f}–{max(values):.{digits}f} ({statistics.median(values):.{digits}f})"


def throughput_report(res: Results) -> None:
    """Per target, each figure's range over the rounds; then the ratios, each taken within one round."""
    args = res.args
    rounds = res.throughput
    table = Table("target", "callbacks ok / errors", "callbacks/s", "p50 ms", "p99 ms", "CPU ms/callback: worker",
                  "double", "client", title=f"Throughput, {args.threads} keep-alive clients, {args.throughput_rounds} "
                  f"rounds × {args.throughput_seconds:g} s per target: min–max (median) over the rounds")
    for name, loads in rounds.items():

        def cpu(label: str, loads: list[LoadResult] = loads) -> str:
            used = [1000 * x.cpu_s[label] / x.callbacks_ok for x in loads if label in x.cpu_s and x.callbacks_ok]
            return spread(used)

        table.add_row(name, f"{sum(x.callbacks_ok for x in loads):,} / {sum(x.errors for x in loads)}",
                      spread([x.rate for x in loads], 0), spread([x.latency.summary()["p50"] for x in loads]),
                      spread([x.latency.summary()["p99"] for x in loads]), cpu("bridge worker"), cpu("2.x double"),
                      cpu("load generator"))
    console.print(table)
    if SHADOW not in rounds:
        return
    ratios = Table("ratio, within each round", "min–max (median)", "per round",
                   title="Throughput ratios (callbacks/s)")
    for other in (PASS, BARE, DIRECT):
        if other in rounds:
            per_round = [a.rate / b.rate for a, b in zip(rounds[SHADOW], rounds[other], strict=True) if b.rate]
            ratios.add_row(f"{SHADOW} ÷ {other}", spread(per_round), ", ".join(f"{r:.2f}" for r in per_round))
    if PASS in rounds:
        worker = "bridge worker"
        cpu_ratio = [(a.cpu_s[worker] / a.callbacks_ok) / (b.cpu_s[worker] / b.callbacks_ok)
                     for a, b in zip(rounds[SHADOW], rounds[PASS], strict=True)
                     if a.callbacks_ok and b.callbacks_ok and b.cpu_s[worker]]
        ratios.add_row(f"worker CPU per callback, {SHADOW} ÷ {PASS}", spread(cpu_ratio),
                       ", ".join(f"{r:.2f}" for r in cpu_ratio))
    console.print(ratios)


def verdict(ok: bool) -> str:
    return "[green]met[/]" if ok else "[red]NOT met[/]"


def report(res: Results) -> None:
    args = res.args
    console.rule("[bold]results")
    assert res.lat_keep is not None
    console.print(latency_table(f"Latency per callback, one persistent connection per target "
                                f"({res.lat_keep.seconds:.1f} s)", res.lat_keep))
    if res.lat_new is not None:
        console.print(latency_table(f"Latency per callback, a new connection per call ({res.lat_new.seconds:.1f} s)",
                                    res.lat_new))
    comp = Table("variant", "pass − direct\nΔp50 / Δp99 ms", "shadow − direct\nΔp50 / Δp99 ms",
                 "shadow − pass\nΔp50 / Δp99 ms", "shadow/direct\np50", "pass/direct\np50", "shadow/pass\np50",
                 "shadow/pass p50 by block\nmin / median / max", title="Added latency")
    comparison_rows(comp, "keep-alive", res.lat_keep)
    if res.lat_new is not None:
        comparison_rows(comp, "new connection", res.lat_new)
    console.print(comp)

    def ratio(result: LatencyResult) -> float:
        return result.all[SHADOW].summary()["p50"] / result.all[PASS].summary()["p50"]

    keep = ratio(res.lat_keep)
    shadow_cpu, pass_cpu = (res.lat_keep.cpu_ms_per_callback(n) for n in (SHADOW, PASS))
    if shadow_cpu is not None and pass_cpu is not None:
        per_block = [s / n / (p / m) for (s, n), (p, m) in zip(res.lat_keep.block_cpu[SHADOW],
                                                             res.lat_keep.block_cpu[PASS]) if n and m and p]
        spread = (f"; per block pair min / median / max {min(per_block):.2f} / {statistics.median(per_block):.2f} / "
                  f"{max(per_block):.2f}" if per_block else "")
        console.print(f"bridge CPU per callback, one keep-alive client (whole `bridge serve` process, alternated "
                      f"blocks): {SHADOW} {shadow_cpu:.2f} ms ÷ {PASS} {pass_cpu:.2f} ms = "
                      f"{shadow_cpu / pass_cpu:.2f}{spread}")
    console.print(f"{TARGET_LINE}: keep-alive {keep:.2f}× → {verdict(keep <= TARGET_RATIO)}"
                  + (f"; new connection per call {ratio(res.lat_new):.2f}× → "
                     f"{verdict(ratio(res.lat_new) <= TARGET_RATIO)}" if res.lat_new is not None else ""))

    if res.throughput:
        throughput_report(res)
    if res.loads:
        table = Table("phase / target", "threads", "seconds", "callbacks ok", "errors", "callbacks/s",
                      "executions/s", "p50 ms", "p99 ms", "CPU ms/callback: worker / double / client",
                      title="Sustained load (keep-alive clients)")
        for load in res.loads.values():
            s = load.latency.summary()
            table.add_row("RSS run, shadow-on", str(args.threads), f"{load.seconds:.1f}", f"{load.callbacks_ok:,}",
                          str(load.errors), f"{load.rate:,.0f}", f"{load.rate / 2:,.0f}", ms(s["p50"]),
                          ms(s["p99"]), " / ".join(load.cpu_ms_per_callback(k) for k in ("bridge worker",
                                                                                        "2.x double",
                                                                                        "load generator")))
        console.print(table)

    table = Table("shadow-on worker", "after latency", "after throughput", "RSS bridge",
                  title="From the shadow-on bridge's /metrics (cumulative per worker)")
    phases = [res.metrics.get(k, {}) for k in ("latency", "throughput", "rss")]

    def row(label: str, fn: Callable[[dict[str, float]], str]) -> None:
        table.add_row(label, *[fn(m) if m else "-" for m in phases])

    def failed_otherwise(m: dict[str, float]) -> float:
        failed = "ql_bridge_shadow_write_failed_total"
        return metric_sum(m, failed) - metric_sum(m, failed, error="timeout")

    def mean_ms(m: dict[str, float], name: str) -> str:
        return ms(1000 * metric_sum(m, f"{name}_sum") / max(1.0, metric_sum(m, f"{name}_count")))

    row("shadow runs created", lambda m: f"{metric_sum(m, 'ql_bridge_shadow_run_create_total'):,.0f}")
    row("shadow writes over budget (timeout)",
        lambda m: f"{metric_sum(m, 'ql_bridge_shadow_write_failed_total', error='timeout'):,.0f}")
    row("shadow writes failed otherwise", lambda m: f"{failed_otherwise(m):,.0f}")
    row("unmatched / ambiguous callbacks",
        lambda m: f"{metric_sum(m, 'ql_bridge_shadow_callback_unmatched_total'):,.0f}")
    row("late callbacks", lambda m: f"{metric_sum(m, 'ql_bridge_attempt_late_callback_total'):,.0f}")
    row("shadow write mean ms", lambda m: mean_ms(m, "ql_bridge_shadow_write_seconds"))
    row("forward to 2.x mean ms", lambda m: mean_ms(m, "ql_bridge_forward_seconds"))
    console.print(table)

    if res.store is not None and res.pass_store is not None:
        st, sent = res.store, res.tally.shadow_pairs_ok
        table = Table("store check", "value", title=f"Shadow store ({args.backend}) after all phases")
        table.add_row("executions sent through shadow-on bridges (start and end answered 2xx)", f"{sent:,}")
        table.add_row("executions with a callback not answered 2xx", f"{res.tally.shadow_pairs_failed:,}")
        table.add_row("runs created", f"{st.runs:,} ({st.runs - sent:+,} vs sent)")
        for (origin, status), n in sorted(st.by_origin_status.items()):
            table.add_row(f"  runs {origin} / {status}", f"{n:,}")
        table.add_row("run_events", f"{st.events:,}")
        table.add_row("events per run (distribution)",
                      ", ".join(f"{k} events: {v:,} runs" for k, v in sorted(st.events_per_run.items())) or "-")
        worst = max(st.events_per_run, default=0)
        table.add_row(f"events per normal execution (target ≤ {EVENTS_TARGET})",
                      f"max {worst} → {verdict(worst <= EVENTS_TARGET)}")
        table.add_row("events by type", ", ".join(f"{k} {v:,}" for k, v in sorted(st.events_by_type.items())))
        table.add_row("mismatch rows", f"{st.mismatches:,}" + (": " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(st.mismatches_by_kind.items())) if st.mismatches_by_kind else ""))
        table.add_row("runs in the pass-through bridge's own store (must be 0)", f"{res.pass_store.runs:,}")
        console.print(table)
        if res.pass_store.runs:
            console.print("[red]the pass-through bridge recorded runs: it was not a pure pass-through[/]")

    if "after" in res.rss:
        rss = res.rss

        def mib(key: str, field_name: str = "VmRSS") -> float:
            return rss[key].get(field_name, 0) / 1024

        growth = mib("after") - mib("warm")
        table = Table("sample", "VmRSS MiB", "RssAnon MiB", "VmHWM MiB", "threads", "store conns",
                      title=f"Bridge worker RSS (shadow-on, {args.rss_callbacks:,} callbacks in "
                            f"{res.timings.get('rss', 0):.0f} s)")
        for key, label in (("raw", "raw-before (booted, idle)"),
                           ("warm", f"warm-before (after {RSS_WARMUP_CALLBACKS:,} callbacks)"),
                           ("after_now", "after (last callback answered)"), ("after", "after (+2 s, lanes drained)")):
            table.add_row(label, f"{mib(key):.1f}", f"{mib(key, 'RssAnon'):.1f}", f"{mib(key, 'VmHWM'):.1f}",
                          str(rss[key].get("Threads", "?")), str(rss[key].get("StoreConns", "?")))
        table.add_row("growth: after − warm-before", f"{growth:+.1f}",
                      f"{mib('after', 'RssAnon') - mib('warm', 'RssAnon'):+.1f}", "", "", "")
        table.add_row("growth: after − raw-before", f"{mib('after') - mib('raw'):+.1f}",
                      f"{mib('after', 'RssAnon') - mib('raw', 'RssAnon'):+.1f}", "", "", "")
        console.print(table)
        warm = rss["warm"]["VmRSS"]
        console.print("VmRSS over warm-before, by callbacks sent (MiB): "
                      + "  ".join(f"{d // 1000}k {(v - warm) / 1024:+.1f}" for d, _, v in rss["curve"]))
        console.print(f"target: no growth beyond a few MiB over 100,000 callbacks: {growth:+.1f} MiB over "
                      f"{args.rss_callbacks:,} callbacks → {verdict(growth <= RSS_TARGET_MIB)}")

    for name, lines in res.log_lines.items():
        kinds: dict[str, int] = {}
        for line in lines:
            if " WARNING " in line or " ERROR " in line:
                key = re.sub(r"^\S+ \S+ \[\d+\] ", "", line).removeprefix("x ")
                kinds[key] = kinds.get(key, 0) + 1
        console.print(f"{name}: {sum(kinds.values())} warning/error lines" + (
            ": " + "; ".join(f"{n}× {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:4])
            if kinds else ""))
    console.print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in res.timings.items()))


if __name__ == "__main__":
    sys.exit(main())
