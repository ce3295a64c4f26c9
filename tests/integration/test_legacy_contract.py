"""The legacy contract: one suite, run against every release line the bridge fronts (v2.17 to v2.21, the latest patch
of each and v2.18.1, the last whose end sends the pid ``''``), on each store.

Each case drives the release's 2.x double (v2.21's, or the v2.17–v2.20 one following that release's rules) behind
the real interceptor and stop decisions, reading 2.x through the records the composition root picks for the release
(``open_legacy_records``). The callbacks are what the release's shell sends, with the seam block's headers beside
them. Every execution gets the right Run facts on every release, the callback path records no false mismatch, and
2.x's own rows are what the same calls give a twin double with no bridge in front. Where a release keeps less, the
case says what the bridge records instead (``ended``, never a guessed outcome), not that the case does not apply."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bridge.bootstrap import Store
from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.routes import StopRoute
from bridge.config import Settings
from bridge.service.ports import StaticModes
from bridge.service.run_service import RunService
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import mismatches_table, runs_table
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.process_identity import ProcProbe
from legacy_adapters.release_readers import open_legacy_records
from legacy_adapters.releases import ReleaseProfile, profile_for
from legacy_adapters.schema import format_updated_at
from legacy_adapters.shell_report import EXIT_CODE_HEADER, TRAPPED_HEADER
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from legacy_adapters.testing.older_double import OlderLegacy2xDouble
from tests.conftest import Backend
from tests.support import wiring
from tests.support.node_ticks import EVERY_5_S, next_tick
from tests.support.routes import SHELL_STATUS

ORIGINS = frozenset({"manual", "boot", "scheduled_node", "scheduled_system", "script"})
RELEASES = ["2.17.13", "2.18.1", "2.18.3", "2.19.2", "2.20.2", "2.21.0"]
ROW = ("status", "pid", "log_path", "last_execution_time", "last_running_time", "updatedAt")
INSTANCE_ROW = ("cron_id", "pid", "log_path", "status", "started_at", "finished_at", "exit_code")
SIGTERM_EXIT = 143  # a v2.21 trap's $? after TERM (docs/legacy-2x.md#callback-senders)


class OutOfLegacyNamespace(ProcProbe):
    """This machine's /proc seen from another pid namespace than 2.x's: no process is proved alive or gone."""

    def sees_legacy(self) -> bool:
        return False


class PairedClock:
    """The clock of two doubles given the same calls in the same order: each one's n-th read of the time is the
    same moment (the first to read it takes it), so the rows they write match to the millisecond."""

    def __init__(self) -> None:
        self._moments: list[float] = []
        self._reads: dict[str, int] = {}
        self._lock = threading.Lock()

    def of(self, side: str) -> Callable[[], float]:
        def read() -> float:
            with self._lock:
                n = self._reads.get(side, 0)
                self._reads[side] = n + 1
                if n == len(self._moments):
                    self._moments.append(time.time())
                return self._moments[n]
        return read


def double_for(data: LegacyDataDir, release: ReleaseProfile, clock: Callable[[], float]) -> Legacy2xDouble:
    """The release's 2.x double: v2.21's own, or the v2.17–v2.20 one following ``release``'s rules."""
    if release.has_running_instances:
        return Legacy2xDouble(data, clock=clock)
    return OlderLegacy2xDouble(data, release, clock=clock)


@dataclass
class Shell:
    """One task shell: what its callbacks carry (the pid its end sends: none up to v2.18.1)."""

    cron: int
    pid: int
    log: str
    begin: int
    end_pid: int | None


