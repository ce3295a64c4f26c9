"""Benchmark: the CPU the shadow interceptor spends per status callback, in one process, without HTTP.

    python -m tests.bench.bench_interceptor [--executions N] [--rounds R] [--profile] [--attribute]

A 2.x data dir (five crons) and a SQLite bridge store in a temp dir; the interceptor the composition root builds
(`bridge.bootstrap.build_callback_path`, shadow on for every origin, 2.x's database read through kept connections as
`bridge serve` does). Each execution is a start and an end callback, with the exact bytes of 2.x's shell/api.sh,
through ``before_forward`` and ``after_forward`` (2.x's answer taken as 200): parsing, the Crontabs read, origin
inference, the hand-off to the cron's lane and the shadow write. CPU is ``time.process_time`` (every thread of the
process), after 200 warm-up executions; one line per round, with the part spent in the lanes' threads.

Run it against another version of the code by putting that checkout first on the path:
``PYTHONPATH=<checkout> python tests/bench/bench_interceptor.py``, alternating the two, to compare them side by side.
``--profile`` prints cProfile's top functions of the calling thread (the lane threads' own work is not in it).

``--attribute`` splits each round's CPU into what no Python above the driver could save and the rest: every
sqlite3 connection of the process (the bridge store's and the kept connections to 2.x's database) is opened
with a factory that times its C calls (execute, executemany, fetch*, commit, rollback) with ``thread_time``,
split by thread; and, after the rounds, the lane hand-off alone (a no-op submitted to a lane and waited for,
as ``after_forward`` does for every callback) is timed with ``process_time``. The wrappers cost Python time of
their own, so the totals of an attributed run are higher than a plain run's; compare shares, and the SQLite
figures with the plain run's totals. Together they are the part of the shadow path's CPU that stays while
the facts are written after 2.x's answer, on a lane, as they must be.

This is a benchmark, not a test: it asserts nothing and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from bridge.bootstrap import build_callback_path, build_legacy_reader, build_store
from bridge.callbacks.lanes import LANE_THREAD_PREFIX
from bridge.callbacks.routes import StatusRoute
from bridge.config import Settings
from bridge.domain.model import Origin
from bridge.metrics import BridgeMetrics
from bridge.service.ports import StaticModes
from bridge.storage.migrate import upgrade
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir

HEADERS = {"Content-Type": "application/json", "User-Agent": "curl/8.5.0"}
STATUS_PATH = "/open/crons/status"
STATUS_ROUTE = StatusRoute(from_shell=True)


def lane_cpu() -> float:
    """CPU seconds of the shadow lanes' threads so far (the rest of ``process_time`` is the calling thread's)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
               for thread in threading.enumerate() if thread.name.startswith(LANE_THREAD_PREFIX) and thread.ident)


