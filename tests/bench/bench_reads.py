"""Benchmark: the v3 list and `ql-bridge status` against the number of Runs in the store.

    python -m tests.bench.bench_reads [--backend sqlite|sqlite-analyzed|postgres|all] [--sizes 1000,100000] [--rare 20]
                                      [--requests 60] [--blocks 6] [--repeat 3] [--pg-url URL]
                                      [--write-cost N]

For each size a fresh bridge store (tests/bench/stores.py) is filled the way a long-running bridge fills it:
three executions recorded through the real ShadowRecorder (start and end: a Run, its Attempt and nine
events each) are cloned with INSERT ... SELECT, so 100,000 Runs with 900,000 events take seconds. Most
Runs are `succeeded` runs of `scheduled_system` spread over 100 crons, each hourly, the newest created
now; `--rare` of them are `failed`, and
as many are `manual` Runs of a cron of their own, spread evenly through the history, so that each of
those filters matches a few rows among all the others (a page of 50 holds them all, so a store that
walks the table must walk all of it).

Measured side by side: the stores of every size stay open, and blocks of requests alternate between
them (ABAB...). `GET /v3/runs?...` goes through the real Flask app with a 2.x App token (in process,
no socket); `ql-bridge status` is the click command run in process. Each query prints p50 ms per size
and the ratio largest / smallest; `--repeat` runs the whole alternation again, and the ratio is
printed as its range over the repetitions. Three kinds of store: `sqlite` left without ANALYZE (the bridge
never runs it), `sqlite-analyzed` after ANALYZE (as `PRAGMA optimize` or an operator's tool leaves it:
then SQLite's planner knows how common each status is), and `postgres` after ANALYZE (as autovacuum
leaves it within a minute).

`--write-cost N` also times N executions (start and end through ShadowRecorder) on a store at the head
revision against one at the revision before it, alternated in blocks: what the newest revision's indexes
cost each execution's writes.

This is a benchmark, not a test: it asserts nothing about timing and exits 0 after printing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from click.testing import CliRunner
from flask.testing import FlaskClient
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, text

from bridge.bootstrap import Container, build_token_authority
from bridge.cli import main as cli_main
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.engine import StoreDeadlines, make_engine
from bridge.storage.migrate import current_revision, downgrade
from bridge.storage.unit_of_work import SqlUnitOfWork
from bridge.web.app import create_app
from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.bench.stores import fresh_store
from tests.support import wiring

T0 = 1_796_216_400_000
CRONS = 100
SPACING_MS = 36_000  # one Run every 36 s: each of the crons once an hour
RARE_CRON = 9_999
QUERIES = {
    "status=failed": "/v3/runs?status=failed",
    "origin=manual": "/v3/runs?origin=manual",
    "cron_id (few Runs)": f"/v3/runs?cron_id={RARE_CRON}",
    "status=failed&origin=scheduled_system": "/v3/runs?status=failed&origin=scheduled_system",
    # Many matches in either store (about 10 and 1,000 per cron): a full page of 5 in both.
    "cron_id=1&status=succeeded&limit=5": "/v3/runs?cron_id=1&status=succeeded&limit=5",
    "no filter (newest 50)": "/v3/runs",
}
BACKENDS = ("sqlite", "sqlite-analyzed", "postgres")
TARGETS = ("status=failed", "origin=manual", "ql-bridge status")


def callback(cron: int, pid: int, exit_code: int | None = None) -> CallbackFacts:
    return CallbackFacts(cron_id=cron, pid=pid, log_ref=f"log-{pid}", started_at_ms=T0 + pid,
                         duration_ms=None if exit_code is None else 1000, exit_code=exit_code,
                         received_at_ms=T0 + pid)


def record(recorder: ShadowRecorder, cron: int, pid: int, origin: str, exit_code: int) -> str:
    """One execution, start and end; returns its Run's id."""
    context = ExecutionContext(origin=origin, evidence="bench", task_revision=f"rev-{cron}")
    run_id = recorder.record_start(callback(cron, pid), context).run_id
    recorder.record_end(callback(cron, pid, exit_code), lambda: context)
    assert run_id is not None
    return run_id


