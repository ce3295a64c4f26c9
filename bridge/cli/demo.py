"""`ql-bridge demo`: the whole path on one machine, for a newcomer without a 2.x install.

It lays out a 2.x-shaped data directory, starts the 2.x test double and a real `bridge serve` process
on free loopback ports, replays the callbacks a real task shell sends (byte for byte), then shows what
the shadow store recorded. It stops everything it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bridge.cli.failures import CommandFailedError
from bridge.domain.errors import BridgeError
from bridge.domain.model import Origin
from bridge.storage.demo_queries import tally
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

CURL_HEADERS = {"Content-Type": "application/json;charset=UTF-8", "User-Agent": "curl/8.5.0",
                "Accept": "*/*", "Accept-Encoding": "deflate, gzip, br, zstd"}


ALL_ORIGINS = ",".join(o.value for o in Origin)


def serve_env(port: int, legacy_url: str, legacy_data_dir: Path, database_url: str, *,
              origins: str = ALL_ORIGINS, **extra: str) -> dict[str, str]:
    """The environment of a `bridge serve` child on loopback, in front of a 2.x (or its double) in UTC."""
    return {**os.environ, "BRIDGE_LISTEN": f"127.0.0.1:{port}", "BRIDGE_LEGACY_URL": legacy_url,
            "BRIDGE_LEGACY_DATA_DIR": str(legacy_data_dir), "BRIDGE_DATABASE_URL": database_url,
            "BRIDGE_SHADOW_ORIGINS": origins, "BRIDGE_LEGACY_TZ": "UTC", "BRIDGE_LEGACY_SCHEDULER": "system",
            **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def migrated(database_url: str, *, schema: str | None = None) -> str:
    """``database_url``, once its store (a SQLite file is created) is at the head revision."""
    engine = make_engine(database_url, pg_search_path=schema)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return database_url


@dataclass
class Crons:
    hourly: int
    seconds: int
    manual: int
    adhoc: int
    update: int


def lay_out(root: Path) -> tuple[LegacyDataDir, Crons]:
    data = create_legacy_data_dir(root)
    crons = Crons(
        hourly=data.add_cron("hourly report", "task report.sh", "0 * * * *"),
        seconds=data.add_cron("ticker", "task tick.js", "*/5 * * * * *"),
        manual=data.add_cron("backup", "task backup.py", "0 0 1 1 *"),
        adhoc=data.add_cron("sync", "task sync.js", "15 4 * * *"),
        update=data.add_cron("update", "ql update", "30 * * * *"),
    )
    return data, crons


@contextmanager
def bridge_process(env: dict[str, str], url: str) -> Iterator[subprocess.Popen[bytes]]:
    """`bridge serve` as a child process, up when /healthz answers; always stopped afterwards.

    Its log goes to a temporary file (``proc.log_file``), never to a pipe nobody drains: a chatty worker
    would block on a full pipe.
    """
    log_file = tempfile.TemporaryFile()
    # Its own process group, so nothing it started outlives it whatever happens to it.
    proc = subprocess.Popen([sys.executable, "-m", "bridge.cli", "serve"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=log_file)
    proc.log_file = log_file  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("bridge serve exited: " + read_log(proc)[-400:])
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 503):
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("bridge serve did not start within 30 s")
        yield proc
    finally:
        stop_process(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a worker left behind by a killed master



def stop_process(proc: subprocess.Popen[Any], grace_s: float = 10) -> None:
    """SIGTERM (a bridge drains its requests and shadow lanes first), SIGKILL after ``grace_s``; then gone."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)

