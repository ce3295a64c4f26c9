"""Benchmark: RunService lifecycle throughput against the same transactions written with the raw driver.

    python -m tests.bench.bench_run_service [--runs N] [--backend sqlite|postgres|both] [--pg-url URL]
                                            [--blocks B] [--warmup W] [--profile [--profile-runs K]]

One lifecycle = one Run with one Attempt, start -> running -> succeeded, as four commands (one transaction each,
through RunService's write API: the Run commands of tests/support/run_commands.py):

  1. create_run(build=...)   run created -> queued -> dispatching, Attempt 1 claimed      (4 events)
  2. transition_attempt      attempt claimed -> starting                                 (1 event)
  3. transition_attempt      attempt starting -> running, run -> running                 (2 events)
  4. transition_attempt      attempt running -> succeeded (exit 0), run -> succeeded     (2 events)

"raw" does the SAME transactions with the DB-API driver (stdlib sqlite3 / psycopg 3): the same statements in
the same order, the same columns (the UPDATEs write every column, as SqlRunStore does), the same dedupe keys
(enforced by the unique index on both sides), the same CAS conditions and rowcount checks, the same event rows
and JSON payload bytes. A statement audit (statements issued per command, and for PostgreSQL the client->server
round trips taken from a libpq trace) and a row-shape comparison are printed so the fairness of the ratio can
be checked, not assumed.

Both implementations write into the same fresh store (a temp-dir SQLite file, or a fresh PostgreSQL schema
that is dropped afterwards) and run in interleaved blocks (ABBA order), so table growth and machine noise hit
both alike. Latency is time.perf_counter_ns around each command call. This is a benchmark, not a test: it
asserts nothing about timing and exits 0 after printing (1 if a backend could not be set up).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import math
import os
import platform
import pstats
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from psycopg import pq
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

from bridge.domain.commands import CreateRun, TransitionAttempt
from bridge.domain.events import Actor, ActorType
from bridge.domain.model import (
    ATTEMPT_TRANSITIONS,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    AttemptStatus,
    RunAttempt,
    RunStatus,
)
from bridge.service.clock import SystemClock
from bridge.service.ids import new_id
from bridge.service.run_service import RunService
from bridge.storage.engine import SQLITE_CACHE_KIB, StoreDeadlines, make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.run_fence import _UPDATE_RUN, INSERT_EVENT
from bridge.storage.runs import (
    _INSERT_ATTEMPT,
    _INSERT_RUN,
    _SELECT_ATTEMPT,
    _SELECT_RUN,
    _UPDATE_ATTEMPT,
)
from bridge.storage.schema import run_attempts_table, run_events_table, runs_table
from bridge.storage.unit_of_work import SqlUnitOfWork
from tests.support.run_commands import create_run, transition_attempt

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TARGET_RATIO = 0.50
TARGET_LINE = "target: RunService ≥ 50% of raw-driver rate"

ACTOR = Actor(ActorType.SYSTEM, "bench")
PROJECT, TASK, REVISION, TRIGGER_TYPE, CRON_ID = "default", "legacy-cron:1", "rev1", "manual", 1
EXECUTOR, PID = "local_process", 4321
COMMANDS = (
    "1 create_run → dispatching + attempt claimed",
    "2 attempt claimed→starting",
    "3 attempt starting→running, run→running",
    "4 attempt running→succeeded, run→succeeded",
)
IMPLS = ("RunService", "raw driver")

# Same engine settings as bridge.storage.engine.make_engine's defaults.
SQLITE_BUSY_TIMEOUT_MS = 100
PG_STATEMENT_TIMEOUT_MS = 5000

Probe = Callable[[], int]


# --------------------------------------------------------------------------------------------------
# Implementation A: RunService (the code under test)
# --------------------------------------------------------------------------------------------------

def service_lifecycle(svc: RunService, lat: list[list[int]], probe: Probe = time.perf_counter_ns) -> str:
    """One lifecycle through RunService; appends probe deltas (ns by default) per command to ``lat``."""
    added: list[RunAttempt] = []

    def build(store: Any, change: Any) -> None:
        change.move_run(RunStatus.QUEUED)
        change.move_run(RunStatus.DISPATCHING)
        # Built the way bridge.domain.commands.add_attempt builds Attempt N.
        added.append(change.add_attempt(RunAttempt(
            id=new_id(), run_id=change.run.id, attempt=1, status=AttemptStatus.CLAIMED,
            executor_type=EXECUTOR, callback_sequence=0, created_at_ms=change.at_ms, pid=PID,
        )))

    t0 = probe()
    run = create_run(svc, CreateRun(project_id=PROJECT, task_id=TASK, task_revision=REVISION,
                                    trigger_type=TRIGGER_TYPE, actor=ACTOR, legacy_cron_id=CRON_ID),
                     build=build).run
    t1 = probe()
    attempt = added[-1]
    res = transition_attempt(svc, TransitionAttempt(
        run.id, attempt.id, AttemptStatus.STARTING, run.version, attempt.status, attempt.callback_sequence, ACTOR))
    t2 = probe()
    run, attempt = res.run, res.attempt
    assert attempt is not None
    res = transition_attempt(svc, TransitionAttempt(
        run.id, attempt.id, AttemptStatus.RUNNING, run.version, attempt.status, attempt.callback_sequence, ACTOR,
        run_to=RunStatus.RUNNING))
    t3 = probe()
    run, attempt = res.run, res.attempt
    assert attempt is not None
    res = transition_attempt(svc, TransitionAttempt(
        run.id, attempt.id, AttemptStatus.SUCCEEDED, run.version, attempt.status, attempt.callback_sequence, ACTOR,
        run_to=RunStatus.SUCCEEDED, exit_code=0))
    t4 = probe()
    lat[0].append(t1 - t0)
    lat[1].append(t2 - t1)
    lat[2].append(t3 - t2)
    lat[3].append(t4 - t3)
    return run.id


# --------------------------------------------------------------------------------------------------
# Implementation B: the same statements, replayed with the raw DB-API driver
# --------------------------------------------------------------------------------------------------

RUN_COLS = tuple(c.name for c in runs_table.columns)
ATT_COLS = tuple(c.name for c in run_attempts_table.columns)
EVT_COLS = tuple(c.name for c in run_events_table.columns)
assert RUN_COLS[0] == "id" and ATT_COLS[0] == "id"
_R = {name: i for i, name in enumerate(RUN_COLS)}
_A = {name: i for i, name in enumerate(ATT_COLS)}
R_ID, R_STATUS, R_VERSION, R_EVSEQ = _R["id"], _R["status"], _R["version"], _R["event_sequence"]
R_QUEUED, R_STARTED, R_FINISHED = _R["queued_at_ms"], _R["started_at_ms"], _R["finished_at_ms"]
A_RUN_ID, A_STATUS, A_SEQ = _A["run_id"], _A["status"], _A["callback_sequence"]
A_STARTED, A_FINISHED, A_EXIT = _A["started_at_ms"], _A["finished_at_ms"], _A["exit_code"]

RUN_NEXT = {k.value: frozenset(v.value for v in vs) for k, vs in RUN_TRANSITIONS.items()}
ATTEMPT_NEXT = {k.value: frozenset(v.value for v in vs) for k, vs in ATTEMPT_TRANSITIONS.items()}
RUN_TERMINAL_VALUES = frozenset(s.value for s in RUN_TERMINAL)


def _dumps(payload: dict[str, Any]) -> str:
    # The exact encoding SqlRunStore writes (so payload bytes match).
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fingerprint() -> str:
    # The same request fingerprint bridge.domain.commands.request_fingerprint computes for this CreateRun.
    body = {"task_id": TASK, "task_revision": REVISION, "trigger_type": TRIGGER_TYPE, "trigger_id": None,
            "parent_run_id": None, "legacy_cron_id": CRON_ID, "priority": 0}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


class RawConflict(Exception):
    pass


@dataclass(frozen=True)
class Statement:
    """One SQL text exactly as SqlRunStore sends it to the driver, with its parameters in a fixed order: the raw
    side builds plain value lists in that order, passed as they are where the text has positional placeholders
    (SQLite) and zipped into the dict that named ones take (psycopg's ``%(name)s``, as RunService passes)."""

    sql: str
    names: tuple[str, ...]
    named: bool

    @classmethod
    def of(cls, compiled: Any, dialect: Any, names: tuple[str, ...]) -> Statement:
        # CompiledStatement._for is where SqlRunStore compiles its statements once per dialect: the texts are taken from
        # there, not written again here, so the two sides cannot drift apart.
        sql, order, defaults = compiled._for(dialect)
        assert not defaults, f"a statement with parameters the raw side does not fill: {defaults}"
        assert order is None or tuple(order) == names, f"parameter order {order} is not {names}"
        return cls(sql, names, order is None)

    def args(self, values: Sequence[Any]) -> Any:
        return dict(zip(self.names, values, strict=True)) if self.named else values


class RawStore:
    """RunService's four commands, hand-written against one DB-API connection, replaying SqlRunStore's statements.

    Statement for statement what RunService sends today (`bridge/storage/runs.py`, `SqlUnitOfWork`): the same
    SQL texts, one cursor per statement, the events as one ``executemany`` (even for one row), the same CAS
    conditions and row-count checks. SQLite: ``BEGIN IMMEDIATE`` first, as engine.py issues for writes.
    PostgreSQL: the transaction opened implicitly by psycopg and the same pipelines as `execute_all`: a
    command's first read carries the BEGIN (a pipeline of one statement), the writes of a change go out
    together in one pipeline, COMMIT on its own. Rows are plain lists and tuples in column order, as a hand
    written DB-API program keeps them.
    """

    def __init__(self, conn: Any, dialect: Any, *, begin: str | None, pipeline: bool) -> None:
        self.conn = conn
        self.begin = begin
        self.pipeline = pipeline
        self.select_run = Statement.of(_SELECT_RUN, dialect, ("b_id",))
        self.select_attempt = Statement.of(_SELECT_ATTEMPT, dialect, ("b_id",))
        self.insert_run = Statement.of(_INSERT_RUN, dialect, RUN_COLS)
        self.insert_attempt = Statement.of(_INSERT_ATTEMPT, dialect, ATT_COLS)
        self.insert_event = Statement.of(INSERT_EVENT, dialect, EVT_COLS)
        self.update_run = Statement.of(_UPDATE_RUN, dialect, (*RUN_COLS[1:], "b_id", "b_version"))
        self.update_attempt = Statement.of(_UPDATE_ATTEMPT, dialect,
                                           (*ATT_COLS[1:], "b_id", "b_status", "b_sequence"))

    def _send(self, statements: list[tuple[Statement, Any, bool]], *, opens: bool = False) -> list[Any]:
        """Each (statement, args, many) on its own cursor, ``many`` with executemany; on PostgreSQL in one
        pipeline when several are sent, or when one opens the transaction (as `_pipeline_for` decides). Returns
        the cursors, whose results are read after the sync."""
        batched = self.pipeline and (len(statements) > 1 or opens)
        cursors = []
        with self.conn.pipeline() if batched else nullcontext():
            for statement, args, many in statements:
                cursor = self.conn.cursor()
                cursors.append(cursor)
                if many:
                    cursor.executemany(statement.sql, args)
                else:
                    cursor.execute(statement.sql, args)
        return cursors

    def _read_one(self, statement: Statement, args: Any, *, opens: bool) -> Any:
        cursor = self._send([(statement, args, False)], opens=opens)[0]
        try:
            return cursor.fetchone()
        finally:
            cursor.close()

    def _begin(self) -> None:
        if self.begin:
            cursor = self.conn.cursor()
            cursor.execute(self.begin)
            cursor.close()

    def create(self) -> tuple[str, str]:
        """create_run + build: insert the Run (dispatching, v0), Attempt 1 (claimed) and 4 events."""
        at_ms = time.time_ns() // 1_000_000
        run_id, attempt_id = new_id(), new_id()
        run: list[Any] = [None] * len(RUN_COLS)
        run[R_ID] = run_id
        run[_R["project_id"]], run[_R["task_id"]], run[_R["task_revision"]] = PROJECT, TASK, REVISION
        run[_R["legacy_cron_id"]], run[_R["trigger_type"]] = CRON_ID, TRIGGER_TYPE
        run[R_STATUS], run[R_VERSION], run[R_EVSEQ], run[_R["priority"]] = "dispatching", 0, 4, 0
        run[_R["request_fingerprint"]] = _fingerprint()
        run[_R["created_at_ms"]] = run[R_QUEUED] = at_ms
        run[_R["synthesized"]] = False
        att: list[Any] = [None] * len(ATT_COLS)
        att[_A["id"]], att[A_RUN_ID], att[_A["attempt"]], att[A_STATUS] = attempt_id, run_id, 1, "claimed"
        att[_A["executor_type"]], att[_A["pid"]], att[A_SEQ] = EXECUTOR, PID, 0
        att[_A["created_at_ms"]], att[_A["synthesized"]] = at_ms, False
        actor_type, actor_id, args = ACTOR.type.value, ACTOR.id, self.insert_event.args
        events = [
            args((new_id(), run_id, 1, "run.created", None, actor_type, actor_id, None, None, _dumps({}), at_ms)),
            args((new_id(), run_id, 2, "run.queued", None, actor_type, actor_id, None, None,
                  _dumps({"from": "created", "to": "queued"}), at_ms)),
            args((new_id(), run_id, 3, "run.dispatching", None, actor_type, actor_id, None, None,
                  _dumps({"from": "queued", "to": "dispatching"}), at_ms)),
            args((new_id(), run_id, 4, "attempt.claimed", None, actor_type, actor_id, attempt_id, None,
                  _dumps({"attempt": 1}), at_ms)),
        ]
        try:
            self._begin()
            for cursor in self._send([(self.insert_run, self.insert_run.args(run), False),
                                      (self.insert_attempt, self.insert_attempt.args(att), False),
                                      (self.insert_event, events, True)]):
                cursor.close()
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return run_id, attempt_id

    def transition_attempt(self, run_id: str, attempt_id: str, to: str, expected_version: int,
                           expected_status: str, expected_seq: int, run_to: str | None = None,
                           exit_code: int | None = None) -> tuple[int, str, int]:
        """transition_attempt: read Run, read Attempt, CAS both, append 1-2 events (dedupe key in the row).

        Returns (run version, attempt status, attempt callback_sequence) after the command.
        """
        at_ms = time.time_ns() // 1_000_000
        key = f"attempt-transition:{attempt_id}:{expected_seq}:{to}"
        try:
            self._begin()
            row = self._read_one(self.select_run, self.select_run.args((run_id,)), opens=True)
            # Like RunService: no dedupe pre-read on the happy path; the unique (run_id, dedupe_key)
            # index refuses a replay, and the key is looked up only after a refusal.
            if row is None or row[R_VERSION] != expected_version:
                raise RawConflict("run missing or version")
            arow = self._read_one(self.select_attempt, self.select_attempt.args((attempt_id,)), opens=False)
            if (arow is None or arow[A_RUN_ID] != run_id or arow[A_STATUS] != expected_status
                    or arow[A_SEQ] != expected_seq):
                raise RawConflict("attempt status/sequence")
            if to not in ATTEMPT_NEXT[expected_status]:
                raise RawConflict(f"attempt {expected_status}->{to}")
            att = list(arow)
            att[A_STATUS], att[A_SEQ] = to, expected_seq + 1
            if to == "running":
                if att[A_STARTED] is None:
                    att[A_STARTED] = at_ms
            elif to != "starting" and att[A_FINISHED] is None:
                att[A_FINISHED] = at_ms
            payload: dict[str, Any] = {"from": expected_status, "to": to}
            if exit_code is not None:
                att[A_EXIT] = exit_code
                payload["exit_code"] = exit_code
            actor_type, actor_id, args = ACTOR.type.value, ACTOR.id, self.insert_event.args
            base_seq = row[R_EVSEQ]
            events = [args((new_id(), run_id, base_seq + 1, f"attempt.{to}", key, actor_type, actor_id, attempt_id,
                            None, _dumps(payload), at_ms))]
            run = list(row)
            if run_to is not None:
                current = run[R_STATUS]
                if run_to not in RUN_NEXT[current]:
                    raise RawConflict(f"run {current}->{run_to}")
                run[R_STATUS] = run_to
                if run_to == "running":
                    if run[R_STARTED] is None:
                        run[R_STARTED] = at_ms
                elif run_to in RUN_TERMINAL_VALUES and run[R_FINISHED] is None:
                    run[R_FINISHED] = at_ms
                events.append(args((new_id(), run_id, base_seq + 2, f"run.{run_to}", f"{key}#2", actor_type,
                                    actor_id, None, None, _dumps({"from": current, "to": run_to}), at_ms)))
            run[R_VERSION], run[R_EVSEQ] = expected_version + 1, base_seq + len(events)
            cursors = self._send([
                (self.update_run, self.update_run.args((*run[1:], run_id, expected_version)), False),
                (self.update_attempt, self.update_attempt.args((*att[1:], attempt_id, expected_status,
                                                                expected_seq)), False),
                (self.insert_event, events, True)])
            counts = [cursor.rowcount for cursor in cursors]
            for cursor in cursors:
                cursor.close()
            if counts[0] != 1 or counts[1] != 1:
                raise RawConflict(f"CAS row counts {counts[:2]}")
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return expected_version + 1, to, expected_seq + 1


def raw_lifecycle(raw: RawStore, lat: list[list[int]], probe: Probe = time.perf_counter_ns) -> str:
    t0 = probe()
    run_id, attempt_id = raw.create()
    t1 = probe()
    version, status, seq = raw.transition_attempt(run_id, attempt_id, "starting", 0, "claimed", 0)
    t2 = probe()
    version, status, seq = raw.transition_attempt(run_id, attempt_id, "running", version, status, seq,
                                                  run_to="running")
    t3 = probe()
    raw.transition_attempt(run_id, attempt_id, "succeeded", version, status, seq, run_to="succeeded", exit_code=0)
    t4 = probe()
    lat[0].append(t1 - t0)
    lat[1].append(t2 - t1)
    lat[2].append(t3 - t2)
    lat[3].append(t4 - t3)
    return run_id


# --------------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------------

@dataclass
class Env:
    name: str
    engine: Engine
    svc: RunService
    raw: RawStore
    raw_conn: Any
    placeholder: str
    info: dict[str, str] = field(default_factory=dict)
    sqlite_path: Path | None = None

    def raw_store(self, conn: Any) -> RawStore:
        """The raw side on ``conn``: BEGIN IMMEDIATE on SQLite, psycopg's pipelines where RunService uses them."""
        if self.name == "sqlite":
            return RawStore(conn, self.engine.dialect, begin="BEGIN IMMEDIATE", pipeline=False)
        return RawStore(conn, self.engine.dialect, begin=None, pipeline=psycopg.Pipeline.is_supported())


def _sqlite_raw_connect(path: Path, factory: type[sqlite3.Connection] = sqlite3.Connection) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                           check_same_thread=False, factory=factory)
    # The same PRAGMAs bridge.storage.engine applies on connect.
    cursor = conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    cursor.close()
    return conn


