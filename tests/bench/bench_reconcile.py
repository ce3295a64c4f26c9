"""Benchmark: one Reconciler pass against a large 2.x install and its shadow store.

    python -m tests.bench.bench_reconcile [--backend sqlite|postgres|both] [--sizes 10000,100000]
                                          [--crons 10000,1000] [--pg-url URL] [--seed S] [--profile] [--keep]

For each number of crons C in --crons and each size N (2.x RunningInstances rows), so N / C instances per cron:

1. A fresh 2.x data dir (create_legacy_data_dir) gets the crons and N instances bulk-inserted with sqlite3
   executemany in 2.x's on-disk format (legacy_adapters.schema). The throwaway file is written with
   synchronous=OFF / journal_mode=OFF. Instances begin on the hour of their cron's "0 * * * *" schedule
   (a few off-schedule, i.e. origin "script") within the last 6 days; ~1% still running (their Crontabs
   row says running with that pid, as 2.x would), a few stopped, the rest finished (status 1, or 3 with a
   non-zero exit code).
2. A fresh bridge store (a temp SQLite file, or a new PostgreSQL schema through make_engine(...,
   pg_search_path=...), dropped afterwards) gets the matching shadow Runs bulk-inserted with SQLAlchemy Core
   executemany: runs / run_attempts / run_events / task_snapshots rows with the exact columns and values
   ShadowRecorder writes for a start callback, then an end callback (or 2.x's stop through the bridge).
   Before any timing, a row-shape check records four executions through the real ShadowRecorder and
   through this generator and compares every row and column (ids normalised).
   Planned disagreements: ~0.5% instances without a Run (missing), ~0.5% Runs without an instance (orphan),
   0.3% exit-code-only and 0.2% status+exit-code disagreements, 0.1% finish times off by 30 s, and half of
   the stopped instances still running in the shadow (the pass cancels them).
3. A child process (a fresh interpreter, so its peak RSS belongs to the pass alone) wires the Reconciler
   as tests/integration/test_reconciler.py does and times one run_once(): wall and CPU time, VmRSS before
   the pass, the peak VmRSS sampled every 10 ms by a background thread (cross-checked with VmHWM after
   resetting it through /proc/self/clear_refs), the pass stats, the mismatches found per kind against the
   planned ones, and an exclusive-time breakdown of where the pass spent its time.

Prints a table per backend and number of crons, the ratio time(largest)/time(smallest) at that number of crons,
and the target line. With 10,000 crons, 10,000 vs 100,000 instances is 1 vs 10 instances per cron, so the ratio
is mostly the fixed cost of each cron; with 1,000 crons it is 10 vs 100 per cron, and the ratio shows how the
pass grows per instance. From all the passes of a backend, a least-squares fit time = a + b * crons + c *
instances then gives the cost of one more cron and of one more instance. This is a benchmark, not a test: it
asserts nothing about timing and exits 0 after printing (1 if a backend could not be set up or a pass failed).
--profile runs the measured pass under cProfile (times then inflated).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import io
import json
import os
import pstats
import random
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, func, insert, select, text

from bridge.domain.model import Origin
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.ports import StaticModes, TaskSnapshot
from bridge.service.shadow import ShadowRecorder
from bridge.storage.engine import StoreDeadlines, make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.schema import (
    mismatches_table,
    run_attempts_table,
    run_events_table,
    runs_table,
    task_snapshots_table,
)
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.identity import task_id, task_revision
from legacy_adapters.origin import infer_start_origin
from legacy_adapters.reader import LegacyReader
from legacy_adapters.schema import CrontabStatus, InstanceStatus, format_js_date_string, format_updated_at
from legacy_adapters.testing.datadir import create_legacy_data_dir, uniq_path
from tests.bench.children import mib, run_child, scratch_dir
from tests.bench.stores import fresh_store

DEFAULT_PG_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TARGET_RATIO = 12.0
TARGET_GROWTH_MIB = 50.0
TARGET_LINE = "target: near-linear, ratio ≤ 12, and peak RSS growth under 50 MiB"
SCHEDULE = "0 * * * *"
UTC = ZoneInfo("UTC")
ALL_ORIGINS = frozenset(o.value for o in Origin)
SETTINGS = {"grace_s": 0, "tolerance_s": 2, "lookback_s": 7 * 86_400, "batch_size": 500}
HOURS_BACK = 142  # instances begin on one of the last 142 whole hours (~6 days), all past the grace window

# Shares of N. Disjoint; "finished" is whatever is left.
RUNNING_SHARE = 0.01
STOPPED_SHARE = 0.002  # half recorded as stopped through the bridge, half stopped around it
MISSING_SHARE = 0.005
ORPHAN_SHARE = 0.005
EXIT_ONLY_SHARE = 0.003  # 2.x exit 2 / shadow exit 1, both failed: exit_code
STATUS_EXIT_SHARE = 0.002  # 2.x failed exit 1 / shadow succeeded exit 0: terminal_status + exit_code
FINISH_DRIFT_SHARE = 0.001  # the shadow finished 30 s later: finish_time
FAILED_SHARE = 0.08  # ordinary failures, both sides agree
OFF_SCHEDULE_SHARE = 0.03  # began away from the schedule: origin script

# What the shadow holds for an execution.
S_SUCCEEDED, S_FAILED, S_RUNNING, S_CANCELLED = "succeeded", "failed", "running", "cancelled"


# ---------------------------------------------------------------------------------------------------
# The plan: one Execution per 2.x instance and per orphan Run
# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Execution:
    cron_id: int
    pid: int
    log_path: str
    begin_s: int
    legacy_status: int | None  # InstanceStatus, or None: no 2.x row (orphan)
    legacy_exit: int | None
    finished_s: int | None
    duration_s: int | None
    shadow: str | None  # S_*, or None: no Run (missing)
    shadow_exit: int | None
    t0_ms: int  # the bridge received the start callback
    t1_ms: int | None  # ... the end callback (or 2.x's stop)
    expect: tuple[str, ...] = ()  # mismatch kinds this execution should produce
    cancels: bool = False  # the pass should cancel its Run

    @property
    def log_ref(self) -> str | None:
        return log_path_digest(self.log_path)

    @property
    def key(self) -> str:
        return f"legacy:{self.cron_id}:{self.pid}:{self.log_ref}:{self.begin_s * 1000}"


@dataclass
class Plan:
    crons: int
    executions: list[Execution]  # ordered by begin time (2.x's instance ids follow it)
    running_cron: dict[int, Execution]  # cron id -> its running instance

    @property
    def instances(self) -> list[Execution]:
        return [x for x in self.executions if x.legacy_status is not None]

    def expected(self) -> Counter[str]:
        return Counter(kind for x in self.executions for kind in x.expect)


def make_plan(n: int, crons: int, now_s: int, seed: int) -> Plan:
    rng = random.Random(seed)
    if n > crons * HOURS_BACK:
        raise SystemExit(f"--sizes: at most {crons * HOURS_BACK} instances fit {crons} hourly crons in 6 days")
    base_hour = now_s - now_s % 3600 - 3600  # the last whole hour at least an hour ago
    per_cron = [n // crons + (1 if c < n % crons else 0) for c in range(crons)]
    orphans = round(n * ORPHAN_SHARE)
    pids = iter(rng.sample(range(300, 4_194_304), n + orphans))

    def begin_of(hour: int) -> int:
        offset = rng.randint(1, 2) if rng.random() >= OFF_SCHEDULE_SHARE else rng.randint(600, 3000)
        return base_hour - hour * 3600 + offset

    def log_path(cron_id: int, begin: int) -> str:
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(begin))
        return f"{uniq_path(f'task bench_{cron_id}.sh', cron_id)}/{stamp}-{rng.randint(0, 999):03d}.log"

    executions: list[Execution] = []
    latest: dict[int, Execution] = {}
    for c, count in enumerate(per_cron):
        cron_id = c + 1
        for hour in rng.sample(range(1, HOURS_BACK + 1), count):
            begin = begin_of(hour)
            x = Execution(cron_id, next(pids), log_path(cron_id, begin), begin, None, None, None, None, None, None,
                          begin * 1000 + rng.randint(20, 1200), None)
            executions.append(x)
            if cron_id not in latest or begin > latest[cron_id].begin_s:
                latest[cron_id] = x
    rng.shuffle(executions)

    # ~1% running: the newest instance of distinct crons (2.x shows those crons running with that pid).
    running_crons = rng.sample(sorted(latest), min(len(latest), round(n * RUNNING_SHARE)))
    running = {latest[c].pid for c in running_crons}
    rest = [x for x in executions if x.pid not in running]
    cursor = 0

    def take(share: float) -> list[Execution]:
        nonlocal cursor
        count = round(n * share)
        chosen = rest[cursor:cursor + count]
        cursor += count
        return chosen

    groups = {name: take(share) for name, share in (
        ("stopped", STOPPED_SHARE), ("missing", MISSING_SHARE), ("exit_only", EXIT_ONLY_SHARE),
        ("status_exit", STATUS_EXIT_SHARE), ("finish_drift", FINISH_DRIFT_SHARE))}
    group_of = {x.pid: name for name, xs in groups.items() for x in xs}
    stopped_via_bridge = {x.pid for x in groups["stopped"][::2]}

    for x in executions:
        group = "running" if x.pid in running else group_of.get(x.pid, "finished")
        duration = rng.randint(1, 900)
        finished = x.begin_s + duration
        end_ms = finished * 1000 + rng.randint(0, 899)  # the bridge gets the callback before 2.x's now()
        if group == "running":
            x.legacy_status, x.shadow = InstanceStatus.RUNNING, S_RUNNING
        elif group == "stopped":
            x.legacy_status, x.finished_s = InstanceStatus.STOPPED, finished
            if x.pid in stopped_via_bridge:
                x.shadow, x.t1_ms = S_CANCELLED, end_ms
            else:
                x.shadow, x.cancels = S_RUNNING, True
        else:
            failed = rng.random() < FAILED_SHARE
            code = rng.choice((1, 2, 127)) if failed else 0
            x.legacy_exit, x.shadow_exit = code, code
            if group == "exit_only":
                x.legacy_exit, x.shadow_exit, x.expect = 2, 1, ("exit_code",)
            elif group == "status_exit":
                x.legacy_exit, x.shadow_exit, x.expect = 1, 0, ("exit_code", "terminal_status")
            x.legacy_status = InstanceStatus.ERROR if x.legacy_exit else InstanceStatus.FINISHED
            x.shadow = S_FAILED if x.shadow_exit else S_SUCCEEDED
            x.finished_s, x.duration_s, x.t1_ms = finished, duration, end_ms
            if group == "finish_drift":
                x.t1_ms, x.expect = end_ms + 30_000, ("finish_time",)
            elif group == "missing":
                x.shadow, x.expect = None, ("missing",)

    for _ in range(orphans):  # a Run whose execution 2.x has no row for
        cron_id = rng.randint(1, crons)
        begin = begin_of(rng.randint(1, HOURS_BACK))
        duration = rng.randint(1, 900)
        executions.append(Execution(cron_id, next(pids), log_path(cron_id, begin), begin, None, None, None,
                                    duration, S_SUCCEEDED, 0, begin * 1000 + rng.randint(20, 1200),
                                    (begin + duration) * 1000 + rng.randint(0, 899), ("orphan",)))
    executions.sort(key=lambda x: (x.begin_s, x.t0_ms))
    return Plan(crons, executions, {latest[c].cron_id: latest[c] for c in running_crons})


# ---------------------------------------------------------------------------------------------------
# 2.x side: Crontabs and RunningInstances, as 2.x writes them
# ---------------------------------------------------------------------------------------------------


def write_legacy(database_path: Path, plan: Plan, now_s: int) -> None:
    last: dict[int, Execution] = {}
    for x in plan.instances:
        if x.cron_id not in last or x.begin_s > last[x.cron_id].begin_s:
            last[x.cron_id] = x
    created = format_updated_at((now_s - 30 * 86_400) * 1000)
    stamp = format_js_date_string((now_s - 30 * 86_400) * 1000)
    crons = []
    for cron_id in range(1, plan.crons + 1):
        command = f"task bench_{cron_id}.sh"
        x = last.get(cron_id)
        running = plan.running_cron.get(cron_id)
        # After an end callback 2.x keeps pid / log_path / last_* and sets the cron idle; while one runs, 0.
        status = CrontabStatus.RUNNING if running else CrontabStatus.IDLE
        crons.append((cron_id, f"bench {cron_id}", command, SCHEDULE, stamp, 0, int(status), 0,
                      x.pid if x else None, 0, 0, x.log_path if x else None,
                      x.duration_s if x and not running else None, x.begin_s if x else None,
                      uniq_path(command, cron_id), created,
                      format_updated_at(((x.finished_s or x.begin_s) if x else now_s - 30 * 86_400) * 1000)))
    instances = []
    for x in plan.instances:
        ended = x.finished_s if x.finished_s is not None else x.begin_s
        instances.append((x.cron_id, x.pid, x.log_path, x.begin_s, x.finished_s, int(x.legacy_status or 0),
                          x.legacy_exit, format_updated_at(x.begin_s * 1000), format_updated_at(ended * 1000)))
    with closing(sqlite3.connect(database_path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO Crontabs (id, name, command, schedule, timestamp, saved, status, isSystem, pid, "
            "isDisabled, isPinned, log_path, last_running_time, last_execution_time, log_name, createdAt, "
            "updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", crons)
        conn.executemany(
            "INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, finished_at, status, exit_code, "
            "createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", instances)
        conn.execute("COMMIT")


# ---------------------------------------------------------------------------------------------------
# Shadow side: the rows ShadowRecorder writes (checked against it by verify_row_shape)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    origin: str
    evidence: str
    revision: str


def uuid7_at(ms: int, rng: random.Random) -> str:
    """A UUIDv7 string for a given ms, as bridge.service.ids.new_id would have made at that moment."""
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | rng.getrandbits(12) << 64 | 0b10 << 62 | rng.getrandbits(62)
    return str(uuid.UUID(int=value))


def _payload(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def shadow_rows(x: Execution, ctx: Context, new_id: Callable[[int], str]) -> tuple[dict[str, Any], dict[str, Any],
                                                                                    list[dict[str, Any]]]:
    """runs / run_attempts / run_events rows after record_start (+ record_end or record_stop)."""
    assert x.shadow is not None
    run_id, t0, started = new_id(x.t0_ms), x.t0_ms, x.begin_s * 1000
    log_ref = x.log_ref
    run: dict[str, Any] = {c.name: None for c in runs_table.columns}
    run.update(
        id=run_id, project_id="default", task_id=task_id(x.cron_id), task_revision=ctx.revision,
        legacy_cron_id=x.cron_id, trigger_type="legacy_callback", status="running", version=0, event_sequence=7,
        priority=0, idempotency_key=x.key, created_at_ms=t0, queued_at_ms=t0, started_at_ms=started,
        origin=ctx.origin, origin_evidence=ctx.evidence, mode="shadow", owner="legacy", legacy_pid=x.pid,
        log_ref=log_ref, synthesized=False, received_at_ms=t0)
    attempt_id = new_id(t0)
    attempt: dict[str, Any] = {c.name: None for c in run_attempts_table.columns}
    attempt.update(
        id=attempt_id, run_id=run_id, attempt=1, status="running", executor_type="legacy_shell", pid=x.pid,
        log_artifact_id=log_ref, callback_sequence=2, created_at_ms=t0, started_at_ms=started, synthesized=False)
    events: list[dict[str, Any]] = []

    def event(type_: str, payload: dict[str, Any], at: int, attempt_ref: str | None = None,
              dedupe: str | None = None) -> None:
        events.append({"id": new_id(at), "run_id": run_id, "sequence": len(events) + 1, "type": type_,
                       "dedupe_key": dedupe, "actor_type": "legacy_shell", "actor_id": None,
                       "attempt_id": attempt_ref, "step_run_id": None, "payload": _payload(payload),
                       "created_at_ms": at})

    event("run.created", {"origin": ctx.origin, "evidence": ctx.evidence}, t0)
    event("run.queued", {"from": "created", "to": "queued"}, t0)
    event("run.dispatching", {"from": "queued", "to": "dispatching"}, t0)
    event("attempt.claimed", {"attempt": 1, "pid": x.pid, "log_ref": log_ref}, t0, attempt_id)
    event("attempt.starting", {"from": "claimed", "to": "starting"}, t0, attempt_id)
    event("attempt.running", {"from": "starting", "to": "running"}, t0, attempt_id)
    event("run.running", {"from": "dispatching", "to": "running"}, t0)
    t1 = x.t1_ms
    if x.shadow in (S_SUCCEEDED, S_FAILED):
        assert t1 is not None
        to = x.shadow
        error = "process_exit_error" if to == S_FAILED else None
        end_key = f"legacy-end:{x.pid}:{log_ref}:{x.shadow_exit}:{started}"
        exit_payload: dict[str, Any] = {"received_at_ms": t1, "exit_code": x.shadow_exit}
        duration_ms = x.duration_s * 1000 if x.duration_s is not None else None
        if duration_ms is not None:
            exit_payload["duration_ms"] = duration_ms
        attempt.update(status=to, callback_sequence=3, finished_at_ms=t1, exit_code=x.shadow_exit, error_code=error)
        run.update(status=to, version=1, event_sequence=9, finished_at_ms=t1, duration_ms=duration_ms,
                   error_code=error)
        event(f"attempt.{to}", {"from": "running", "to": to, **exit_payload}, t1, attempt_id, end_key)
        event(f"run.{to}", {"from": "running", "to": to, **exit_payload}, t1, None, f"{end_key}#2")
    elif x.shadow == S_CANCELLED:  # record_stop: 2.x's stop went through the bridge
        assert t1 is not None
        key, reason = f"legacy-stop:{t1}", {"cancel_reason": "legacy_stop"}
        attempt.update(status="cancelled", callback_sequence=3, finished_at_ms=t1, error_code="cancelled_by_user")
        run.update(status="cancelled", version=1, event_sequence=10, finished_at_ms=t1,
                   cancel_requested_at_ms=t1, cancel_reason="legacy_stop", error_code="cancelled_by_user")
        event("run.cancel_requested", reason, t1, None, key)
        event("attempt.cancelled", {"from": "running", "to": "cancelled", **reason}, t1, attempt_id, f"{key}#2")
        event("run.cancelled", {"from": "running", "to": "cancelled", **reason}, t1, None, f"{key}#3")
    return run, attempt, events


def contexts_for(plan: Plan, database_path: Path) -> tuple[dict[int, TaskSnapshot], Callable[[Execution], Context]]:
    """Each execution's context (and each cron's task snapshot) as the interceptor derives them."""
    crons = {c.id: c for c in LegacyReader(database_path).iter_crons()}
    revisions = {cron_id: task_revision(cron) for cron_id, cron in crons.items()}
    decided: dict[int, tuple[str, str]] = {}

    def context(x: Execution) -> Context:
        # The Crontabs row before a start callback is idle, so infer_start_origin decides by schedule match;
        # every cron has the same schedule, so the decision depends only on the begin second within the hour.
        found = decided.get(x.begin_s % 3600)
        if found is None:
            cron = dataclasses.replace(crons[x.cron_id], status=int(CrontabStatus.IDLE), pid=None, log_path=None)
            decision = infer_start_origin(cron, x.pid, x.log_path, x.begin_s, "system", UTC)
            found = decided[x.begin_s % 3600] = (decision.origin, decision.evidence)
        return Context(found[0], found[1], revisions[x.cron_id])

    snapshots: dict[int, TaskSnapshot] = {}
    for x in plan.executions:
        if x.shadow is not None and x.cron_id not in snapshots:
            cron = crons[x.cron_id]
            snapshots[x.cron_id] = TaskSnapshot(
                task_revision=revisions[x.cron_id], task_id=task_id(cron.id), legacy_cron_id=cron.id, name=cron.name,
                command=cron.command, schedule=cron.schedule, work_dir=cron.work_dir, log_name=cron.log_name,
                created_at_ms=x.t0_ms)
    return snapshots, context


def write_shadow(engine: Engine, plan: Plan, database_path: Path, seed: int, batch: int = 20_000) -> int:
    """Bulk-insert the shadow rows in executemany batches; returns the number of event rows."""
    rng = random.Random(seed + 1)
    snapshots, context = contexts_for(plan, database_path)
    with engine.begin() as conn:
        conn.execute(insert(task_snapshots_table), [dataclasses.asdict(s) for s in snapshots.values()])
    runs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    total_events = 0

    def flush() -> None:
        with engine.begin() as conn:
            conn.execute(insert(runs_table), runs)
            conn.execute(insert(run_attempts_table), attempts)
            conn.execute(insert(run_events_table), events)
        runs.clear()
        attempts.clear()
        events.clear()

    for x in plan.executions:
        if x.shadow is None:
            continue
        run, attempt, evs = shadow_rows(x, context(x), lambda ms: uuid7_at(ms, rng))
        runs.append(run)
        attempts.append(attempt)
        events.extend(evs)
        total_events += len(evs)
        if len(runs) >= batch:
            flush()
    if runs:
        flush()
    return total_events


class _Clock:
    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


def _dump(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every shadow row, ids replaced by their role so two stores can be compared."""
    with engine.connect() as conn:
        runs = [dict(r._mapping) for r in conn.execute(select(runs_table))]
        attempts = [dict(r._mapping) for r in conn.execute(select(run_attempts_table))]
        events = [dict(r._mapping) for r in conn.execute(select(run_events_table))]
        snaps = [dict(r._mapping) for r in conn.execute(select(task_snapshots_table))]
    name = {r["id"]: f"run<{r['idempotency_key']}>" for r in runs}
    name.update({a["id"]: f"attempt<{name[a['run_id']]}#{a['attempt']}>" for a in attempts})
    name.update({e["id"]: f"event<{name[e['run_id']]}#{e['sequence']}>" for e in events})
    for row in (*runs, *attempts, *events):
        for col in ("id", "run_id", "attempt_id"):
            if row.get(col) is not None:
                row[col] = name[row[col]]
    return {t: sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
            for t, rows in (("runs", runs), ("run_attempts", attempts), ("run_events", events),
                            ("task_snapshots", snaps))}