@dataclass
class ReleaseWorld:
    release: ReleaseProfile
    data: LegacyDataDir
    double: Legacy2xDouble
    twin: Legacy2xDouble  # the same release with no bridge in front
    interceptor: ShadowInterceptor
    runs: RunService
    store: SqlReconcileStore
    http: httpx.Client
    twin_http: httpx.Client
    settings: Settings
    bridge: Store

    def add_cron(self, name: str, schedule: str = "0 * * * *", **cols: Any) -> int:
        cron = self.data.add_cron(name, f"task {name}.sh", schedule, **cols)
        assert self.twin.data_dir.add_cron(name, f"task {name}.sh", schedule, **cols) == cron
        return cron

    def shell(self, cron: int, pid: int, log: str, begin: int) -> Shell:
        return Shell(cron, pid, log, begin, None if self.release.end_pid_may_be_empty else pid)

    def start(self, shell: Shell) -> None:
        self.send(render_status_body(shell.cron, 0, shell.pid, shell.log, shell.begin))

    def end(self, shell: Shell, exit_code: int | None = 0, *, trapped: bool = False, to: str = "both",
            seam: bool = True) -> None:
        """The end callback as the release's shell sends it (an exit code in the body from v2.21 only: the script's,
        or 128 + the signal from the trap), the seam block's headers beside it unless ``seam`` is False; ``to``:
        through the bridge and to the twin, or to one of them (a killed shell's trap, from each double's kill)."""
        reported = SIGTERM_EXIT if trapped else exit_code
        body = render_status_body(shell.cron, 1, shell.end_pid, shell.log, shell.begin, 3,
                                  reported if self.release.sends_exit_code else None)
        headers = {**({EXIT_CODE_HEADER: str(exit_code)} if exit_code is not None else {}),
                   **({TRAPPED_HEADER: "1"} if trapped else {})} if seam else {}
        self.send(body, headers, to)

    def send(self, body: bytes, headers: dict[str, str] | None = None, to: str = "both") -> None:
        """``to``: ``both`` (through the bridge, and to the twin), ``bridge``, ``twin``, or ``around`` (to 2.x and
        the twin, the bridge down: the seam block's failover sends 2.x's call unchanged)."""
        if to == "around":
            self.put(self.http, "/open/crons/status", body)
        if to in ("both", "bridge"):
            prepared = self.interceptor.before_forward(SHELL_STATUS, body, headers)
            reply = self.put(self.http, "/open/crons/status", body)
            self.interceptor.after_forward(prepared, reply.status_code, reply.content)
        if to in ("both", "twin", "around"):
            self.put(self.twin_http, "/open/crons/status", body)

    def write_log(self, shell: Shell, duration_s: int | None = None) -> None:
        """The task log the release's shell writes: its start line, and once it has ended its end line."""
        log = self.data.log_dir / shell.log
        log.parent.mkdir(parents=True, exist_ok=True)
        begun = datetime.fromtimestamp(shell.begin, UTC)
        text = f"## 开始执行... {begun:%Y-%m-%d %H:%M:%S}\n\nwork\n"
        if duration_s is not None:
            ended = datetime.fromtimestamp(shell.begin + duration_s, UTC)
            text += f"\n## 执行结束... {ended:%Y-%m-%d %H:%M:%S}  耗时 {duration_s} 秒　　　　　\n"
        log.write_text(text, encoding="utf-8")

    def restart(self) -> dict[str, int]:
        """A new bridge process's startup recovery, as `serve` runs it: its reader and evidence chosen by bootstrap
        for the release the settings name."""
        return dict(wiring.recover(self.settings, self.bridge, probe=OutOfLegacyNamespace()))

    def reconcile(self) -> None:
        reconciler = wiring.reconciler(self.settings, self.bridge, StaticModes(ORIGINS), probe=OutOfLegacyNamespace())
        assert reconciler.run_once().result == "ok"

    def on_kill_trap(self, shell: Shell) -> None:
        """Each double's kill runs the shell's trap, whose end reaches that double (through the bridge or not)."""
        self.double.on_kill(lambda _cron, _pid: self.end(shell, None, trapped=True, to="bridge"))
        self.twin.on_kill(lambda _cron, _pid: self.end(shell, None, trapped=True, to="twin"))

    def trap_later(self, *shells: Shell, seam: bool = True) -> Callable[[], None]:
        """Each double's kills are remembered; the call returned sends the killed shells' trapped ends, as their
        traps' callbacks arrive once 2.x has written its rows: to the double through the bridge, and to the twin."""
        by_pid = {shell.pid: shell for shell in shells}
        killed: list[tuple[str, int]] = []
        self.double.on_kill(lambda _cron, pid: killed.append(("bridge", pid)))
        self.twin.on_kill(lambda _cron, pid: killed.append(("twin", pid)))

        def send() -> None:
            for to, pid in killed:
                self.end(by_pid[pid], None, trapped=True, to=to, seam=seam)
        return send

    def stop(self, cron: int) -> None:
        body = f"[{cron}]".encode()
        prepared = self.interceptor.before_forward(StopRoute(), body)
        reply = self.put(self.http, "/open/crons/stop", body)
        assert reply.status_code == 200
        self.interceptor.after_forward(prepared, reply.status_code, reply.content)
        self.put(self.twin_http, "/open/crons/stop", body)

    def panel_run(self, cron: int) -> Shell:
        """``PUT /crons/run`` through 2.x's API (to both doubles), and the task shell its runSingle spawns: before
        v2.21 runSingle picks the child's pid and log path; from v2.21 the double is told them as it dequeues."""
        for client in (self.http, self.twin_http):
            assert self.put(client, "/open/crons/run", f"[{cron}]".encode()).status_code == 200
        if self.release.has_running_instances:
            pid, log = 4_0001, log_path(f"panel_{cron}", now_s())
            assert self.double.simulate_run_single(cron, pid, log) and self.twin.simulate_run_single(cron, pid, log)
        else:
            pid, log = self.double.spawned(cron)  # type: ignore[attr-defined]
            assert self.twin.spawned(cron) == (pid, log)  # type: ignore[attr-defined]
        return self.shell(cron, pid, log, int(time.time()))

    def child_exited(self, shell: Shell) -> None:
        """The spawned child's exit, which Node hears (and up to v2.20 answers by idling the row)."""
        if not self.release.has_running_instances:
            self.double.child_exited(shell.pid)  # type: ignore[attr-defined]
            self.twin.child_exited(shell.pid)  # type: ignore[attr-defined]

    def origin(self, shell: Shell) -> str:
        key = f"legacy:{shell.cron}:{shell.pid}:{log_path_digest(shell.log)}:{shell.begin * 1000}"
        (row,) = self.store.runs_by_keys([key]).values()
        return str(self.runs.get_run(row.id).origin)

    def stop_in_2x(self, cron: int) -> None:
        """The panel's stop sent to 2.x itself (and to the twin), not through the bridge."""
        for client in (self.http, self.twin_http):
            assert self.put(client, "/open/crons/stop", f"[{cron}]".encode()).status_code == 200

    def put(self, client: httpx.Client, path: str, body: bytes) -> httpx.Response:
        return client.put(path, content=body, headers={"Authorization": f"Bearer {self.data.system_token}",
                                                       "Content-Type": "application/json"})

    def decide(self) -> object:
        return self.interceptor.stop_decisions.decide_due()  # type: ignore[attr-defined]

    def run(self, shell: Shell) -> dict[str, Any]:
        key = f"legacy:{shell.cron}:{shell.pid}:{log_path_digest(shell.log)}:{shell.begin * 1000}"
        (row,) = self.store.runs_by_keys([key]).values()
        run = self.runs.get_run(row.id)
        (attempt,) = self.runs.get_attempts(run.id)
        return {"status": run.status.value, "error_code": run.error_code, "cancel_reason": run.cancel_reason,
                "exit_code": attempt.exit_code, "synthesized": run.synthesized}

    def run_count(self, cron: int) -> int:
        with self.store.read() as conn:
            return len(conn.execute(select(runs_table.c.id).where(runs_table.c.legacy_cron_id == cron)).all())

    def mismatches(self) -> list[str]:
        with self.store.read() as conn:
            return [r.kind for r in conn.execute(select(mismatches_table.c.kind))]

    def nothing_false(self, cron: int) -> None:
        """The callback path and every pass recorded no mismatch, and 2.x's rows of the cron are the twin's."""
        assert self.mismatches() == []
        self.rows_agree(cron)

    def rows_agree(self, cron: int) -> None:
        """2.x's rows of the cron are what the twin with no bridge in front holds: its Crontabs row and, from
        v2.21, its RunningInstances rows."""
        bridged, alone = self.data.cron_row(cron), self.twin.data_dir.cron_row(cron)
        assert bridged is not None and alone is not None
        assert {k: bridged[k] for k in ROW} == {k: alone[k] for k in ROW}
        if self.release.has_running_instances:
            assert [{k: r[k] for k in INSTANCE_ROW} for r in self.data.instance_rows(cron)] == \
                [{k: r[k] for k in INSTANCE_ROW} for r in self.twin.data_dir.instance_rows(cron)]
        else:
            assert self.data.query("SELECT name FROM sqlite_master WHERE name = 'RunningInstances'") == []