class SqliteClock:
    """CPU seconds spent inside sqlite3's C calls, by thread kind (lanes or the calling thread)."""

    def __init__(self) -> None:
        self.lanes = 0.0
        self.caller = 0.0

    def add(self, seconds: float) -> None:
        if threading.current_thread().name.startswith(LANE_THREAD_PREFIX):
            self.lanes += seconds
        else:
            self.caller += seconds

    def timed(self, call: Any, *args: Any) -> Any:
        started = time.thread_time()
        try:
            return call(*args)
        finally:
            self.add(time.thread_time() - started)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Inside, every sqlite3.connect of this process opens a timed connection (sqlite3 is restored after)."""
        clock = self

        class TimedCursor(sqlite3.Cursor):
            def execute(self, *args: Any) -> Any:  # type: ignore[override]
                return clock.timed(super().execute, *args)

            def executemany(self, *args: Any) -> Any:  # type: ignore[override]
                return clock.timed(super().executemany, *args)

            def fetchall(self) -> Any:
                return clock.timed(super().fetchall)

            def fetchone(self) -> Any:
                return clock.timed(super().fetchone)

            def fetchmany(self, *args: Any) -> Any:
                return clock.timed(super().fetchmany, *args)

        class TimedConnection(sqlite3.Connection):
            def cursor(self, *args: Any) -> Any:  # type: ignore[override]
                return super().cursor(TimedCursor)

            def execute(self, *args: Any) -> Any:  # type: ignore[override]
                return self.cursor().execute(*args)

            def commit(self) -> None:
                clock.timed(super().commit)

            def rollback(self) -> None:
                clock.timed(super().rollback)

        # SQLAlchemy's pysqlite dialect connects through sqlite3.dbapi2, the reader through sqlite3.
        plain = sqlite3.dbapi2.connect
        sqlite3.connect = sqlite3.dbapi2.connect = functools.partial(plain, factory=TimedConnection)
        try:
            yield
        finally:
            sqlite3.connect = sqlite3.dbapi2.connect = plain


def hand_off_cpu_ms(lane: Any, calls: int = 20_000) -> float:
    """Process CPU per lane round trip: a no-op submitted to the lane and waited for, as after_forward does."""
    cpu0 = time.process_time()
    for _ in range(calls):
        lane.submit(int).result(timeout=5)
    return (time.process_time() - cpu0) * 1000 / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=1500, help="start/end pairs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--attribute", action="store_true", help="time sqlite3's C calls and the lane hand-off")
    args = parser.parse_args(argv)
    sqlite_clock = SqliteClock() if args.attribute else None
    with tempfile.TemporaryDirectory(prefix="bench-interceptor-") as tmp, \
            (sqlite_clock.installed() if sqlite_clock else nullcontext()):
        root = Path(tmp)
        data = create_legacy_data_dir(root / "ql")
        crons = [data.add_cron(f"c{i}", f"task c{i}.js", "* * * * *") for i in range(5)]
        settings = Settings.from_env({"BRIDGE_DATABASE_URL": f"sqlite:///{root}/bridge.sqlite",
                                      "BRIDGE_DATA_DIR": str(root), "BRIDGE_LEGACY_DATA_DIR": str(data.root),
                                      "BRIDGE_LEGACY_SCHEDULER": "system"})
        store = build_store(settings)
        upgrade(store.engine)
        every_origin = StaticModes(frozenset(o.value for o in Origin))
        interceptor = build_callback_path(settings, store, BridgeMetrics(), every_origin,
                                          reader=build_legacy_reader(settings, keep_connections=4)).interceptor
        sent = 0

        def execution() -> None:
            nonlocal sent
            cron, pid, begin_s = crons[sent % len(crons)], 20_000 + sent, int(time.time()) // 60 * 60
            sent += 1
            for body in (render_status_body(cron, 0, pid, f"c/{pid}.log", begin_s),
                         render_status_body(cron, 1, pid, f"c/{pid}.log", begin_s, 1, 0)):
                prepared = interceptor.before_forward(STATUS_ROUTE, body, HEADERS)
                interceptor.after_forward(prepared, 200, None)

        try:
            for _ in range(200):
                execution()
            for r in range(args.rounds):
                profile = cProfile.Profile() if args.profile and r == 0 else None
                cpu0, lanes0 = time.process_time(), lane_cpu()
                sql0 = (sqlite_clock.lanes, sqlite_clock.caller) if sqlite_clock else (0.0, 0.0)
                if profile:
                    profile.enable()
                for _ in range(args.executions):
                    execution()
                if profile:
                    profile.disable()
                cpu, lanes = time.process_time() - cpu0, lane_cpu() - lanes0
                per_callback = 1000 / (2 * args.executions)
                print(f"round {r + 1}: {cpu * per_callback:.3f} ms CPU per callback, of it {lanes * per_callback:.3f} "
                      f"in the lanes ({args.executions} executions){' (profiled)' if profile else ''}", flush=True)
                if sqlite_clock:
                    sql_lanes, sql_caller = sqlite_clock.lanes - sql0[0], sqlite_clock.caller - sql0[1]
                    print(f"  inside sqlite3's C calls: {sql_lanes * per_callback:.3f} ms in the lanes (the store), "
                          f"{sql_caller * per_callback:.3f} ms on the calling thread (2.x's database)", flush=True)
                if profile:
                    pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
            if sqlite_clock:
                print(f"lane hand-off alone: {hand_off_cpu_ms(interceptor._lane(0)):.3f} ms CPU per callback "
                      "(a no-op submitted to a lane and waited for)", flush=True)
        finally:
            interceptor.close()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
