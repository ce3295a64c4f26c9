"""Benchmark: StepRun transitions per second through the repository, against the raw driver doing the same.

    python -m tests.bench.bench_step_runs [--steps N] [--backend sqlite|postgres|both] [--pg-url URL]
                                          [--blocks B] [--warmup W]

One step lifecycle = four mutations, each its own transaction (docs/run-state.md#steprun-mutations): create (pending),
then the three transitions pending→ready, ready→running, running→succeeded. The headline is transitions per second;
creates are timed and shown beside them. Runs come from RunService on both sides and are not timed (a new one every 128
steps).

"StepRunService" is the production path: StepRunService → SqlStepRunRepository → SqlUnitOfWork (SQLite: BEGIN
IMMEDIATE through the writer gate; PostgreSQL: SERIALIZABLE with its SET LOCAL timeouts, reads in one pipelined
round trip, writes in another, then COMMIT). "raw driver" runs the SAME statements in the SAME transaction shape
with stdlib sqlite3 / psycopg 3: the same reads (the Run FOR UPDATE, the ledger lookup, the StepRun's record or the
count), the same checks (fence, replay, table, CAS expectations), the same canonical JSON and SHA-256 digest, the
same four writes with the same CAS conditions and rowcount checks, and the same pipelines on PostgreSQL. What it
skips is what the repository adds: the record's validation, the dataclasses and the unit of work. A statement
audit (and on PostgreSQL the client→server round trips from a libpq trace) and a row-shape comparison are printed.

Both sides write into one fresh store (a temp SQLite file, or a new PostgreSQL schema dropped afterwards) in
interleaved ABBA blocks after a warm-up. Floor: 50% of the raw rate; aim: 80%. Exits 0 after printing (1 if a
backend could not be set up); it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy
from psycopg import pq
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, event

import bridge.storage.step_runs as step_runs_module
from bridge.domain.events import Actor, ActorType
from bridge.domain.step_run import STEP_RUN_LIMIT, STEP_RUN_TRANSITIONS, StepRunKind, StepRunStatus
from bridge.domain.step_run_mutation import CreateStepRun, TransitionStepRun
from bridge.service.clock import SystemClock
from bridge.service.ids import new_id
from bridge.service.run_service import RunService
from bridge.service.step_runs import StepRunService
from bridge.storage.schema import STEP_RUN_MIRROR, run_events_table, step_run_mutations_table
from bridge.storage.step_runs import (
    IDLE_IN_TRANSACTION_TIMEOUT_MS,
    LOCK_TIMEOUT_MS,
    STATEMENT_TIMEOUT_MS,
    SqlStepRunRepository,
)
from tests.bench import bench_run_service
from tests.bench.bench_run_service import (
    DEFAULT_PG_URL,
    _pg_trace,
    _round_trips,
    block_sizes,
    pct,
)
from tests.contract.lifecycle import create

FLOOR, AIM = 0.50, 0.80
IMPLS = ("StepRunService", "raw driver")
KINDS = ("create", "ready", "running", "succeeded")  # the four mutations of one step lifecycle
ACTOR = Actor(ActorType.SYSTEM, "bench")
Probe = Callable[[], int]


# --- Side A: the repository ---------------------------------------------------------------------------------

@dataclass
class Fence:
    run_id: str
    version: int
    sequence: int
    steps: int = 0


def service_lifecycle(svc: StepRunService, fence: Fence, lat: list[list[int]], probe: Probe) -> str:
    t0 = probe()
    result = svc.create_step_run(CreateStepRun(new_id(), fence.run_id, f"step {fence.steps}", StepRunKind.TOOL,
                                               fence.version, fence.sequence, ACTOR))
    lat[0].append(probe() - t0)
    step, fence.version, fence.sequence = result.step_run, result.run_version, result.event_sequence
    for i, to in enumerate((StepRunStatus.READY, StepRunStatus.RUNNING, StepRunStatus.SUCCEEDED), 1):
        t0 = probe()
        result = svc.transition_step_run(TransitionStepRun(
            new_id(), fence.run_id, step.id, to, fence.version, fence.sequence, step.version, step.digest,
            step.status, ACTOR))
        lat[i].append(probe() - t0)
        step, fence.version, fence.sequence = result.step_run, result.run_version, result.event_sequence
    fence.steps += 1
    return step.id


# --- Side B: the raw driver ---------------------------------------------------------------------------------

MIRROR_COLUMNS = [column for column, _ in STEP_RUN_MIRROR]
EVENT_COLUMNS = [c.name for c in run_events_table.columns]
LEDGER_COLUMNS = [c.name for c in step_run_mutations_table.columns]
FIXED = {"id", "run_id", "kind", "created_at_ms", "schema_id"}
NEXT = {k.value: {v.value for v in vs} for k, vs in STEP_RUN_TRANSITIONS.items()}
TERMINAL = {k for k, vs in NEXT.items() if not vs}


def _canonical(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class RawConflict(Exception):
    pass


class RawStepRuns:
    """SqlStepRunRepository's transaction, hand-written against a DB-API connection."""

    def __init__(self, conn: Any, *, placeholder: str, postgres: bool) -> None:
        p, self.conn, self.pg = placeholder, conn, postgres
        self.statements = 0
        self.begin = [] if not postgres else [
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}",
            f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}",
            f"SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_TIMEOUT_MS}"]
        self.lock_run = f"SELECT id, status, version, event_sequence FROM runs WHERE id = {p}" + \
            (" FOR UPDATE" if postgres else "")
        self.select_mutation = f"SELECT {', '.join(LEDGER_COLUMNS)} FROM step_run_mutations WHERE mutation_id = {p}"
        self.select_step = f"SELECT id, record FROM step_runs WHERE id = {p}"
        self.count_steps = f"SELECT count(*) FROM step_runs WHERE run_id = {p}"
        columns = [*MIRROR_COLUMNS, "record"]
        self.insert_step = f"INSERT INTO step_runs ({', '.join(columns)}) VALUES ({', '.join([p] * len(columns))})"
        self.changed = [c for c in columns if c not in FIXED]
        self.cas_step = (f"UPDATE step_runs SET {', '.join(f'{c} = {p}' for c in self.changed)} WHERE id = {p} "
                         f"AND version = {p} AND digest = {p} AND status = {p}")
        self.advance = f"UPDATE runs SET version = {p}, event_sequence = {p} WHERE id = {p} AND version = {p} " \
                       f"AND event_sequence = {p}"
        self.insert_event = (f"INSERT INTO run_events ({', '.join(EVENT_COLUMNS)}) "
                             f"VALUES ({', '.join([p] * len(EVENT_COLUMNS))})")
        self.insert_ledger = (f"INSERT INTO step_run_mutations ({', '.join(LEDGER_COLUMNS)}) "
                              f"VALUES ({', '.join([p] * len(LEDGER_COLUMNS))})")

    def _run(self, statements: list[tuple[str, Any]]) -> list[Any]:
        """The statements in order, pipelined on PostgreSQL; returns each cursor, read after the sync."""
        self.statements += len(statements)
        cursors = [self.conn.cursor() for _ in statements]
        if self.pg:
            with self.conn.pipeline():
                for cur, (sql, args) in zip(cursors, statements):
                    cur.execute(sql, args)
        else:
            for cur, (sql, args) in zip(cursors, statements):
                cur.execute(sql, args)
        return cursors

    def mutate(self, fence: Fence, mutation_id: str, step: dict[str, Any] | None, to: str | None) -> dict[str, Any]:
        at_ms = time.time_ns() // 1_000_000
        try:
            if not self.pg:
                self.statements += 1
                self.conn.execute("BEGIN IMMEDIATE")
            third = (self.count_steps, (fence.run_id,)) if step is None else (self.select_step, (step["id"],))
            cursors = self._run([(sql, None) for sql in self.begin] + [
                (self.lock_run, (fence.run_id,)), (self.select_mutation, (mutation_id,)), third])
            run, mutation, found = (c.fetchone() for c in cursors[-3:])
            for c in cursors:
                c.close()
            if run is None or mutation is not None or (run[2], run[3]) != (fence.version, fence.sequence):
                raise RawConflict("run, replay or fence")
            if run[1] in ("succeeded", "failed", "cancelled", "timed_out"):
                raise RawConflict("terminal run")
            body, writes = self._decide(fence, step, to, found, at_ms)
            digest = hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()
            record = {**body, "digest": digest}
            writes_done = self._write(fence, mutation_id, step, record, at_ms, writes)
            if any(n != 1 for n in writes_done):
                raise RawConflict("CAS")
            self.statements += 1
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        fence.version, fence.sequence = fence.version + 1, fence.sequence + 1
        return record

    def _decide(self, fence: Fence, step: dict[str, Any] | None, to: str | None, found: Any,
                at_ms: int) -> tuple[dict[str, Any], str]:
        if step is None:
            if found[0] >= STEP_RUN_LIMIT:
                raise RawConflict("limit")
            return {"schema": "qinglong/step-run@v1", "id": new_id(), "run_id": fence.run_id,
                    "step_key": f"step {fence.steps}", "kind": "tool", "status": "pending", "version": 0,
                    "attempt_count": 0, "input_ref": None, "output_ref": None, "error_code": None,
                    "created_at_ms": at_ms, "updated_at_ms": at_ms, "started_at_ms": None,
                    "finished_at_ms": None}, "insert"
        current = json.loads(found[1])
        if (current["version"], current["digest"], current["status"]) != (step["version"], step["digest"],
                                                                          step["status"]):
            raise RawConflict("step run CAS expectation")
        assert to is not None
        if to not in NEXT[current["status"]]:
            raise RawConflict("transition")
        body = {k: v for k, v in current.items() if k != "digest"}
        updated = max(at_ms, current["updated_at_ms"])
        body.update(status=to, version=current["version"] + 1, updated_at_ms=updated, error_code=None)
        if to == "running":
            body["attempt_count"] += 1
            body["started_at_ms"] = body["started_at_ms"] or updated
        if to in TERMINAL:
            body["finished_at_ms"] = updated
        return body, "update"

    def _write(self, fence: Fence, mutation_id: str, step: dict[str, Any] | None, record: dict[str, Any],
               at_ms: int, kind: str) -> list[int]:
        text = _canonical(record)
        values = {**{c: record[k] for c, k in STEP_RUN_MIRROR}, "record": text}
        if kind == "insert":
            first = (self.insert_step, tuple(values[c] for c in [*MIRROR_COLUMNS, "record"]))
            payload = {"kind": record["kind"], "to": record["status"]}
        else:
            assert step is not None
            first = (self.cas_step, (*[values[c] for c in self.changed], step["id"], step["version"], step["digest"],
                                     step["status"]))
            payload = {"from": step["status"], "to": record["status"], "attempt_count": record["attempt_count"]}
        payload.update(mutation_id=mutation_id, version=record["version"], digest=record["digest"])
        sequence, event_id = fence.sequence + 1, new_id()
        event_row = (event_id, fence.run_id, sequence,
                     "step_run.created" if kind == "insert" else "step_run.transitioned",
                     f"step-mutation:{mutation_id}", ACTOR.type.value, ACTOR.id, None, record["id"],
                     _canonical(payload), at_ms)
        # The request's digest over the same fields CreateStepRun / TransitionStepRun.request() name.
        fences = {"expected_run_version": fence.version, "expected_event_sequence": fence.sequence}
        request: dict[str, Any] = {"mutation_id": mutation_id, "run_id": fence.run_id, "input_ref": None, **fences}
        if kind == "insert":
            request.update(op="create", step_key=record["step_key"], kind=record["kind"])
        else:
            assert step is not None
            request.update(op="transition", step_run_id=step["id"], to=record["status"], output_ref=None,
                           error_code=None, expected_version=step["version"], expected_digest=step["digest"],
                           expected_status=step["status"])
        ledger = (mutation_id, request["op"], fence.run_id, record["id"],
                  hashlib.sha256(_canonical(request).encode("utf-8")).hexdigest(), text, record["version"],
                  fence.version + 1, sequence, event_id, at_ms)
        cursors = self._run([first, (self.advance, (fence.version + 1, sequence, fence.run_id, fence.version,
                                                    fence.sequence)),
                             (self.insert_event, event_row), (self.insert_ledger, ledger)])
        counts = [c.rowcount for c in cursors[:2]]
        for c in cursors:
            c.close()
        return counts