@pytest.fixture(params=RELEASES)
def world(request: pytest.FixtureRequest, sql_backend: Backend, tmp_path: Path) -> Iterator[ReleaseWorld]:
    release = profile_for(request.param, "test")
    data = create_legacy_data_dir(tmp_path / "ql", release=f"v{request.param}")
    twin_data = create_legacy_data_dir(tmp_path / "twin", tokens=[data.system_token], release=f"v{request.param}")
    settings = wiring.legacy_settings(data.root, BRIDGE_LEGACY_RELEASE=request.param,
                                      BRIDGE_STOP_DECISION_WINDOW_S="0", BRIDGE_RECONCILE_GRACE_S="0")
    bridge = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    interceptor = wiring.interceptor(settings, bridge, StaticModes(ORIGINS),
                                     reader=open_legacy_records(release, data.database_path))
    clock = PairedClock()
    with double_for(data, release, clock.of("bridged")).start() as double, \
            double_for(twin_data, release, clock.of("twin")).start() as twin, \
            httpx.Client(base_url=double.url, timeout=10) as http, \
            httpx.Client(base_url=twin.url, timeout=10) as twin_http:
        yield ReleaseWorld(release, data, double, twin, interceptor, bridge.runs,
                           SqlReconcileStore(sql_backend.engine), http, twin_http,  # type: ignore[arg-type]
                           settings, bridge)
    interceptor.close()