def _series(postgres: bool) -> str:
    if postgres:
        return "generate_series(1, :n) AS g(i)"
    return "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) SELECT i FROM s) AS g"


def clone(engine: Engine, template: str, prefix: str, copies: int, created: str, cron: str) -> None:
    """``copies`` copies of the Run ``template`` with its Attempt and events, each with its own ids, keys
    and pid; ``created`` and ``cron`` are SQL expressions of g.i (1..copies)."""
    postgres = engine.dialect.name == "postgresql"
    run_id = f"'{prefix}' || g.i"
    replaced = {
        "runs": {"id": run_id, "idempotency_key": f"'bench:{prefix}:' || g.i", "created_at_ms": created,
                 "legacy_cron_id": cron, "legacy_pid": f"{ord(prefix) * 1_000_000} + g.i",
                 "log_ref": f"'{prefix}log' || g.i"},
        "run_attempts": {"id": f"'a{prefix}' || g.i", "run_id": run_id},
        "run_events": {"id": f"'e{prefix}' || g.i || '-' || t.sequence", "run_id": run_id,
                       "attempt_id": f"CASE WHEN t.attempt_id IS NULL THEN NULL ELSE 'a{prefix}' || g.i END"},
    }
    key = {"runs": "t.id = :template", "run_attempts": "t.run_id = :template", "run_events": "t.run_id = :template"}
    with engine.begin() as conn:
        for table, values in replaced.items():
            names = list(conn.execute(text(f"SELECT * FROM {table} WHERE 1 = 0")).keys())
            columns = ", ".join(values.get(name, f"t.{name}") for name in names)
            conn.execute(text(f"INSERT INTO {table} ({', '.join(names)}) SELECT {columns} "
                              f"FROM {table} t, {_series(postgres)} WHERE {key[table]}"),
                         {"n": copies, "template": template})


def fill(engine: Engine, size: int, rare: int, *, analyze: bool) -> None:
    """``size`` Runs: ``rare`` failed, ``rare`` manual of one cron, the rest succeeded over CRONS crons."""
    recorder = ShadowRecorder(RunService(SqlUnitOfWork(engine), clock=SystemClock()))
    common_run = record(recorder, 1, 1, "scheduled_system", 0)
    failed_run = record(recorder, 2, 2, "scheduled_system", 1)
    manual_run = record(recorder, RARE_CRON, 3, "manual", 0)
    # A history that grew at the same pace in every store and ends now: each of the CRONS crons hourly, so
    # the 1,000-Run store covers 10 hours and the 100,000-Run one six weeks (the seam check in `ql-bridge
    # status` reads the last day).
    common = size - 2 * rare - 3
    first = int(time.time() * 1000) - common * SPACING_MS
    span = common * SPACING_MS
    step = span // (rare + 1)
    i = "CAST(g.i AS BIGINT)"  # PostgreSQL's series is 32-bit
    clone(engine, common_run, "c", common, f"{first} + {i} * {SPACING_MS}", f"1 + g.i % {CRONS}")
    clone(engine, failed_run, "f", rare, f"{first} + {i} * {step} + 300", f"1 + g.i % {CRONS}")
    clone(engine, manual_run, "m", rare, f"{first} + {i} * {step} + 700", str(RARE_CRON))
    if analyze:
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()


@dataclass
class Sized:
    """One filled store and the ways to read it."""

    size: int
    url: str
    schema: str | None
    engine: Engine
    client: FlaskClient
    token: str
    env: dict[str, str]
    times: dict[str, list[float]] = field(default_factory=dict)

    def get(self, path: str) -> None:
        response = self.client.get(path, headers={"Authorization": f"Bearer {self.token}"})
        assert response.status_code == 200, response.get_data(as_text=True)[:300]

    def status(self) -> None:
        result = CliRunner().invoke(cli_main, ["status"], env=self.env, catch_exceptions=False)
        assert result.exit_code == 0, result.output[-500:]