def raw_lifecycle(raw: RawStepRuns, fence: Fence, lat: list[list[int]], probe: Probe) -> str:
    t0 = probe()
    step = raw.mutate(fence, new_id(), None, None)
    lat[0].append(probe() - t0)
    for i, to in enumerate(("ready", "running", "succeeded"), 1):
        t0 = probe()
        step = raw.mutate(fence, new_id(), step, to)
        lat[i].append(probe() - t0)
    fence.steps += 1
    return str(step["id"])


# --- Stores ------------------------------------------------------------------------------------------------

@dataclass
class Env:
    name: str
    engine: Engine
    svc: StepRunService
    runs: RunService
    raw: RawStepRuns
    info: str
    fences: dict[str, Fence] = field(default_factory=dict)

    def fence(self, impl: str) -> Fence:
        """The impl's current Run, replaced by a fresh one (untimed) once it holds STEP_RUN_LIMIT steps."""
        fence = self.fences.get(impl)
        if fence is None or fence.steps >= STEP_RUN_LIMIT:
            run = create(self.runs)
            fence = self.fences[impl] = Fence(run.id, run.version, run.event_sequence)
        return fence


def step_env(base: bench_run_service.Env) -> Env:
    """The StepRun sides on bench_run_service's fresh, migrated store and its raw driver connection."""
    return Env(base.name, base.engine, StepRunService(SqlStepRunRepository(base.engine), clock=SystemClock()),
               base.svc, RawStepRuns(base.raw_conn, placeholder=base.placeholder, postgres=base.name == "postgres"),
               base.info["store"])