def now_s() -> int:
    return int(time.time()) - 5


def log_path(folder: str, begin_s: int) -> str:
    """Where the release's shell writes an execution's log: ``<folder>/<begin, to the ms>.log`` (UTC here)."""
    return f"{folder}/{datetime.fromtimestamp(begin_s, UTC):%Y-%m-%d-%H-%M-%S}-000.log"


def test_a_succeeding_and_a_failing_run_close_by_the_exit_code_the_seam_block_reports(world: ReleaseWorld) -> None:
    cron = world.add_cron("ok")
    good, bad = world.shell(cron, 101, "ok_1/a.log", now_s()), world.shell(cron, 102, "ok_1/b.log", now_s() + 1)
    world.start(good)
    world.end(good, 0)
    world.start(bad)
    world.end(bad, 3)
    assert world.run(good) == {"status": "succeeded", "error_code": None, "cancel_reason": None, "exit_code": 0,
                               "synthesized": False}
    assert (world.run(bad)["status"], world.run(bad)["error_code"], world.run(bad)["exit_code"]) == (
        "failed", "process_exit_error", 3)
    world.nothing_false(cron)


def test_a_stop_through_the_bridge_cancels_the_run_whichever_answer_comes_first(world: ReleaseWorld) -> None:
    cron = world.add_cron("stopped")
    shell = world.shell(cron, 201, "stopped_1/a.log", now_s())
    world.start(shell)
    # killTask's signal runs the shell's trap: its end reaches 2.x before 2.x answers the stop
    world.on_kill_trap(shell)
    world.stop(cron)
    assert world.run(shell) == {"status": "cancelled", "error_code": "cancelled_by_user",
                                "cancel_reason": "cancelled_by_user", "synthesized": False,
                                "exit_code": SIGTERM_EXIT if world.release.sends_exit_code else None}
    world.nothing_false(cron)