def verify_row_shape(tmp: Path) -> list[str]:
    """Record four executions through ShadowRecorder and through shadow_rows; list every differing column."""
    from bridge.service.run_service import RunService
    from bridge.storage.unit_of_work import SqlUnitOfWork

    now_s = int(time.time())
    plan = make_plan(40, 10, now_s, seed=7)
    by_cron: dict[int, Execution] = {}
    for x in plan.executions:
        if x.legacy_status is not None and x.t1_ms is not None:
            by_cron.setdefault(x.cron_id, x)
    a, b, c, d = list(by_cron.values())[:4]
    chosen = [
        dataclasses.replace(a, legacy_status=InstanceStatus.FINISHED, legacy_exit=0, shadow=S_SUCCEEDED,
                            shadow_exit=0, expect=()),
        dataclasses.replace(b, legacy_status=InstanceStatus.ERROR, legacy_exit=3, shadow=S_FAILED, shadow_exit=3,
                            expect=()),
        dataclasses.replace(c, legacy_status=InstanceStatus.RUNNING, legacy_exit=None, finished_s=None,
                            duration_s=None, shadow=S_RUNNING, shadow_exit=None, t1_ms=None, expect=()),
        dataclasses.replace(d, legacy_status=InstanceStatus.STOPPED, legacy_exit=None, duration_s=None,
                            shadow=S_CANCELLED, shadow_exit=None, expect=()),
    ]
    small = Plan(plan.crons, chosen, {})
    data = create_legacy_data_dir(tmp / "verify-ql")
    write_legacy(data.database_path, small, now_s)
    snapshots, context = contexts_for(small, data.database_path)

    engines = []
    for name in ("recorder", "bulk"):
        engine = make_engine(f"sqlite:///{tmp / f'verify-{name}.sqlite'}")
        upgrade(engine)
        engines.append(engine)
    clock = _Clock()
    recorder = ShadowRecorder(RunService(SqlUnitOfWork(engines[0]), clock=clock))  # type: ignore[arg-type]
    for x in chosen:
        ctx = context(x)
        execution_ctx = ExecutionContext(ctx.origin, ctx.evidence, ctx.revision, snapshots[x.cron_id])
        clock.ms = x.t0_ms
        recorder.record_start(CallbackFacts(x.cron_id, x.pid, x.log_ref, x.begin_s * 1000, None, None, x.t0_ms),
                              execution_ctx)
        assert x.t1_ms is not None or x.shadow == S_RUNNING
        clock.ms = x.t1_ms or 0
        if x.shadow in (S_SUCCEEDED, S_FAILED):
            duration = x.duration_s * 1000 if x.duration_s is not None else None
            recorder.record_end(CallbackFacts(x.cron_id, x.pid, x.log_ref, x.begin_s * 1000, duration, x.shadow_exit,
                                              x.t1_ms or 0), lambda ctx=execution_ctx: ctx)
        elif x.shadow == S_CANCELLED:
            recorder.record_stop(x.cron_id, x.t1_ms or 0)
    rng = random.Random(1)
    with engines[1].begin() as conn:
        conn.execute(insert(task_snapshots_table), [dataclasses.asdict(snapshots[x.cron_id]) for x in chosen])
        for x in chosen:
            run, attempt, events = shadow_rows(x, context(x), lambda ms: uuid7_at(ms, rng))
            conn.execute(insert(runs_table), [run])
            conn.execute(insert(run_attempts_table), [attempt])
            conn.execute(insert(run_events_table), events)
    want, got = _dump(engines[0]), _dump(engines[1])
    for engine in engines:
        engine.dispose()
    problems = []
    for table in want:
        if len(want[table]) != len(got[table]):
            problems.append(f"{table}: {len(want[table])} rows via ShadowRecorder, {len(got[table])} bulk")
            continue
        for a, b in zip(want[table], got[table]):
            for col in sorted(set(a) | set(b)):
                if a.get(col) != b.get(col):
                    problems.append(f"{table}.{col}: recorder {a.get(col)!r} != bulk {b.get(col)!r}")
    return problems if problems else [f"identical (succeeded, failed, running, cancelled: "
                                      f"{sum(len(v) for v in want.values())} rows compared column by column)"]