@contextmanager
def sqlite_env() -> Iterator[Env]:
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp:
        path = Path(tmp) / "bridge.sqlite"
        engine = make_engine(f"sqlite:///{path}", sqlite_busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
        raw_conn = None
        try:
            upgrade(engine)
            svc = RunService(SqlUnitOfWork(engine), clock=SystemClock())
            raw_conn = _sqlite_raw_connect(path)
            info = {"store": f"SQLite {sqlite3.sqlite_version} file (WAL, synchronous=NORMAL) in a temp dir"}
            env = Env("sqlite", engine, svc, None, raw_conn, "?", info, sqlite_path=path)  # type: ignore[arg-type]
            env.raw = env.raw_store(raw_conn)
            yield env
        finally:
            if raw_conn is not None:
                raw_conn.close()
            engine.dispose()


def _libpq_conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def postgres_env(url: str) -> Iterator[Env]:
    conninfo = _libpq_conninfo(url)
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = psycopg.connect(conninfo, autocommit=True, connect_timeout=5)
    engine = None
    raw_conn = None
    try:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        engine = make_engine(url, deadlines=StoreDeadlines(statement_ms=PG_STATEMENT_TIMEOUT_MS), pg_search_path=schema)
        upgrade(engine)
        svc = RunService(SqlUnitOfWork(engine), clock=SystemClock())
        # The same session settings make_engine passes; transactions opened implicitly, as under SQLAlchemy.
        options = (f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS} -c lock_timeout={PG_STATEMENT_TIMEOUT_MS} "
                   f"-c search_path={schema}")
        raw_conn = psycopg.connect(conninfo, connect_timeout=5, options=options)
        sv = admin.info.server_version
        info = {"store": f"PostgreSQL {sv // 10000}.{sv % 10000} at {admin.info.host}:{admin.info.port}, "
                         f"fresh schema {schema} (dropped afterwards)"}
        env = Env("postgres", engine, svc, None, raw_conn, "%s", info)  # type: ignore[arg-type]
        env.raw = env.raw_store(raw_conn)
        yield env
    finally:
        if raw_conn is not None:
            raw_conn.close()
        if engine is not None:
            engine.dispose()
        try:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            admin.close()


