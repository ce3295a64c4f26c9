"""Benchmark: a burst of crons firing on the same minute, through a real `ql-bridge serve`, shadow on vs pass-through.

    python -m tests.bench.bench_burst [--crons 300] [--spread-s 1.0] [--run-s 3.0] [--rounds 3]
                                      [--backend sqlite|postgres] [--pg-url URL] [--budget-ms 50]

The normal peak of a QingLong box: many crons due on the same minute. The 2.x test double runs in its own process
with --crons crons on "* * * * *"; two `ql-bridge serve` processes stand in front of it, one with shadow on for
every origin and one pure pass-through, each on a store of its own (started and stopped as bench_shadow_http
does). A burst is, for each cron, one execution as the task shell reports it: its start callback, the --crons
of them arriving spread evenly over --spread-s seconds, and --run-s seconds after the first start, their end
callbacks (exit 0) spread the same way. Each callback is the exact bytes of shell/api.sh on a new connection
(the shell's curl opens one per call), sent from its own client thread at its moment.

Per burst and side:
  * time until 2.x has answered all starts (from the first start sent to the last answer), and all ends;
    each callback's latency (p50 / p99 / max), and any answer that is not 2xx;
  * shadow on: time until the shadow facts are complete, polled in the store every 25 ms: every start's Run
    exists (from the first start sent), and every Run is succeeded with its nine events (from the first end);
    a burst whose facts stop changing for 3 s without being complete is "incomplete" (a write that failed does
    not come later: the bridge is fail-open), and the Runs it did record are printed;
  * CPU spent from /proc (user + system, all threads) from the first start until the burst is done (its facts
    complete, or for pass-through its last answer): the bridge, the 2.x double and this client, and per
    callback; and the shadow bridge's writes over budget or failed, from its /metrics.

--rounds bursts per side, the sides alternating and the first side flipping each round (P S, S P, P S ...);
every figure is printed as its range over the rounds. This is a benchmark, not a test: it asserts nothing about
timing and exits 0 after printing (1 if the store could not be set up).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, case, func, select

from bridge.cli.demo import CURL_HEADERS, free_port
from bridge.storage.engine import READ_ONLY, make_engine
from bridge.storage.schema import runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.bench.bench_shadow_http import (
    ALL_ORIGINS,
    DEFAULT_PG_URL,
    BridgeHandle,
    DoubleHandle,
    bridge_env,
    bridge_server,
    cpu_seconds,
    double_process,
    load_avg,
    metric_sum,
)
from tests.bench.stores import fresh_store

PASS, SHADOW = "pass-through", "shadow-on"
POLL_S = 0.025
SETTLED_S = 3.0  # facts unchanged this long after the last answer: a write that failed will not come (fail-open)
FACTS_TIMEOUT_S = 60.0
console = Console(width=160)


@dataclass(frozen=True)
class Execution:
    cron_id: int
    log_name: str
    pid: int
    begin_s: int

    def start(self) -> bytes:
        return render_status_body(self.cron_id, 0, self.pid, self.log_path, self.begin_s)

    def end(self) -> bytes:
        return render_status_body(self.cron_id, 1, self.pid, self.log_path, self.begin_s, 3, 0)

    @property
    def log_path(self) -> str:
        return f"{self.log_name}/2026-01-01-00-00-{self.pid}.log"


@dataclass
class Wave:
    """One wave of callbacks (all starts, or all ends): when each was sent and answered, and its status."""

    t0: float
    sent: list[float]
    answered: list[float]
    status: list[int]

    @property
    def all_answered_s(self) -> float:
        return max(self.answered) - self.t0

    @property
    def latencies_ms(self) -> list[float]:
        return sorted(1000 * (a - s) for s, a in zip(self.sent, self.answered, strict=True))

    @property
    def not_2xx(self) -> int:
        return sum(1 for s in self.status if not 200 <= s < 300)


def send_wave(url: str, token: str, bodies: list[bytes], spread_s: float, t0: float) -> Wave:
    """Body i goes out at t0 + i * spread_s / len(bodies), on a new connection, from a thread of its own."""
    parts = urlsplit(url)
    headers = {**CURL_HEADERS, "Authorization": f"Bearer {token}"}
    n = len(bodies)
    sent, answered, status = [0.0] * n, [0.0] * n, [0] * n

    def one(i: int) -> None:
        delay = t0 + i * spread_s / n - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent[i] = time.perf_counter()
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        try:
            conn.request("PUT", f"/open/crons/status?t={int(time.time())}", body=bodies[i],
                         headers={**headers, "Content-Length": str(len(bodies[i]))})
            response = conn.getresponse()
            response.read()
            status[i] = response.status
        except OSError:
            status[i] = 0
        finally:
            conn.close()
            answered[i] = time.perf_counter()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Wave(t0, sent, answered, status)


def facts(engine: Engine, pids: range) -> tuple[int, int, int]:
    """(Runs of these pids, of them succeeded, events of the succeeded ones)."""
    r = runs_table.c
    done = case((r.status == "succeeded", 1), else_=0)
    stmt = select(func.count(), func.coalesce(func.sum(done), 0),
                  func.coalesce(func.sum(done * r.event_sequence), 0)).where(r.legacy_pid.between(pids[0], pids[-1]))
    # Read-only (a plain BEGIN on SQLite): a poll must never take the write lock the bridge is writing under.
    with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
        runs, succeeded, events = conn.execute(stmt).one()
    return int(runs), int(succeeded), int(events)


def wait_for(read: Callable[[], tuple[int, ...]], done: Callable[[tuple[int, ...]], bool], since: float,
             answered: Callable[[], bool]) -> tuple[float | None, tuple[int, ...]]:
    """(seconds from ``since`` until ``done(read())``, the last reading), polled; (None, reading) once the
    readings stopped changing for SETTLED_S after ``answered()`` (a shadow write that failed never comes: the
    bridge is fail-open), or after FACTS_TIMEOUT_S."""
    last, changed = read(), time.perf_counter()
    while not done(last):
        now = time.perf_counter()
        if now - since > FACTS_TIMEOUT_S or (answered() and now - changed > SETTLED_S):
            return None, last
        time.sleep(POLL_S)
        reading = read()
        if reading != last:
            last, changed = reading, time.perf_counter()
    return time.perf_counter() - since, last


@dataclass
class Burst:
    side: str
    starts: Wave
    ends: Wave
    start_facts_s: float | None = None  # shadow on: every Run exists, from the first start
    end_facts_s: float | None = None  # shadow on: every Run succeeded with 9 events, from the first end
    recorded: int = 0  # shadow on: Runs recorded once the burst was done or settled
    succeeded: int = 0  # shadow on: of them succeeded with their nine events
    cpu_s: dict[str, float] = field(default_factory=dict)
    over_budget: float = 0.0
    failed: float = 0.0

    @property
    def callbacks(self) -> int:
        return len(self.starts.sent) + len(self.ends.sent)


class Bursts:
    """Executions for one burst after another: a new pid range each time, every cron once."""

    def __init__(self, crons: list[tuple[int, str]], now_s: int) -> None:
        self.crons = crons
        self.begin_s = now_s - now_s % 60 - 60 + 1  # one second after a past minute: every "* * * * *" fired
        self._bases = itertools.count(200_000, 10_000)

    def next(self) -> list[Execution]:
        base = next(self._bases)
        return [Execution(cron_id, log_name, base + i, self.begin_s)
                for i, (cron_id, log_name) in enumerate(self.crons)]


def run_burst(side: str, bridge: BridgeHandle, engine: Engine | None, double: DoubleHandle, token: str,
              executions: list[Execution], args: argparse.Namespace) -> Burst:
    pids = range(executions[0].pid, executions[-1].pid + 1)
    n = len(executions)
    processes = {"bridge": bridge.worker_pid(), "2.x double": double.pid, "client": os.getpid()}
    cpu0 = {label: cpu_seconds(pid) for label, pid in processes.items()}
    metrics0 = bridge.metrics()
    t0 = time.perf_counter() + 0.3  # time for every client thread to start and wait for its moment
    ends: list[Wave] = []
    ender = threading.Thread(target=lambda: ends.append(send_wave(
        bridge.url, token, [x.end() for x in executions], args.spread_s, t0 + args.run_s)), daemon=True)
    ender.start()
    starts = send_wave(bridge.url, token, [x.start() for x in executions], args.spread_s, t0)
    start_facts = end_facts = None
    recorded = succeeded = 0
    if engine is not None:
        start_facts, _ = wait_for(lambda: facts(engine, pids)[:1], lambda r: r[0] >= n, t0,
                                  lambda: not ender.is_alive())
    ender.join()
    if engine is not None:
        end_facts, (recorded, succeeded, events) = wait_for(
            lambda: facts(engine, pids), lambda r: r[1:] == (n, 9 * n), t0 + args.run_s, lambda: True)
        succeeded = succeeded if events == 9 * succeeded else -1
    cpu = {label: cpu_seconds(pid) - cpu0[label] for label, pid in processes.items()}
    metrics = bridge.metrics()

    def delta(name: str, **labels: str) -> float:
        return metric_sum(metrics, name, **labels) - metric_sum(metrics0, name, **labels)

    failed = "ql_bridge_shadow_write_failed_total"
    return Burst(side, starts, ends[0], start_facts, end_facts, recorded, succeeded, cpu,
                 delta(failed, error="timeout"), delta(failed) - delta(failed, error="timeout"))


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """min–max (median) over the rounds."""
    if not values:
        return "-"
    return (f"{fmt.format(min(values))}–{fmt.format(max(values))} "
            f"({fmt.format(statistics.median(values))})")


def report(bursts: dict[str, list[Burst]], args: argparse.Namespace) -> None:
    table = Table("figure", PASS, SHADOW, title=f"{args.crons} crons, starts over {args.spread_s:g} s, ends from "
                  f"{args.run_s:g} s later; {args.rounds} bursts per side: min–max (median); times in seconds")

    def row(label: str, value: Callable[[Burst], float | None], fmt: str = "{:.2f}",
            sides: tuple[str, ...] = (PASS, SHADOW)) -> None:
        cells = []
        for side in (PASS, SHADOW):
            got = [value(b) for b in bursts.get(side, [])] if side in sides else []
            values = [v for v in got if v is not None]
            incomplete = f", {len(got) - len(values)} incomplete" if len(values) < len(got) else ""
            cells.append(spread(values, fmt) + incomplete if got else "-")
        table.add_row(label, *cells)

    row("2.x answered every start (from the first sent)", lambda b: b.starts.all_answered_s)
    row("  … after the last start was sent", lambda b: max(b.starts.answered) - max(b.starts.sent))
    row("2.x answered every end (from the first sent)", lambda b: b.ends.all_answered_s)
    row("  … after the last end was sent", lambda b: max(b.ends.answered) - max(b.ends.sent))
    row("shadow facts complete: every Run recorded (from the first start)", lambda b: b.start_facts_s,
        sides=(SHADOW,))
    row("shadow facts complete: every Run succeeded, 9 events (from the first end)", lambda b: b.end_facts_s,
        sides=(SHADOW,))
    for wave in ("starts", "ends"):
        for q, label in ((0.5, "p50"), (0.99, "p99"), (1.0, "max")):
            row(f"{wave[:-1]} callback {label} ms",
                lambda b, w=wave, q=q: (lambda lat: lat[min(len(lat) - 1, int(q * len(lat)))])(
                    getattr(b, w).latencies_ms), "{:.0f}")
    row("Runs recorded once the burst was done (of each burst's crons)", lambda b: b.recorded, "{:.0f}",
        sides=(SHADOW,))
    row("  … of them succeeded with their 9 events", lambda b: b.succeeded, "{:.0f}", sides=(SHADOW,))
    row("answers not 2xx", lambda b: float(b.starts.not_2xx + b.ends.not_2xx), "{:.0f}")
    row("shadow writes over budget", lambda b: b.over_budget, "{:.0f}", sides=(SHADOW,))
    row("shadow writes failed otherwise", lambda b: b.failed, "{:.0f}", sides=(SHADOW,))
    for label in ("bridge", "2.x double", "client"):
        row(f"CPU s, {label}", lambda b, k=label: b.cpu_s[k])
    row("CPU ms per callback, bridge", lambda b: 1000 * b.cpu_s["bridge"] / b.callbacks)
    console.print(table)
    if PASS in bursts and SHADOW in bursts:
        ratios = Table("ratio shadow-on ÷ pass-through, burst by burst", "min–max (median)")
        pairs = list(zip(bursts[SHADOW], bursts[PASS], strict=False))
        ratios.add_row("2.x answered every start", spread([s.starts.all_answered_s / p.starts.all_answered_s
                                                           for s, p in pairs]))
        ratios.add_row("2.x answered every end", spread([s.ends.all_answered_s / p.ends.all_answered_s
                                                         for s, p in pairs]))
        ratios.add_row("bridge CPU", spread([s.cpu_s["bridge"] / p.cpu_s["bridge"] for s, p in pairs
                                             if p.cpu_s["bridge"]]))
        console.print(ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--crons", type=int, default=300)
    parser.add_argument("--spread-s", type=float, default=1.0, help="the starts (and the ends) arrive over this")
    parser.add_argument("--run-s", type=float, default=3.0, help="the ends begin this long after the first start")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per side")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pg-url", default=os.environ.get("BRIDGE_TEST_POSTGRES_URL") or DEFAULT_PG_URL)
    parser.add_argument("--budget-ms", type=int, default=50, help="BRIDGE_SHADOW_BUDGET_MS")
    args = parser.parse_args(argv)
    console.print(f"[bold]bench_burst[/] {args.crons} crons, spread {args.spread_s:g} s, run {args.run_s:g} s, "
                  f"{args.rounds} rounds, backend {args.backend}, budget {args.budget_ms} ms; {os.cpu_count()} cores, "
                  f"{load_avg()}")
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
        root = Path(tmp)
        data = create_legacy_data_dir(root / "ql-data")
        crons = []
        for i in range(args.crons):
            cron_id = data.add_cron(f"burst {i}", f"task burst_{i}.js", "* * * * *")
            crons.append((cron_id, str(data.cron_row(cron_id)["log_name"])))
        plan = Bursts(crons, int(time.time()))
        with ExitStack() as stack:
            try:
                shadow_url, shadow_schema = stack.enter_context(fresh_store(args.backend, root, args.pg_url))
                pass_url, pass_schema = stack.enter_context(fresh_store(args.backend, root, args.pg_url, "pass"))
            except Exception as exc:  # noqa: BLE001 - one line, then the exit status
                console.print(f"[red]could not set up the {args.backend} store: {type(exc).__name__}: {exc}[/]")
                return 1
            double = stack.enter_context(double_process(data, root / "double.log"))
            common = dict(BRIDGE_LEGACY_URL=double.url, BRIDGE_LEGACY_DATA_DIR=str(data.root), BRIDGE_LEGACY_TZ="UTC",
                          BRIDGE_LEGACY_SCHEDULER="system", BRIDGE_SHADOW_BUDGET_MS=str(args.budget_ms),
                          BRIDGE_DATA_DIR=str(root), BRIDGE_RECONCILE_INTERVAL_S="86400")
            bridges: dict[str, BridgeHandle] = {}
            for side, origins, url, schema in ((SHADOW, ALL_ORIGINS, shadow_url, shadow_schema),
                                               (PASS, "", pass_url, pass_schema)):
                port = free_port()
                env = bridge_env(dict(os.environ), BRIDGE_LISTEN=f"127.0.0.1:{port}", BRIDGE_SHADOW_ORIGINS=origins,
                                 BRIDGE_DATABASE_URL=url, **({"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}),
                                 **common)
                bridges[side] = stack.enter_context(bridge_server(side, env, f"http://127.0.0.1:{port}",
                                                                  root / f"{side}.log"))
            engine = make_engine(shadow_url, pg_search_path=shadow_schema)
            stack.callback(engine.dispose)
            warm = plan.next()[: min(20, args.crons)]
            for bridge in bridges.values():  # a few executions each: imports, pools, caches
                send_wave(bridge.url, data.system_token, [x.start() for x in warm], 0.2, time.perf_counter())
                send_wave(bridge.url, data.system_token, [x.end() for x in warm], 0.2, time.perf_counter())
                warm = plan.next()[: len(warm)]
            time.sleep(1.0)
            bursts: dict[str, list[Burst]] = {}
            for round_no in range(args.rounds):
                for side in (PASS, SHADOW) if round_no % 2 == 0 else (SHADOW, PASS):
                    double.prune()
                    console.print(f"round {round_no + 1}/{args.rounds}: {side} ... ({load_avg()})")
                    burst = run_burst(side, bridges[side], engine if side == SHADOW else None, double,
                                      data.system_token, plan.next(), args)
                    bursts.setdefault(side, []).append(burst)
                    time.sleep(1.0)
    report(bursts, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