@contextmanager
def sqlite_env() -> Iterator[Env]:
    with bench_run_service.sqlite_env() as base:
        yield step_env(base)


@contextmanager
def postgres_env(url: str) -> Iterator[Env]:
    with bench_run_service.postgres_env(url) as base:
        yield step_env(base)


# --- Measurement, audit, row shapes --------------------------------------------------------------------------

def runner(env: Env, impl: str) -> Callable[[list[list[int]], Probe], str]:
    if impl == IMPLS[0]:
        return lambda lat, probe: service_lifecycle(env.svc, env.fence(impl), lat, probe)
    return lambda lat, probe: raw_lifecycle(env.raw, env.fence(impl), lat, probe)


@dataclass
class Sample:
    lat: list[list[int]] = field(default_factory=lambda: [[], [], [], []])
    block_ns: list[int] = field(default_factory=list)  # transition time per block
    block_n: list[int] = field(default_factory=list)  # transitions per block

    def transitions_ns(self) -> int:
        return sum(sum(x) for x in self.lat[1:])

    @property
    def transition_rate(self) -> float:
        return 3 * len(self.lat[0]) / (self.transitions_ns() / 1e9)

    @property
    def create_rate(self) -> float:
        return len(self.lat[0]) / (sum(self.lat[0]) / 1e9)