# --------------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------------

@dataclass
class Sample:
    lat: list[list[int]] = field(default_factory=lambda: [[], [], [], []])
    block_ns: list[int] = field(default_factory=list)  # summed command time per block
    block_n: list[int] = field(default_factory=list)

    @property
    def lifecycles(self) -> int:
        return len(self.lat[0])

    @property
    def total_ns(self) -> int:
        return sum(sum(x) for x in self.lat)

    @property
    def lifecycle_rate(self) -> float:
        return self.lifecycles / (self.total_ns / 1e9)

    def all_commands(self) -> list[int]:
        return [v for per in self.lat for v in per]


def pct(values: list[int], q: float) -> float:
    """Nearest-rank percentile of ns values, returned in ms."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k] / 1e6


def block_sizes(n: int, blocks: int) -> list[int]:
    blocks = max(1, min(blocks, n))
    base, extra = divmod(n, blocks)
    return [base + (1 if i < extra else 0) for i in range(blocks)]


def measure(env: Env, n: int, blocks: int, warmup: int) -> dict[str, Sample]:
    runners: dict[str, Callable[[list[list[int]]], str]] = {
        IMPLS[0]: lambda lat: service_lifecycle(env.svc, lat),
        IMPLS[1]: lambda lat: raw_lifecycle(env.raw, lat),
    }
    scratch: list[list[int]] = [[], [], [], []]
    for _ in range(warmup):  # warm caches, pools, prepared statements (psycopg prepares after 5 uses)
        for run_once in runners.values():
            run_once(scratch)
    samples = {name: Sample() for name in runners}
    for b, size in enumerate(block_sizes(n, blocks)):
        order = list(runners) if b % 2 == 0 else list(reversed(runners))  # ABBA: no fixed first mover
        for name in order:
            sample, run_once = samples[name], runners[name]
            gc.collect()
            before = sample.total_ns
            for _ in range(size):
                run_once(sample.lat)
            sample.block_ns.append(sample.total_ns - before)
            sample.block_n.append(size)
    return samples


# --------------------------------------------------------------------------------------------------
# Fairness checks: statement audit and row shapes
# --------------------------------------------------------------------------------------------------

class _SentLog:
    """What both sides hand the DB-API driver, in order: each execute / executemany (with its row count), and
    COMMIT / ROLLBACK when a transaction is open. Shared by every connection while the audit runs."""

    entries: list[str] | None = None

    @classmethod
    def add(cls, entry: str) -> None:
        if cls.entries is not None:
            cls.entries.append(" ".join(entry.split()))


class _LoggedSqliteCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        _SentLog.add(sql)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any:
        rows = list(seq_of_parameters)
        _SentLog.add(f"{sql} ×{len(rows)}")
        return super().executemany(sql, rows)


class _LoggedSqlite(sqlite3.Connection):
    """sqlite3's connection with the cursors above (its C type cannot be patched, a subclass can)."""

    def cursor(self, factory: Any = _LoggedSqliteCursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        _SentLog.add(sql)
        return super().execute(sql, parameters)

    def commit(self) -> None:
        if self.in_transaction:
            _SentLog.add("COMMIT")
        super().commit()

    def rollback(self) -> None:
        if self.in_transaction:
            _SentLog.add("ROLLBACK")
        super().rollback()


@contextmanager
def _logging_psycopg() -> Iterator[None]:
    """psycopg's Cursor.execute / executemany and Connection.commit / rollback, logged (Python classes)."""
    cursor_cls, conn_cls = psycopg.Cursor, psycopg.Connection
    originals = (cursor_cls.execute, cursor_cls.executemany, conn_cls.commit, conn_cls.rollback)

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        _SentLog.add(str(query))
        return originals[0](self, query, params, **kw)

    def executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        rows = list(params_seq)
        _SentLog.add(f"{query} ×{len(rows)}")
        return originals[1](self, query, rows, **kw)

    def ending(name: str, original: Any) -> Any:
        def end(self: Any) -> None:
            if self.info.transaction_status != pq.TransactionStatus.IDLE:
                _SentLog.add(name)
            original(self)
        return end

    cursor_cls.execute, cursor_cls.executemany = execute, executemany  # type: ignore[method-assign,assignment]
    conn_cls.commit, conn_cls.rollback = ending("COMMIT", originals[2]), ending("ROLLBACK", originals[3])  # type: ignore[method-assign]
    try:
        yield
    finally:
        cursor_cls.execute, cursor_cls.executemany, conn_cls.commit, conn_cls.rollback = originals  # type: ignore[method-assign]


@contextmanager
def _logged_sides(env: Env) -> Iterator[RawStore]:
    """While open, both sides' driver calls go to _SentLog; yields the raw side to use meanwhile. On SQLite the
    engine's pool is emptied so that its next connections are opened as _LoggedSqlite (its own settings and
    listeners unchanged), and a raw connection of that class is opened beside them."""
    if env.name == "postgres":
        with _logging_psycopg():
            yield env.raw
        return

    def logged_class(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["factory"] = _LoggedSqlite

    assert env.sqlite_path is not None
    event.listen(env.engine, "do_connect", logged_class)
    env.engine.dispose()
    raw_conn = _sqlite_raw_connect(env.sqlite_path, factory=_LoggedSqlite)
    try:
        yield env.raw_store(raw_conn)
    finally:
        raw_conn.close()
        event.remove(env.engine, "do_connect", logged_class)
        env.engine.dispose()


@contextmanager
def _pg_trace(pgconns: list[Any]) -> Iterator[Path]:
    """libpq protocol trace of the given connections into one temp file."""
    fd, name = tempfile.mkstemp(prefix="bench-pgtrace-", suffix=".txt")
    try:
        for pgconn in pgconns:
            pgconn.trace(fd)
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        yield Path(name)
    finally:
        for pgconn in pgconns:
            pgconn.untrace()
        os.close(fd)
        os.unlink(name)


def _round_trips(trace: Path, offset: int) -> tuple[int, int]:
    """Client->server round trips since ``offset``: simple Query messages plus extended-protocol Syncs."""
    data = trace.read_text(errors="replace")
    count = 0
    for line in data[offset:].splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] == "F" and parts[2].split(" ")[0] in ("Query", "Sync"):
            count += 1
    return count, len(data)


@dataclass
class Audit:
    sent: dict[str, list[list[str]]]  # impl -> per command, what was handed to the driver, in order
    round_trips: dict[str, list[int]] | None  # PostgreSQL only, from the libpq trace
    notes: list[str]

    @property
    def statements(self) -> dict[str, list[int]]:
        return {impl: [len(command) for command in commands] for impl, commands in self.sent.items()}

    def differences(self) -> list[str]:
        """Where the two sides handed the driver something different ([] = the same texts in the same order)."""
        found = []
        for i, (a, b) in enumerate(zip(self.sent[IMPLS[0]], self.sent[IMPLS[1]], strict=True)):
            if a != b:
                found.append(f"command {i + 1}: RunService sent {len(a)}, raw {len(b)}; first difference: "
                             + next((f"{x[:90]!r} vs {y[:90]!r}" for x, y in zip(a, b, strict=False) if x != y),
                                    "one side sent more"))
        return found


def _per_command(lifecycle: Callable[[list[list[int]], Probe], str]) -> list[list[str]]:
    """Run one lifecycle and cut the log into its four commands."""
    assert _SentLog.entries is not None
    entries = _SentLog.entries
    cuts: list[list[int]] = [[], [], [], []]
    entries.clear()
    lifecycle(cuts, lambda: len(entries))
    ends = [0]
    for cut in cuts:  # probe deltas per command -> positions
        ends.append(ends[-1] + cut[0])
    return [entries[ends[i]:ends[i + 1]] for i in range(4)]


def audit(env: Env) -> Audit:
    """One more lifecycle per side with every driver call logged: the texts handed to the driver per command
    (BEGIN, reads, writes, COMMIT), and for PostgreSQL the round trips from a libpq trace."""
    notes: list[str] = []
    _SentLog.entries = []
    try:
        with _logged_sides(env) as raw:
            service_lifecycle(env.svc, [[], [], [], []])  # opens (and logs the settings of) the new connections
            sent = {IMPLS[0]: _per_command(lambda lat, probe: service_lifecycle(env.svc, lat, probe)),
                    IMPLS[1]: _per_command(lambda lat, probe: raw_lifecycle(raw, lat, probe))}
    finally:
        _SentLog.entries = None
    round_trips = None
    if env.name == "postgres":
        with env.engine.connect() as c:  # the pool's (only) connection, reused by every command
            sa_pgconn = c.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
        with _pg_trace([sa_pgconn, env.raw_conn.pgconn]) as trace:
            offset, trips = [0], [0]

            def rt_probe() -> int:
                n, offset[0] = _round_trips(trace, offset[0])
                trips[0] += n
                return trips[0]

            lat: list[list[int]] = [[], [], [], []]
            service_lifecycle(env.svc, lat, rt_probe)
            round_trips = {IMPLS[0]: [x[0] for x in lat]}
            lat = [[], [], [], []]
            raw_lifecycle(env.raw, lat, rt_probe)
            round_trips[IMPLS[1]] = [x[0] for x in lat]
        notes.append("PostgreSQL: statements are the driver calls (psycopg opens the transaction itself, inside "
                     "the first pipeline on both sides); round trips are the libpq trace's Query + Sync messages.")
    return Audit(sent, round_trips, notes)


def _shape(conn: Any, p: str, run_id: str) -> dict[str, Any]:
    """Rows written for one lifecycle, with ids and clock values replaced by what they refer to."""
    cur = conn.cursor()
    cur.execute(f"SELECT {', '.join(RUN_COLS)} FROM runs WHERE id = {p}", (run_id,))
    run = dict(zip(RUN_COLS, cur.fetchone()))
    cur.execute(f"SELECT {', '.join(ATT_COLS)} FROM run_attempts WHERE run_id = {p} ORDER BY attempt", (run_id,))
    attempts = [dict(zip(ATT_COLS, r)) for r in cur.fetchall()]
    cur.execute(f"SELECT {', '.join(EVT_COLS)} FROM run_events WHERE run_id = {p} ORDER BY sequence", (run_id,))
    events = [dict(zip(EVT_COLS, r)) for r in cur.fetchall()]
    cur.close()
    conn.rollback()  # end the read transaction psycopg opened implicitly (no-op on sqlite3 autocommit)
    names = {run_id: "<run>", **{a["id"]: f"<attempt {a['attempt']}>" for a in attempts}}

    def norm(row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in row.items():
            if k.endswith("_at_ms"):
                v = None if v is None else "<ms>"
            elif k == "dedupe_key" and v is not None:
                for real, alias in names.items():
                    v = v.replace(real, alias)
            elif k == "synthesized":
                v = bool(v)
            elif isinstance(v, str) and v in names:
                v = names[v]
            elif k == "id":
                v = "<event id>" if isinstance(v, str) and len(v) == 36 else v
            out[k] = v
        return out

    return {"runs": [norm(run)], "run_attempts": [norm(a) for a in attempts],
            "run_events": [norm(e) for e in events]}


def shape_check(env: Env) -> list[str]:
    """Differences between the rows RunService and the raw side write for one lifecycle ([] = identical)."""
    lat: list[list[int]] = [[], [], [], []]
    svc_run = service_lifecycle(env.svc, lat)
    raw_run = raw_lifecycle(env.raw, lat)
    a, b = _shape(env.raw_conn, env.placeholder, svc_run), _shape(env.raw_conn, env.placeholder, raw_run)
    diffs: list[str] = []
    for table in a:
        if len(a[table]) != len(b[table]):
            diffs.append(f"{table}: {len(a[table])} rows vs {len(b[table])}")
            continue
        for i, (ra, rb) in enumerate(zip(a[table], b[table])):
            for col in ra:
                if ra[col] != rb[col]:
                    diffs.append(f"{table}[{i}].{col}: RunService={ra[col]!r} raw={rb[col]!r}")
    return diffs


# --------------------------------------------------------------------------------------------------
# Profiling (optional, --profile)
# --------------------------------------------------------------------------------------------------

def _category(filename: str, func: str) -> str:
    f = filename.replace("\\", "/")
    if "/sqlalchemy/" in f:
        return "SQLAlchemy (Core, engine, pool, events)"
    if "/bridge/storage/" in f:
        return "bridge/storage (SqlRunStore, UoW, engine hooks)"
    if "/bridge/service/" in f:
        return "bridge/service (RunService, ids)"
    if "/bridge/domain/" in f:
        return "bridge/domain (RunChange, events, model)"
    if "/psycopg/" in f or "psycopg" in func:
        return "psycopg (driver incl. network wait)"
    if "sqlite3." in func:
        return "sqlite3 driver (C: SQL execution, commit)"
    if f.endswith("dataclasses.py"):
        return "stdlib dataclasses (asdict/replace/fields)"
    if "/uuid6/" in f or f.endswith("uuid.py"):
        return "uuid6/uuid (ids)"
    if "/json/" in f or "_json" in func:
        return "json"
    if f.endswith("enum.py"):
        return "stdlib enum"
    if "/tests/bench/" in f:
        return "benchmark harness"
    if "/tests/support/" in f:
        return "tests/support (the Run commands over RunService)"
    return "other (stdlib, builtins)"


def _profile_report(console: Console, title: str, prof: cProfile.Profile, lifecycles: int) -> None:
    stats = pstats.Stats(prof)
    raw_stats: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw_stats.values())
    cats: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, tt, _ct, _callers) in raw_stats.items():
        key = _category(filename, func)
        cats[key] = cats.get(key, 0.0) + tt
    t = Table(title=f"{title}: own time by area ({lifecycles} lifecycles, {total * 1e3 / lifecycles:.2f} ms "
                    f"profiled per lifecycle)")
    t.add_column("area")
    t.add_column("share", justify="right")
    t.add_column("ms / lifecycle", justify="right")
    for key, tt in sorted(cats.items(), key=lambda kv: -kv[1]):
        t.add_row(key, f"{tt / total:.1%}", f"{tt * 1e3 / lifecycles:.3f}")
    console.print(t)

    def short(filename: str) -> str:
        for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
            if marker in filename:
                return filename.split(marker, 1)[1]
        return filename

    top = Table(title=f"{title}: top functions by cumulative time (file:function)")
    top.add_column("file:line(function)")
    top.add_column("calls/lifecycle", justify="right")
    top.add_column("cum share", justify="right")
    top.add_column("own share", justify="right")
    rows = sorted(raw_stats.items(), key=lambda kv: -kv[1][3])
    shown = 0
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in rows:
        if "/tests/bench/" in filename or func in ("<lambda>",) or filename == "~" and func.startswith("<built-in"):
            if not ("sqlite3" in func or "psycopg" in func):
                continue
        top.add_row(f"{short(filename)}:{line}({func})", f"{nc / lifecycles:.1f}", f"{ct / total:.1%}",
                    f"{tt / total:.1%}")
        shown += 1
        if shown >= 28:
            break
    console.print(top)