# ---------------------------------------------------------------------------------------------------
# Child: one measured pass in a fresh interpreter
# ---------------------------------------------------------------------------------------------------


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _status_kib(field: str) -> int | None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


class RssSampler(threading.Thread):
    def __init__(self, interval_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.peak_kib = _rss_kib()
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.peak_kib = max(self.peak_kib, _rss_kib())
            self.samples += 1

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        self.peak_kib = max(self.peak_kib, _rss_kib())
        return self.peak_kib


class Breakdown:
    """Exclusive wall time per wrapped function (nested wrapped calls are subtracted from their caller)."""

    def __init__(self) -> None:
        self.own: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._stack: list[float] = []

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = self._stack.pop()
                self.own[label] += elapsed - nested
                self.calls[label] += 1
                if self._stack:
                    self._stack[-1] += elapsed
        return timed


def child_main(spec: dict[str, Any]) -> None:
    import bridge.jobs.reconcile as reconciler_module
    from bridge.jobs.reconcile import ReconcileSettings
    from bridge.storage.reconcile_queries import SqlReconcileStore
    from tests.support import wiring

    engine = make_engine(spec["url"], pg_search_path=spec.get("schema"))
    bridge = wiring.store_on(engine)
    store, runs, reader = SqlReconcileStore(engine), bridge.runs, LegacyReader(spec["legacy_db"])
    reconciler = wiring.reconciler(wiring.legacy_settings(spec["legacy_root"]), bridge, StaticModes(ALL_ORIGINS),
                                   reader=reader, reconcile_store=store)
    reconciler._settings = ReconcileSettings(**SETTINGS)  # noqa: SLF001 - the bench's own, batch size included
    times = Breakdown()
    if spec.get("breakdown", True):
        for name in ("runs_by_keys", "mark_seen", "unseen_runs", "duplicate_groups", "crons_with_runs",
                     "active_by_cron", "open_pass", "close_pass", "resolve_unseen"):
            setattr(store, name, times.wrap(f"store.{name}", getattr(store, name)))
        reader._fetch = times.wrap("2.x reads (LegacyReader._fetch)", reader._fetch)  # type: ignore[method-assign]
        runs.transaction = times.wrap("mismatch/cancel writes (RunService.transaction)", runs.transaction)  # type: ignore[method-assign]
        runs.change = times.wrap("mismatch events (RunService.change)", runs.change)  # type: ignore[method-assign]
        for name in ("instance_execution_key", "compare_ended", "compare_running", "compare_cron",
                     "infer_scheduled_origin"):
            setattr(reconciler_module, name, times.wrap(f"{name} (rules)", getattr(reconciler_module, name)))
    failure: list[str] = []
    inner_pass = reconciler._pass

    def traced_pass(*args: Any) -> Any:  # the reconciler keeps only the error code of a failed pass
        try:
            return inner_pass(*args)
        except Exception:
            failure.append(traceback.format_exc(limit=12))
            raise

    reconciler._pass = traced_pass  # type: ignore[method-assign]
    with engine.connect() as conn:  # open one pooled connection as a running bridge would have
        conn.execute(text("select 1"))
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        hwm_reset = True
    except OSError:
        hwm_reset = False
    rss_before = _rss_kib()
    sampler = RssSampler()
    sampler.start()
    profiler = cProfile.Profile() if spec.get("profile") else None
    cpu0, t0 = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    result = reconciler.run_once()
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = sampler.stop()
    hwm = _status_kib("VmHWM") if hwm_reset else None
    rss_after = _rss_kib()
    open_kinds = Counter(m["kind"] for m in store.open_mismatches())
    with engine.connect() as conn:
        marked = conn.execute(select(func.count()).select_from(run_events_table)
                              .where(run_events_table.c.type == "run.legacy_projection_mismatch")).scalar()
        cancelled = conn.execute(select(func.count()).select_from(run_events_table)
                                 .where(run_events_table.c.type == "run.cancelled",
                                        run_events_table.c.actor_type == "reconciler")).scalar()
        total_mismatches = conn.execute(select(func.count()).select_from(mismatches_table)).scalar()
    engine.dispose()
    out = {"result": result.result, "reason": result.reason, "stats": result.stats, "wall_s": wall, "cpu_s": cpu,
           "rss_before_kib": rss_before, "peak_kib": peak, "hwm_kib": hwm, "rss_after_kib": rss_after,
           "samples": sampler.samples, "mismatches": dict(open_kinds), "mismatch_rows": total_mismatches,
           "traceback": failure[0] if failure else None, "marked_events": marked, "reconciler_cancels": cancelled,
           "loadavg": os.getloadavg()[0],
           "breakdown": {k: [v, times.calls[k]] for k, v in times.own.items()}}
    if profiler:
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats("reconciler|reconcile_queries|reader|projections", 30)
        out["profile"] = buf.getvalue()
    print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------------
# Parent: data generation, stores, children, report
# ---------------------------------------------------------------------------------------------------


def bridge_store(backend: str, tmp: Path, pg_url: str) -> contextlib.AbstractContextManager[tuple[str, str | None]]:
    """A fresh, upgraded store: (url, schema)."""
    return fresh_store(backend, tmp, pg_url, "bridge")


def measure(backend: str, n: int, crons: int, pg_url: str, seed: int, profile: bool, keep: bool) -> dict[str, Any]:
    with scratch_dir(f"bench-reconcile-{backend}-{n}-", keep) as tmp:
        gen0 = time.perf_counter()
        now_s = int(time.time())
        plan = make_plan(n, crons, now_s, seed)
        data = create_legacy_data_dir(tmp / "ql")
        write_legacy(data.database_path, plan, now_s)
        legacy_s = time.perf_counter() - gen0
        with bridge_store(backend, tmp, pg_url) as (url, schema):
            shadow0 = time.perf_counter()
            engine = make_engine(url, pg_search_path=schema, deadlines=StoreDeadlines(statement_ms=600_000))
            events = write_shadow(engine, plan, data.database_path, seed)
            if backend == "postgres":  # what autovacuum would have done on a store that grew to this size
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text("ANALYZE"))
            engine.dispose()
            if backend == "sqlite":  # a store at rest: the bulk load's WAL folded into the main file
                with closing(sqlite3.connect(tmp / "bridge.sqlite", isolation_level=None)) as raw:
                    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shadow_s = time.perf_counter() - shadow0
            spec = {"url": url, "schema": schema, "legacy_db": str(data.database_path),
                    "legacy_root": str(data.root), "profile": profile}
            result = run_child("tests.bench.bench_reconcile", spec, timeout_s=3600)
        result.update(size=n, instances_planned=len(plan.instances), runs_planned=sum(
            1 for x in plan.executions if x.shadow is not None), events=events, legacy_s=legacy_s, shadow_s=shadow_s,
            expected=dict(plan.expected()), expected_cancels=sum(1 for x in plan.executions if x.cancels))
        return result