@contextmanager
def sized_store(backend: str, size: int, rare: int, root: Path, pg_url: str) -> Iterator[Sized]:
    """``backend``: sqlite (never analyzed), sqlite-analyzed or postgres (analyzed, as autovacuum would)."""
    kind = "postgres" if backend == "postgres" else "sqlite"
    with fresh_store(kind, root, pg_url, name=f"reads{size}{backend.replace('-', '')}") as (url, schema):
        filler = make_engine(url, pg_search_path=schema, deadlines=StoreDeadlines(statement_ms=600_000))
        try:
            fill(filler, size, rare, analyze=backend != "sqlite")
        finally:
            filler.dispose()
        engine = make_engine(url, pg_search_path=schema)
        legacy = create_legacy_data_dir(root / f"ql-data-{backend}-{size}")
        env = {"BRIDGE_DATABASE_URL": url, "BRIDGE_LEGACY_DATA_DIR": str(legacy.root),
               "BRIDGE_DATA_DIR": str(root), "BRIDGE_LEGACY_URL": "http://legacy.invalid:5700"}
        if schema:
            env["BRIDGE_DATABASE_SCHEMA"] = schema
        settings = Settings.from_env(env)

        def never(request: httpx.Request) -> httpx.Response:
            raise AssertionError(f"a /v3 request reached 2.x: {request.url}")

        store = wiring.store_on(engine)
        container = Container(settings=settings, metrics=BridgeMetrics(),
                              http=httpx.Client(transport=httpx.MockTransport(never)), store=store,
                              token_authority=build_token_authority(settings))
        app = create_app(container)
        try:
            yield Sized(size, url, schema, engine, app.test_client(use_cookies=False), legacy.system_token, env)
        finally:
            container.http.close()
            engine.dispose()