def test_a_shell_killed_outside_2x_ends_as_2x_records_it_else_as_its_trap_says(world: ReleaseWorld) -> None:
    """A signal from outside 2.x (no stop anywhere): v2.21 records the trap's exit code, an error, and the Run
    follows 2.x's row; before, 2.x records no outcome, and the seam block's trap header is the only evidence."""
    cron = world.add_cron("direct")
    shell = world.shell(cron, 301, "direct_1/a.log", now_s())
    world.start(shell)
    world.end(shell, None, trapped=True)
    assert world.run(shell)["status"] == "running"  # kept: it may be a stop's
    world.decide()
    run = world.run(shell)
    if world.release.has_running_instances:
        assert (run["status"], run["error_code"], run["exit_code"]) == ("failed", "process_exit_error", SIGTERM_EXIT)
    else:
        assert (run["status"], run["error_code"]) == ("cancelled", "stopped_in_legacy")
    world.nothing_false(cron)


def test_a_stop_made_in_2x_without_the_seam_block_is_cancelled_where_2x_records_it(world: ReleaseWorld) -> None:
    """The panel's stop went to 2.x, and the shell had no seam block: 2.x's record of the stop is all there is (v2.21's
    stopped instance row, the older releases' log end line). v2.17's trap leaves no marker: nothing says how the
    execution ended, and its Run says so (``ended``), neither succeeded nor cancelled."""
    cron = world.add_cron("marked")
    shell = world.shell(cron, 401, "marked_4/2026-01-01-00-00-00-000.log", now_s())
    world.start(shell)
    traps = world.trap_later(shell, seam=False)
    world.stop_in_2x(cron)
    traps()
    log = world.data.log_dir / shell.log  # v2.18.1+ write the end line only after the end callback
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"## 开始执行... 2026-01-01 00:00:00\n\nwork\n\n## 执行结束{world.release.stop_marker or ''}... "
                   "2026-01-01 00:00:03  耗时 3 秒　　　　　\n", encoding="utf-8")
    world.decide()
    if world.release.stop_marker is None:
        assert (world.run(shell)["status"], world.run(shell)["exit_code"]) == ("ended", None)
    else:
        assert (world.run(shell)["status"], world.run(shell)["error_code"]) == ("cancelled", "stopped_in_legacy")
    world.nothing_false(cron)


def test_a_scheduled_fire_of_a_running_single_instance_cron(world: ReleaseWorld) -> None:
    """From v2.20 2.x kills the previous execution (a cancel by 2.x that names the next run); before, it does not,
    and both executions run on and each closes by its own end."""
    # allow_multiple_instances arrives with the kill, in v2.20.0: before, every cron may overlap itself
    single = {"allow_multiple_instances": 0} if world.release.kills_single_instance else {}
    cron = world.add_cron("single", EVERY_5_S, **single)  # a 6-field schedule: Node's scheduler fires it
    old, new = world.shell(cron, 501, "single_1/a.log", now_s()), world.shell(cron, 502, "single_1/b.log", next_tick())
    world.start(old)
    traps = world.trap_later(old)
    killed = world.double.simulate_run_cron(cron)
    assert world.twin.simulate_run_cron(cron) == killed == world.release.kills_single_instance
    traps()
    world.start(new)  # runCron spawns the next execution
    world.decide()
    if killed:
        assert (world.run(old)["status"], world.run(old)["error_code"]) == ("cancelled", "replaced_by_next_run")
    else:
        assert world.run(old)["status"] == "running"
        world.end(old, 0)
        assert (world.run(old)["status"], world.run(old)["exit_code"]) == ("succeeded", 0)
    assert world.run(new)["status"] == "running"
    world.nothing_false(cron)


def test_overlapping_runs_of_one_cron_are_each_closed_by_their_own_end(world: ReleaseWorld) -> None:
    cron = world.add_cron("overlap")
    first, second = world.shell(cron, 601, "overlap_1/a.log", now_s()), world.shell(cron, 602, "overlap_1/b.log",
                                                                                      now_s() + 2)
    world.start(first)
    world.start(second)
    world.end(first, 3)
    world.end(second, 0)
    assert (world.run(first)["status"], world.run(second)["status"]) == ("failed", "succeeded")
    world.nothing_false(cron)