def report(backend: str, results: list[dict[str, Any]], crons: int) -> bool:
    print(f"\n== {backend}: one Reconciler.run_once() pass, {crons} crons, batch_size {SETTINGS['batch_size']}, "
          f"grace {SETTINGS['grace_s']} s, lookback {SETTINGS['lookback_s'] // 86400} d ==")
    head = (f"{'size':>8} {'per cron':>8} {'wall s':>8} {'cpu s':>7} {'inst/s':>8} {'RSS before':>10} "
            f"{'peak RSS':>9} {'growth MiB':>10} {'HWM MiB':>8} {'mismatches':>10} {'expected':>8} {'cancelled':>9} "
            f"{'result':>6}")
    print(head)
    print("-" * len(head))
    ok = True
    for r in results:
        found = sum(r["mismatches"].values())
        expected = sum(r["expected"].values())
        inst = r["stats"].get("instances", 0)
        growth = (r["peak_kib"] - r["rss_before_kib"]) / 1024
        print(f"{r['size']:>8} {r['size'] / crons:>8.0f} {r['wall_s']:>8.2f} {r['cpu_s']:>7.2f} "
              f"{inst / r['wall_s']:>8.0f} {mib(r['rss_before_kib']):>10} {mib(r['peak_kib']):>9} {growth:>10.1f} "
              f"{mib(r['hwm_kib']):>8} {found:>10} {expected:>8} {r['stats'].get('cancelled', 0):>9} "
              f"{r['result']:>6}")
        ok = ok and r["result"] == "ok"
        if r["result"] != "ok":
            print(f"{'':>8} pass {r['result']}: {r['reason']}\n{r.get('traceback') or ''}")
    print("\nper size: data generation, pass stats, mismatches found (open, by kind) vs planned")
    for r in results:
        print(f"  {r['size']:>7}: 2.x rows {r['instances_planned']} in {r['legacy_s']:.1f} s; "
              f"shadow {r['runs_planned']} runs + {r['events']} events in {r['shadow_s']:.1f} s; "
              f"RSS samples {r['samples']}; RSS after pass {mib(r['rss_after_kib'])} MiB; "
              f"1-min load average after the pass {r['loadavg']:.2f} on {os.cpu_count()} CPUs")
        print(f"           stats {json.dumps(r['stats'], sort_keys=True)}")
        kinds = sorted(set(r["mismatches"]) | set(r["expected"]))
        print("           " + ", ".join(f"{k} {r['mismatches'].get(k, 0)}/{r['expected'].get(k, 0)}" for k in kinds)
              + f"; projection-mismatch events {r['marked_events']}; reconciler cancels "
                f"{r['reconciler_cancels']}/{r['expected_cancels']}")
    print("\nwhere the pass spent its wall time (exclusive seconds; share of the pass; calls)")
    labels = sorted({k for r in results for k in r["breakdown"]},
                    key=lambda k: -max(r["breakdown"].get(k, [0])[0] for r in results))
    print(f"  {'':52}" + "".join(f"{r['size']:>22}" for r in results))
    for label in labels:
        cells = []
        for r in results:
            own, calls = r["breakdown"].get(label, [0.0, 0])
            cells.append(f"{own:8.2f} {100 * own / r['wall_s']:4.0f}% {calls:7d}")
        print(f"  {label:52}" + "".join(f"{c:>22}" for c in cells))
    cells = []
    for r in results:
        rest = r["wall_s"] - sum(v[0] for v in r["breakdown"].values())
        cells.append(f"{rest:8.2f} {100 * rest / r['wall_s']:4.0f}% {'':7}")
    print(f"  {'everything else (reconciler loop, row parsing, keys)':52}" + "".join(f"{c:>22}" for c in cells))
    if len(results) >= 2:
        small, large = results[0], results[-1]
        ratio = large["wall_s"] / small["wall_s"]
        worst = max((r["peak_kib"] - r["rss_before_kib"]) / 1024 for r in results)
        factor = large["size"] / small["size"]
        cpu_ratio = large["cpu_s"] / small["cpu_s"]
        print(f"\nratio time({large['size'] // 1000}k)/time({small['size'] // 1000}k) = {ratio:.2f} "
              f"for {factor:.0f}x the instances on the same {crons} crons ({small['size'] / crons:.0f} vs "
              f"{large['size'] / crons:.0f} per cron; CPU-time ratio {cpu_ratio:.2f}); "
              f"worst peak RSS growth {worst:.1f} MiB")
        print(TARGET_LINE)
        misses = [f"ratio {ratio:.2f} > {TARGET_RATIO:g}"] if ratio > TARGET_RATIO else []
        misses += [f"growth {worst:.1f} MiB ≥ {TARGET_GROWTH_MIB:g}"] if worst >= TARGET_GROWTH_MIB else []
        verdict = ("NOT MEASURED (a pass did not finish)" if not ok
                   else f"NOT MET ({'; '.join(misses)})" if misses else "MET")
        print(f"  -> {verdict}")
    for r in results:
        if r.get("profile"):
            print(f"\ncProfile of the {r['size']} pass (times inflated by profiling):\n{r['profile']}")
    return ok