def profile(console: Console, env: Env, lifecycles: int) -> None:
    for name, run_once in ((IMPLS[0], lambda lat: service_lifecycle(env.svc, lat)),
                           (IMPLS[1], lambda lat: raw_lifecycle(env.raw, lat))):
        lat: list[list[int]] = [[], [], [], []]
        gc.collect()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(lifecycles):
            run_once(lat)
        prof.disable()
        _profile_report(console, f"{env.name} / {name}", prof, lifecycles)


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

@dataclass
class Result:
    env_name: str
    info: dict[str, str]
    samples: dict[str, Sample]
    audit: Audit
    shape_diffs: list[str]
    seconds: float

    @property
    def ratio(self) -> float:
        return self.samples[IMPLS[0]].lifecycle_rate / self.samples[IMPLS[1]].lifecycle_rate

    def block_ratios(self) -> list[float]:
        a, b = self.samples[IMPLS[0]], self.samples[IMPLS[1]]
        return [(na / ta) / (nb / tb) for na, ta, nb, tb in zip(a.block_n, a.block_ns, b.block_n, b.block_ns)]


def print_results(console: Console, results: list[Result], args: argparse.Namespace) -> None:
    main = Table(title=f"RunService vs raw driver: start→running→succeeded lifecycle "
                       f"({args.runs} lifecycles per implementation per backend, {args.blocks} interleaved blocks, "
                       f"{args.warmup} warm-up)")
    for col, just in (("backend", "left"), ("implementation", "left"), ("lifecycles/s", "right"),
                      ("commands/s", "right"), ("p50 ms/cmd", "right"), ("p99 ms/cmd", "right"),
                      ("mean ms/cmd", "right"), ("stmts/lifecycle", "right"), ("round trips/lifecycle", "right")):
        main.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in results:
        for impl in IMPLS:
            s = r.samples[impl]
            cmds = s.all_commands()
            rts = r.audit.round_trips[impl] if r.audit.round_trips else None
            main.add_row(r.env_name, impl, f"{s.lifecycle_rate:,.1f}", f"{4 * s.lifecycle_rate:,.1f}",
                         f"{pct(cmds, 50):.3f}", f"{pct(cmds, 99):.3f}", f"{sum(cmds) / len(cmds) / 1e6:.3f}",
                         str(sum(r.audit.statements[impl])), str(sum(rts)) if rts else "-")
        main.add_section()
    console.print(main)

    per_cmd = Table(title="Latency per command (ms): p50 / p99")
    per_cmd.add_column("backend")
    per_cmd.add_column("implementation")
    for c in COMMANDS:
        per_cmd.add_column(c, justify="right")
    for r in results:
        for impl in IMPLS:
            lat = r.samples[impl].lat
            per_cmd.add_row(r.env_name, impl, *[f"{pct(lat[i], 50):.3f} / {pct(lat[i], 99):.3f}" for i in range(4)])
        per_cmd.add_row(r.env_name, "ratio of p50 (RunService/raw)",
                        *[f"{pct(r.samples[IMPLS[0]].lat[i], 50) / pct(r.samples[IMPLS[1]].lat[i], 50):.2f}×"
                          for i in range(4)])
        per_cmd.add_section()
    console.print(per_cmd)

    fair = Table(title="Fairness audit: driver calls per command, counted in the DB-API driver (BEGIN, reads, "
                       "writes, COMMIT; PostgreSQL: + server round trips, rt)")
    fair.add_column("backend")
    fair.add_column("implementation")
    for c in COMMANDS:
        fair.add_column(c, justify="right")
    fair.add_column("statement texts", justify="left")
    fair.add_column("row shapes", justify="left")
    for r in results:
        differences = r.audit.differences()
        for impl in IMPLS:
            st = r.audit.statements[impl]
            rt = r.audit.round_trips[impl] if r.audit.round_trips else None
            cells = [f"{st[i]}" + (f" ({rt[i]} rt)" if rt else "") for i in range(4)]
            texts = ("identical, same order" if not differences else f"{len(differences)} command(s) differ") \
                if impl == IMPLS[0] else ""
            shapes = ("identical" if not r.shape_diffs else f"{len(r.shape_diffs)} difference(s)") \
                if impl == IMPLS[0] else ""
            fair.add_row(r.env_name, impl, *cells, texts, shapes)
        fair.add_section()
    console.print(fair)
    for r in results:
        for note in r.audit.notes:
            console.print(f"  [{r.env_name}] note: {note}")
        for d in r.audit.differences():
            console.print(f"  [{r.env_name}] statement difference: {d}")
        if r.audit.round_trips and r.audit.round_trips[IMPLS[0]] != r.audit.round_trips[IMPLS[1]]:
            console.print(f"  [{r.env_name}] round trips differ: {r.audit.round_trips}")
        for d in r.shape_diffs:
            console.print(f"  [{r.env_name}] row-shape difference: {d}")

    ratio = Table(title="Ratio RunService rate / raw-driver rate")
    for col in ("backend", "RunService lifecycles/s", "raw lifecycles/s", "ratio", "per-block ratio min–max",
                "target ≥ 50%", "store", "wall s"):
        ratio.add_column(col)
    for r in results:
        br = r.block_ratios()
        ratio.add_row(r.env_name, f"{r.samples[IMPLS[0]].lifecycle_rate:,.1f}",
                      f"{r.samples[IMPLS[1]].lifecycle_rate:,.1f}", f"{r.ratio:.1%}",
                      f"{min(br):.1%} – {max(br):.1%}", "met" if r.ratio >= TARGET_RATIO else "NOT met",
                      r.info.get("store", ""), f"{r.seconds:.1f}")
    console.print(ratio)
    console.print(TARGET_LINE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.bench_run_service", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="lifecycles per implementation per backend (default 300)")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg-url", default=DEFAULT_PG_URL, help=f"SQLAlchemy URL (default {DEFAULT_PG_URL})")
    ap.add_argument("--blocks", type=int, default=10, help="interleaved blocks per implementation (default 10)")
    ap.add_argument("--warmup", type=int, default=30, help="warm-up lifecycles per implementation (default 30)")
    ap.add_argument("--profile", action="store_true", help="afterwards, cProfile both implementations per backend")
    ap.add_argument("--profile-runs", type=int, default=200, help="lifecycles per profile (default 200)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")

    console = Console(width=max(Console().width, 200), markup=False, highlight=False)
    console.print(f"bench_run_service: Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
                  f"psycopg {psycopg.__version__} (libpq {pq.version()}, {pq.__impl__}), "
                  f"sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPU(s), {platform.machine()}")
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results: list[Result] = []
    failed = False
    for name in backends:
        started = time.perf_counter()
        try:
            ctx = sqlite_env() if name == "sqlite" else postgres_env(args.pg_url)
            with ctx as env:
                console.print(f"[{name}] {env.info['store']}: warm-up, then {args.runs} lifecycles per "
                              f"implementation in {args.blocks} interleaved blocks …")
                samples = measure(env, args.runs, args.blocks, args.warmup)
                result = Result(name, env.info, samples, audit(env), shape_check(env), time.perf_counter() - started)
                results.append(result)
                if args.profile:
                    profile(console, env, args.profile_runs)
        except (sqlalchemy.exc.SQLAlchemyError, psycopg.Error, OSError) as exc:
            failed = True
            console.print(f"[{name}] could not run: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    if results:
        print_results(console, results, args)
    else:
        console.print(TARGET_LINE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