def measure(env: Env, n: int, blocks: int, warmup: int) -> dict[str, Sample]:
    runs = {impl: runner(env, impl) for impl in IMPLS}
    scratch: list[list[int]] = [[], [], [], []]
    for _ in range(warmup):
        for run_once in runs.values():
            run_once(scratch, time.perf_counter_ns)
    samples = {impl: Sample() for impl in IMPLS}
    for b, size in enumerate(block_sizes(n, blocks)):
        for impl in (IMPLS if b % 2 == 0 else IMPLS[::-1]):  # ABBA: no fixed first mover
            sample = samples[impl]
            gc.collect()
            before = sample.transitions_ns()
            for _ in range(size):
                runs[impl](sample.lat, time.perf_counter_ns)
            sample.block_ns.append(sample.transitions_ns() - before)
            sample.block_n.append(3 * size)
    return samples


def audit(env: Env) -> tuple[dict[str, list[int]], dict[str, list[int]] | None]:
    """Statements (incl. BEGIN and COMMIT) per mutation of one lifecycle; on PostgreSQL also round trips."""
    counter = [0]
    original = step_runs_module.execute_all

    def counting(conn: Any, statements: list[Any]) -> Any:
        counter[0] += len(statements)
        return original(conn, statements)

    def one(*_: Any) -> None:
        counter[0] += 1

    statements: dict[str, list[int]] = {}
    step_runs_module.execute_all = counting  # type: ignore[assignment]
    # SQLite's BEGIN IMMEDIATE, which the store sends on the driver's connection when a transaction begins
    # (PostgreSQL's BEGIN travels with the first statement and is no statement of its own).
    count_begin = env.name == "sqlite"
    if count_begin:
        event.listen(env.engine, "begin", one)
    event.listen(env.engine, "commit", one)
    try:
        lat: list[list[int]] = [[], [], [], []]
        runner(env, IMPLS[0])(lat, lambda: counter[0])
        statements[IMPLS[0]] = [x[0] for x in lat]
        lat = [[], [], [], []]
        runner(env, IMPLS[1])(lat, lambda: env.raw.statements)
        statements[IMPLS[1]] = [x[0] for x in lat]
    finally:
        step_runs_module.execute_all = original  # type: ignore[assignment]
        if count_begin:
            event.remove(env.engine, "begin", one)
        event.remove(env.engine, "commit", one)
    if env.name != "postgres":
        return statements, None
    with env.engine.connect() as c:
        sa_pgconn = c.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
    trips: dict[str, list[int]] = {}
    with _pg_trace([sa_pgconn, env.raw.conn.pgconn]) as trace:
        offset, total = [0], [0]

        def probe() -> int:
            n, offset[0] = _round_trips(trace, offset[0])
            total[0] += n
            return total[0]

        for impl in IMPLS:
            lat = [[], [], [], []]
            runner(env, impl)(lat, probe)
            trips[impl] = [x[0] for x in lat]
    return statements, trips