def fit_growth(points: list[tuple[int, int, float]]) -> tuple[float, float, float] | None:
    """Least squares over (crons, instances, seconds): seconds = a + b * crons + c * instances; None when the
    points cannot separate the two (fewer than three, or one of them never varies)."""
    if len({c for c, _, _ in points}) < 2 or len({n for _, n, _ in points}) < 2 or len(points) < 3:
        return None
    rows = [[1.0, float(c), float(n)] for c, n, _ in points]
    ys = [t for _, _, t in points]
    # Normal equations (3 x 3), solved by Gaussian elimination: no numpy in this project.
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * y for r, y in zip(rows, ys, strict=True))]
         for i in range(3)]
    for i in range(3):
        pivot = max(range(i, 3), key=lambda k: abs(m[k][i]))
        m[i], m[pivot] = m[pivot], m[i]
        for k in range(3):
            if k != i:
                factor = m[k][i] / m[i][i]
                m[k] = [a - factor * b for a, b in zip(m[k], m[i], strict=True)]
    a, b, c = (m[i][3] / m[i][i] for i in range(3))
    return a, b, c


def growth(backend: str, series: dict[int, list[dict[str, Any]]]) -> None:
    """The fit over every pass of a backend, and how much of each pass it puts on the instances."""
    points = [(crons, r["size"], r["wall_s"]) for crons, results in series.items() for r in results
              if r["result"] == "ok"]
    fitted = fit_growth(points)
    if fitted is None:
        return
    a, b, c = fitted
    print(f"\n== {backend}: growth, fitted over {len(points)} passes: wall ≈ {a:.2f} s + {1000 * b:.3f} ms per cron "
          f"+ {1000 * c:.3f} ms per instance ==")
    for crons, n, t in points:
        fixed = a + b * crons
        print(f"  {crons:>6} crons, {n:>7} instances: measured {t:6.2f} s, fitted {fixed + c * n:6.2f} s, of which "
              f"per instance {c * n:6.2f} s ({100 * c * n / max(t, 1e-9):.0f} %)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--crons", default="10000,1000", help="numbers of crons, comma list (each with every size)")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--profile", action="store_true", help="run the measured pass under cProfile")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(json.loads(args.child))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    cron_counts = [int(c) for c in args.crons.split(",") if c.strip()]
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    print(f"bench_reconcile: sizes {sizes}, crons {cron_counts}, backends {backends}, python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-verify-") as tmp:
        shape = verify_row_shape(Path(tmp))
    print("row-shape check (ShadowRecorder vs bulk rows): " + "\n  ".join(shape))
    status = 0
    started = time.perf_counter()
    for backend in backends:
        series: dict[int, list[dict[str, Any]]] = {}
        for crons in cron_counts:
            results = series.setdefault(crons, [])
            for n in sizes:
                t = time.perf_counter()
                try:
                    results.append(measure(backend, n, crons, args.pg_url, args.seed, args.profile, args.keep))
                except Exception as exc:  # noqa: BLE001 - report and go on with the other backend
                    print(f"{backend} size {n}, {crons} crons: could not run: {type(exc).__name__}: {exc}")
                    status = 1
                    break
                print(f"  [{backend} {n} instances, {crons} crons: {time.perf_counter() - t:.1f} s including data "
                      f"generation]", flush=True)
            if results and not report(backend, results, crons):
                status = 1
        growth(backend, series)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