def test_a_replayed_end_changes_nothing(world: ReleaseWorld) -> None:
    cron = world.add_cron("replayed")
    shell = world.shell(cron, 701, "replayed_1/a.log", now_s())
    world.start(shell)
    world.end(shell, 0)
    closed = world.run(shell)
    world.end(shell, 0)
    assert world.run(shell) == closed and world.run_count(cron) == 1
    world.nothing_false(cron)


def test_a_stop_cancels_only_the_executions_the_release_kills(world: ReleaseWorld) -> None:
    """v2.17–v2.19 kill the pid the Crontabs row holds (the newest start's); v2.20 every shell of the cron."""
    cron = world.add_cron("two")
    first, second = world.shell(cron, 801, "two_1/a.log", now_s()), world.shell(cron, 802, "two_1/b.log", now_s() + 1)
    world.start(first)
    world.start(second)
    shells = {first.pid: first, second.pid: second}
    world.double.on_kill(lambda _cron, pid: world.end(shells[pid], None, trapped=True, to="bridge"))
    world.twin.on_kill(lambda _cron, pid: world.end(shells[pid], None, trapped=True, to="twin"))
    world.stop(cron)
    assert world.run(second)["error_code"] == "cancelled_by_user"
    if world.release.stop_kills_every_instance:
        assert world.run(first)["error_code"] == "cancelled_by_user"
    else:
        assert world.run(first)["status"] == "running"  # 2.x never signalled it: it runs on
        world.end(first, 0)
        assert (world.run(first)["status"], world.run(first)["exit_code"]) == ("succeeded", 0)
    world.nothing_false(cron)


def test_a_bridge_restart_mid_run_keeps_the_live_run_and_closes_the_ended_one_as_2x_records_it(
        world: ReleaseWorld) -> None:
    """The bridge stops while two executions run and starts again: the one still running keeps its Run open for its
    end; the one whose end went around the bridge to 2.x closes as 2.x's records say: v2.21's row (its exit code),
    before, the cron row and the log (its duration; no outcome). Then reconcile finds nothing false."""
    live_cron, gone_cron = world.add_cron("live"), world.add_cron("gone")
    begin = now_s() - 10
    live = world.shell(live_cron, 901, log_path(f"live_{live_cron}", begin), begin)
    gone = world.shell(gone_cron, 902, log_path(f"gone_{gone_cron}", begin), begin)
    world.start(live)
    world.start(gone)
    world.write_log(live)
    world.end(gone, 0, to="around")  # the bridge is down: the seam block sends 2.x's call unchanged
    world.write_log(gone, duration_s=3)
    world.restart()
    assert world.run(live)["status"] == "running"
    if world.release.has_running_instances:
        assert (world.run(gone)["status"], world.run(gone)["exit_code"]) == ("succeeded", 0)
    else:
        assert (world.run(gone)["status"], world.run(gone)["exit_code"]) == ("ended", None)
    world.end(live, 0)
    assert (world.run(live)["status"], world.run(live)["exit_code"]) == ("succeeded", 0)
    world.reconcile()
    world.nothing_false(live_cron)
    world.rows_agree(gone_cron)