def shapes(env: Env) -> list[str]:
    """Differences between the rows each side wrote for one step lifecycle, ids and clocks normalised."""
    ids = {impl: runner(env, impl)([[], [], [], []], time.perf_counter_ns) for impl in IMPLS}
    found = {}
    with env.engine.connect() as conn:
        for impl, step_id in ids.items():
            step = conn.exec_driver_sql(f"SELECT record FROM step_runs WHERE id = '{step_id}'").scalar_one()
            ledger = conn.exec_driver_sql("SELECT op, result_record, step_run_version FROM step_run_mutations "
                                          f"WHERE step_run_id = '{step_id}' ORDER BY event_sequence").all()
            events = conn.exec_driver_sql("SELECT type, actor_type, payload FROM run_events "
                                          f"WHERE step_run_id = '{step_id}' ORDER BY sequence").all()
            found[impl] = [_normal(step)] + [(op, _normal(r), v) for op, r, v in ledger] + \
                [(t, a, _normal(p)) for t, a, p in events]
    a, b = found.values()
    return [f"row {i}: {x!r} vs {y!r}" for i, (x, y) in enumerate(zip(a, b)) if x != y] + \
        ([f"{len(a)} rows vs {len(b)}"] if len(a) != len(b) else [])


def _normal(text: str) -> dict[str, Any]:
    values = json.loads(text)
    return {k: ("<varies>" if k in ("id", "run_id", "digest", "mutation_id", "step_key") or k.endswith("_at_ms")
                and v is not None else v) for k, v in values.items()}