def alternate(stores: list[Sized], name: str, call: Callable[[Sized], None], requests: int, blocks: int) -> None:
    """``requests`` calls per store in ``blocks`` blocks, the stores taking turns (the order flips each block)."""
    for store in stores:  # warm-up: caches, prepared statements
        for _ in range(3):
            call(store)
    per_block = max(1, requests // blocks)
    for block in range(blocks):
        for store in stores if block % 2 == 0 else reversed(stores):
            for _ in range(per_block):
                started = time.perf_counter()
                call(store)
                store.times.setdefault(name, []).append((time.perf_counter() - started) * 1000)


def plans(store: Sized) -> dict[str, str]:
    """The plan each store picks for each v3 query (driver-level, as the app sends it)."""
    from bridge.service.queries import PageRequest, parse_run_list_query
    from bridge.storage.queries import run_list_statement

    found = {}
    for name, path in QUERIES.items():
        query = dict(pair.split("=") for pair in path.partition("?")[2].split("&") if pair)
        filters, page = parse_run_list_query({k: [v] for k, v in query.items()})
        stmt = run_list_statement(filters, PageRequest(limit=page.limit))
        compiled = stmt.compile(dialect=store.engine.dialect)
        params = compiled.construct_params()
        args = tuple(params[k] for k in compiled.positiontup or ()) if compiled.positional else params
        explain = "EXPLAIN " if store.engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
        with store.engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cursor.execute(explain + str(compiled), args)
            rows = [str(row[-1] if len(row) > 1 else row[0]) for row in cursor.fetchall()]
            conn.rollback()
        found[name] = " | ".join(rows)[:160]
    return found


def measure_reads(console: Console, backend: str, sizes: list[int], args: argparse.Namespace, root: Path) -> None:
    ratios: dict[str, list[float]] = {}
    p50s: dict[str, list[list[float]]] = {}
    with ExitStack() as stack:
        started = time.perf_counter()
        stores = [stack.enter_context(sized_store(backend, size, args.rare, root, args.pg_url)) for size in sizes]
        console.print(f"[{backend}] filled {', '.join(f'{s:,}' for s in sizes)} Runs in "
                      f"{time.perf_counter() - started:.0f} s")
        for store in stores:
            for name, plan in plans(store).items():
                console.print(f"  plan {store.size:>7,} {name}: {plan}")
        calls: dict[str, Callable[[Sized], None]] = {
            name: (lambda s, p=path: s.get(p)) for name, path in QUERIES.items()}
        calls["ql-bridge status"] = Sized.status
        for _ in range(args.repeat):
            for store in stores:
                store.times.clear()
            for name, call in calls.items():
                requests = args.requests if name != "ql-bridge status" else max(6, args.requests // 4)
                alternate(stores, name, call, requests, args.blocks)
                medians = [statistics.median(s.times[name]) for s in stores]
                p50s.setdefault(name, []).append(medians)
                ratios.setdefault(name, []).append(medians[-1] / medians[0])
    table = Table(title=f"{backend}: p50 ms per read by Runs in the store (ranges over {args.repeat} repetitions)")
    table.add_column("read")
    for size in sizes:
        table.add_column(f"{size:,} Runs", justify="right")
    table.add_column(f"ratio {sizes[-1]:,} ÷ {sizes[0]:,}", justify="right")
    table.add_column("target", justify="right")
    for name, values in ratios.items():
        cells = []
        for i in range(len(sizes)):
            column = [rep[i] for rep in p50s[name]]
            cells.append(f"{min(column):.2f}–{max(column):.2f}")
        target = "≤ 2 (aim ≤ 1.2)" if name in TARGETS else ""
        table.add_row(name, *cells, f"{min(values):.2f}–{max(values):.2f}", target)
    console.print(table)


def measure_write_cost(console: Console, backend: str, executions: int, blocks: int, root: Path,
                       pg_url: str) -> None:
    """ShadowRecorder start + end per execution: head against the revision before it, alternated."""
    with ExitStack() as stack:
        sides: dict[str, tuple[ShadowRecorder, list[float]]] = {}
        for side in ("head", "head-1"):
            url, schema = stack.enter_context(fresh_store(backend, root, pg_url, name=f"write{side.replace('-', '')}"))
            engine = make_engine(url, pg_search_path=schema)
            stack.callback(engine.dispose)
            if side == "head-1":
                downgrade(engine, "-1")
            side_name = f"{side} ({current_revision(engine)})"
            sides[side_name] = (ShadowRecorder(RunService(SqlUnitOfWork(engine), clock=SystemClock())), [])
        pids = iter(range(10, 10**9))
        for recorder, _ in sides.values():  # warm-up
            for _ in range(20):
                record(recorder, 1 + next(pids) % CRONS, next(pids), "scheduled_system", 0)
        per_block = max(1, executions // blocks)
        names = list(sides)
        for block in range(blocks):
            for name in names if block % 2 == 0 else reversed(names):
                recorder, times = sides[name]
                for _ in range(per_block):
                    pid = next(pids)
                    started = time.perf_counter()
                    record(recorder, 1 + pid % CRONS, pid, "scheduled_system", 0)
                    times.append((time.perf_counter() - started) * 1000)
    table = Table(title=f"{backend}: one execution (start + end through ShadowRecorder), ms")
    for column in ("store", "p50", "mean", "p99"):
        table.add_column(column, justify="right" if column != "store" else "left")
    for name, (_, times) in sides.items():
        ordered = sorted(times)
        table.add_row(name, f"{statistics.median(times):.3f}", f"{statistics.fmean(times):.3f}",
                      f"{ordered[int(0.99 * (len(ordered) - 1))]:.3f}")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backend", choices=(*BACKENDS, "all"), default="all")
    parser.add_argument("--sizes", default="1000,100000", help="Runs in the store, comma list")
    parser.add_argument("--rare", type=int, default=20, help="Runs each rare filter matches")
    parser.add_argument("--requests", type=int, default=60, help="requests per query and store per repetition")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-cost", type=int, default=0, metavar="N",
                        help="also time N executions on head vs the revision before it")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    console = Console(width=200)
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        for backend in backends:
            measure_reads(console, backend, sizes, args, Path(tmp))
            if args.write_cost and backend != "sqlite-analyzed":
                measure_write_cost(console, backend, args.write_cost, args.blocks, Path(tmp), args.pg_url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