@pytest.mark.parametrize("noticed_by", ["reconcile", "restart"])
def test_2x_restarting_while_an_execution_runs_cancels_its_run_as_a_boot_reset(world: ReleaseWorld,
                                                                               noticed_by: str) -> None:
    """2.x's boot sets every cron idle (and from v2.21 every running instance stopped); the task shell was killed
    with its container and wrote no end line. On every release the Run is cancelled as a boot reset, by the next
    reconcile pass or by the recovery of a bridge that restarted too: v2.21's stopped row says so, before v2.21
    the Crontabs rows the boot idled all at once, beside a log without an end line."""
    quiet = world.add_cron("quiet")
    cron = world.add_cron("cut")
    begin = now_s() - 30
    shell = world.shell(cron, 951, log_path(f"cut_{cron}", begin), begin)
    world.start(shell)
    world.write_log(shell)
    world.double.simulate_boot_reset()
    world.twin.simulate_boot_reset()
    world.reconcile() if noticed_by == "reconcile" else world.restart()
    run = world.run(shell)
    assert (run["status"], run["error_code"]) == ("cancelled", "legacy_boot_reset")
    world.reconcile()  # the cancelled Run against 2.x's records: nothing to report
    world.nothing_false(cron)
    world.rows_agree(quiet)


def test_a_shell_that_ends_without_its_end_callback_is_not_taken_for_a_boot_reset(world: ReleaseWorld) -> None:
    """A ``.sh`` script's ``exit 3`` ends the task shell before its end line and callback. Up to v2.20 a panel run's
    exit handler then idles that one cron row: one row stamped, not the boot's every row. Nothing says how it
    ended, and the Run stays open as 2.x's record of it does."""
    world.add_cron("other")
    cron = world.add_cron("quits")
    begin = now_s() - 30
    shell = world.shell(cron, 961, log_path(f"quits_{cron}", begin), begin)
    world.start(shell)
    world.write_log(shell)
    if world.release.idles_panel_runs_on_exit:  # runSingle's cp.on('exit'): this row idle, its pid left
        exited = format_updated_at(int(time.time() * 1000))
        for data in (world.data, world.twin.data_dir):
            data.query("UPDATE Crontabs SET status = 1, updatedAt = ? WHERE id = ?", (exited, cron))
    world.reconcile()
    assert world.run(shell)["status"] == "running"
    world.restart()
    assert world.run(shell)["status"] == "running"
    world.rows_agree(cron)


def test_a_panel_run_through_2xs_api_is_a_manual_run_closed_by_its_exit_code(world: ReleaseWorld) -> None:
    cron = world.add_cron("panel")
    shell = world.panel_run(cron)
    world.start(shell)
    world.end(shell, 3)
    world.child_exited(shell)
    assert world.origin(shell) == "manual"
    assert (world.run(shell)["status"], world.run(shell)["exit_code"]) == ("failed", 3)
    world.reconcile()
    world.nothing_false(cron)


def test_a_scheduled_fire_is_recorded_as_the_schedulers_with_its_outcome(world: ReleaseWorld) -> None:
    cron = world.add_cron("ticker", "* * * * *")
    fired = int(time.time()) // 60 * 60  # crond starts the shell on the minute; the shell takes its begin second
    shell = world.shell(cron, 971, log_path(f"ticker_{cron}", fired), fired)
    world.start(shell)
    world.end(shell, 0)
    assert world.origin(shell) == "scheduled_system"
    assert (world.run(shell)["status"], world.run(shell)["exit_code"]) == ("succeeded", 0)
    world.nothing_false(cron)


def test_a_stop_then_a_panel_run_of_a_single_instance_cron_is_no_replacement(world: ReleaseWorld) -> None:
    """The panel's stop went to 2.x, and a panel run of the same single-instance cron began a second after the
    stopped one ended: only runCron, on a Node scheduled fire, replaces a run; a panel run never does."""
    single = {"allow_multiple_instances": 0} if world.release.kills_single_instance else {}
    cron = world.add_cron("rerun", "0 0 1 1 *", **single)  # a schedule that does not fire now
    begin = now_s()  # once: the log name and the begin are one second, as the shell takes them
    stopped = world.shell(cron, 981, log_path(f"rerun_{cron}", begin), begin)
    world.start(stopped)
    traps = world.trap_later(stopped)
    world.stop_in_2x(cron)
    traps()
    rerun = world.panel_run(cron)
    world.start(rerun)
    world.decide()
    run = world.run(stopped)
    assert (run["status"], run["error_code"]) == ("cancelled", "stopped_in_legacy")
    assert world.run(rerun)["status"] == "running"
    world.nothing_false(cron)