# --- Report ---------------------------------------------------------------------------------------------------

def report(console: Console, env: Env, samples: dict[str, Sample], statements: dict[str, list[int]],
           trips: dict[str, list[int]] | None, diffs: list[str], args: argparse.Namespace) -> float:
    table = Table(title=f"[{env.name}] {env.info}: {args.steps} step lifecycles per side ({3 * args.steps} "
                        f"transitions), {args.blocks} ABBA blocks, {args.warmup} warm-up")
    for column in ("implementation", "transitions/s", "creates/s", *[f"{k} p50/p99 ms" for k in KINDS],
                   "stmts per mutation", "round trips per mutation"):
        table.add_column(column, justify="right")
    for impl in IMPLS:
        s = samples[impl]
        table.add_row(impl, f"{s.transition_rate:,.1f}", f"{s.create_rate:,.1f}",
                      *[f"{pct(s.lat[i], 50):.3f}/{pct(s.lat[i], 99):.3f}" for i in range(4)],
                      " ".join(map(str, statements[impl])), " ".join(map(str, trips[impl])) if trips else "-")
    console.print(table)
    a, b = samples[IMPLS[0]], samples[IMPLS[1]]
    ratio = a.transition_rate / b.transition_rate
    per_block = [(na / ta) / (nb / tb) for na, ta, nb, tb in zip(a.block_n, a.block_ns, b.block_n, b.block_ns)]
    console.print(f"[{env.name}] ratio StepRunService / raw driver, transitions/s: {ratio:.1%} "
                  f"(per block {min(per_block):.1%}–{max(per_block):.1%}; creates {a.create_rate / b.create_rate:.1%})"
                  f" — floor {FLOOR:.0%} {'met' if ratio >= FLOOR else 'NOT met'}, aim {AIM:.0%} "
                  f"{'met' if ratio >= AIM else 'not met'}")
    console.print(f"[{env.name}] row shapes: " + ("identical" if not diffs else "; ".join(diffs)))
    return ratio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.bench_step_runs", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="step lifecycles per side per backend (default 300)")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg-url", default=DEFAULT_PG_URL, help=f"SQLAlchemy URL (default {DEFAULT_PG_URL})")
    ap.add_argument("--blocks", type=int, default=10, help="interleaved blocks per side (default 10)")
    ap.add_argument("--warmup", type=int, default=30, help="warm-up lifecycles per side (default 30)")
    args = ap.parse_args(argv)
    console = Console(width=max(Console().width, 200), markup=False, highlight=False)
    console.print(f"bench_step_runs: Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
                  f"psycopg {psycopg.__version__} (libpq {pq.version()}, {pq.__impl__}), sqlite "
                  f"{sqlite3.sqlite_version}, {platform.machine()}")
    failed = False
    for name in (["sqlite", "postgres"] if args.backend == "both" else [args.backend]):
        try:
            with (sqlite_env() if name == "sqlite" else postgres_env(args.pg_url)) as env:
                samples = measure(env, args.steps, args.blocks, args.warmup)
                statements, trips = audit(env)
                report(console, env, samples, statements, trips, shapes(env), args)
        except (sqlalchemy.exc.SQLAlchemyError, psycopg.Error, OSError) as exc:
            failed = True
            console.print(f"[{name}] could not run: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    console.print(f"floor: StepRunService ≥ {FLOOR:.0%} of the raw-driver rate; aim: ≥ {AIM:.0%}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