@contextmanager
def serving_bridge(legacy_url: str, legacy_data_dir: Path, database_url: str, *, schema: str | None = None,
                   **env: str) -> Iterator[str]:
    """A `bridge_process` on a free loopback port in front of ``legacy_url``, with the environment of
    ``serve_env`` (``env`` added; its tables in PostgreSQL ``schema`` if one is named); yields its URL once it
    answers, stops it when the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if schema:
        env["BRIDGE_DATABASE_SCHEMA"] = schema
    with bridge_process(serve_env(port, legacy_url, legacy_data_dir, database_url, **env), url):
        yield url


def read_log(proc: subprocess.Popen[bytes]) -> str:
    """What a `bridge_process` child has logged so far."""
    log_file = proc.log_file  # type: ignore[attr-defined]
    log_file.seek(0)
    return str(log_file.read().decode(errors="replace"))


class Shell:
    """Sends what shell/api.sh update_cron sends, through the bridge."""

    def __init__(self, client: httpx.Client, token: str) -> None:
        self._client = client
        self._token = token

    def status(self, cron_id: int, status: int, pid: int | str, log_path: str, begin_s: int,
               running_s: int = 0, exit_code: int | None = None) -> int:
        body = render_status_body(cron_id, status, pid, log_path, begin_s, running_s, exit_code)
        return self.raw(body)

    def raw(self, body: bytes) -> int:
        headers = {**CURL_HEADERS, "Authorization": f"Bearer {self._token}"}
        reply = self._client.put(f"/open/crons/status?t={int(time.time())}", content=body, headers=headers)
        return reply.status_code


def scenarios(shell: Shell, double: Legacy2xDouble, crons: Crons, now_s: int) -> list[tuple[str, Callable[[], object]]]:
    hour = now_s - now_s % 3600
    tick = now_s - now_s % 5
    log = "report_{}/2026-12-02-{}.log".format

    def manual() -> None:
        shell._client.put("/open/crons/run", content=f"[{crons.manual}]".encode(),
                          headers={**CURL_HEADERS, "Authorization": f"Bearer {shell._token}"})
        double.simulate_run_single(crons.manual, 4242, "backup_3/manual.log")
        shell.status(crons.manual, 0, 4242, "backup_3/manual.log", now_s)
        shell.status(crons.manual, 1, 4242, "backup_3/manual.log", now_s, 4, 0)

    return [
        ("a scheduled run that succeeds", lambda: (
            shell.status(crons.hourly, 0, 1001, log(1, "a"), hour - 7199),
            shell.status(crons.hourly, 1, 1001, log(1, "a"), hour - 7199, 12, 0))),
        ("a scheduled run that fails (exit 3)", lambda: (
            shell.status(crons.hourly, 0, 1002, log(1, "b"), hour - 3599),
            shell.status(crons.hourly, 1, 1002, log(1, "b"), hour - 3599, 3, 3))),
        ("a run that never sends its end callback", lambda: shell.status(crons.hourly, 0, 1003, log(1, "c"), hour + 1)),
        ("duplicate start and end callbacks", lambda: [shell.status(crons.seconds, s, 2001, "tick/x.log", tick - 60,
                                                                    s * 2, 0 if s else None) for s in (0, 0, 1, 1)]),
        ("a late end callback for a finished run", lambda: shell.status(crons.seconds, 1, 2001, "tick/x.log",
                                                                        tick - 60, 2, 1)),
        ("two concurrent runs of one cron", lambda: (
            shell.status(crons.seconds, 0, 2002, "tick/y.log", tick - 30),
            shell.status(crons.seconds, 0, 2003, "tick/z.log", tick - 25),
            shell.status(crons.seconds, 1, 2003, "tick/z.log", tick - 25, 1, 0),
            shell.status(crons.seconds, 1, 2002, "tick/y.log", tick - 30, 7, 0))),
        ("a manual run from the panel", manual),
        ("an ad-hoc `task` run reporting under a cron id", lambda: (
            shell.status(crons.adhoc, 0, 5001, "sync/adhoc.log", now_s - 17),
            shell.status(crons.adhoc, 1, 5001, "sync/adhoc.log", now_s - 17, 2, 0))),
        ("an update.sh run (no exit code)", lambda: (
            shell.status(crons.update, 0, 6001, "update/2026-12-02-03-30-00.log", hour - 3600 * 2 + 1800 + 1),
            shell.status(crons.update, 1, 6001, "update/2026-12-02-03-30-00.log", hour - 3600 * 2 + 1800 + 1, 0))),
        ("a callback 2.x rejects (numeric status)", lambda: shell.raw(
            b'{"ids":["1"],"status":0,"pid":"7","log_path":"x.log","last_execution_time":1,"last_running_time":0}')),
        ("a callback for a cron 2.x does not know", lambda: shell.status(999, 0, 7001, "ghost.log", now_s)),
    ]


def summary(database_url: str) -> tuple[Table, dict[str, int], int]:
    engine = make_engine(database_url)
    try:
        counted = tally(engine)
    finally:
        engine.dispose()
    counts: dict[str, dict[str, int]] = {}
    for name, by_status in counted.runs.items():
        counts.setdefault(name or "unknown", {}).update(by_status)
    table = Table("origin", "runs", "by status", title="What the shadow store recorded")
    for name in sorted(counts):
        by_status = counts[name]
        table.add_row(name, str(sum(by_status.values())), ", ".join(f"{s} {n}" for s, n in sorted(by_status.items())))
    return table, dict(counted.events), counted.mismatches


# Written first into the folder the demo works in: only a folder holding it is ever emptied by a later run.
DEMO_MARKER = ".ql-bridge-demo"


class DemoFolderRefusedError(RuntimeError):
    """The --dir folder holds something the demo did not make; nothing was deleted."""


def claim_workdir(workdir: Path) -> None:
    """Make ``workdir`` the demo's: create it, or take it if it is empty, or empty it if an earlier demo made it
    (its marker is there). Anything else is refused with DemoFolderRefusedError and left untouched."""
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise DemoFolderRefusedError(f"{workdir} is not a folder the demo made; nothing was deleted")
    if workdir.is_dir() and any(workdir.iterdir()):
        if not (workdir / DEMO_MARKER).is_file():
            raise DemoFolderRefusedError(
                f"{workdir} is not empty and was not made by `ql-bridge demo` (no {DEMO_MARKER} in it); "
                "nothing was deleted: pass --dir a new or empty folder")
        import shutil

        for child in workdir.iterdir():
            if child.name == DEMO_MARKER:
                continue  # kept to the end, so an interrupted run leaves a folder the next run may empty
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEMO_MARKER).write_text("made by `ql-bridge demo`; the next demo run empties this folder\n")


def show_demo(workdir: Path, console: Console) -> None:
    """`ql-bridge demo` in ``workdir``; whatever stops it is one line and exit status 1."""
    try:
        run_demo(workdir, console)
    except (BridgeError, RuntimeError, OSError) as exc:
        raise CommandFailedError(f"demo failed: {exc}", exit_code=1) from exc


def run_demo(workdir: Path, console: Console) -> None:
    claim_workdir(workdir)
    data, crons = lay_out(workdir / "ql-data")
    database_url = migrated(f"sqlite:///{(workdir / 'bridge.sqlite').resolve()}")
    with Legacy2xDouble(data).start() as double:
        with serving_bridge(double.url, data.root, database_url, BRIDGE_SHADOW_BUDGET_MS="500") as url, \
                httpx.Client(base_url=url, timeout=10) as client:
            console.print(f"2.x double on {double.url}; bridge on {url}; 2.x data in {data.root}")
            shell = Shell(client, data.system_token)
            steps = scenarios(shell, double, crons, int(time.time()))
            with Progress(console=console, transient=False) as progress:
                task = progress.add_task("replaying task-shell traffic", total=len(steps))
                for label, step in steps:
                    progress.update(task, description=label)
                    step()
                    progress.advance(task)
            metrics = client.get("/metrics").text
    report_paths = _report(database_url, data, workdir)
    table, events, mismatches = summary(database_url)
    console.print(table)
    console.print(f"{sum(events.values())} events; {events.get('attempt.late_callback_ignored', 0)} late callbacks "
                  f"ignored; {mismatches} unplaced callbacks kept as mismatch rows.")
    failed = [line for line in metrics.splitlines() if line.startswith("ql_bridge_shadow_write_failed_total{")]
    console.print(f"shadow write failures: {len(failed) and sum(float(x.rsplit(' ', 1)[1]) for x in failed):g}")
    console.print(f"Cutover report: {report_paths[1]} (and {report_paths[0].name}); with this little traffic every "
                  "gate says insufficient data, as it should.")
    console.print("Look next: " f"BRIDGE_DATABASE_URL={database_url} ql-bridge status · "
                  "the run/attempt/event rows in that file · `ql-bridge serve` in front of your own 2.x (README).")


def _report(database_url: str, data: LegacyDataDir, workdir: Path) -> tuple[Path, Path]:
    from bridge.bootstrap.commands import write_cutover_report
    from bridge.config import Settings

    settings = Settings.from_env({"BRIDGE_DATABASE_URL": database_url, "BRIDGE_LEGACY_DATA_DIR": str(data.root),
                                  "BRIDGE_LEGACY_TZ": "UTC", "BRIDGE_LEGACY_SCHEDULER": "system"})
    return write_cutover_report(settings, out_dir=workdir / "reports", console=Console(stderr=True, quiet=True))
