"""A stop or a kill, over HTTP through a real `bridge serve` in front of the 2.x double, on both stores.

2.x's kill makes the task shell's trap send its end callback (exit 128 + N) while 2.x is still working on the
stop, so the end often reaches the bridge before 2.x's answer does. An execution 2.x stopped ends cancelled
with its source; a signal exit with no stop evidence stays failed, as 2.x says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bridge.bootstrap import build_store
from bridge.cli.demo import CURL_HEADERS, serving_bridge
from bridge.service.ports import StaticModes
from bridge.storage.engine import make_engine
from bridge.storage.schema import mismatches_table, run_attempts_table, run_events_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.bench.stores import fresh_store
from tests.support import wiring
from tests.support.node_ticks import next_tick

PANEL_TOKEN = "panel.jwt.token"
TRAP_SHELL = Path(__file__).parent / "shell" / "trap_shell_double.sh"
WINDOW_S = 1
ALL_ORIGINS = "manual,boot,scheduled_node,scheduled_system,script"


@dataclass
class StopWorld:
    data: LegacyDataDir
    double: Legacy2xDouble
    database_url: str
    schema: str | None
    root: Path
    url: str = ""
    stack: ExitStack = field(default_factory=ExitStack)

    def start_bridge(self, window_s: int = WINDOW_S) -> None:
        self.url = self.stack.enter_context(serving_bridge(
            self.double.url, self.data.root, self.database_url, origins=ALL_ORIGINS, BRIDGE_SHADOW_BUDGET_MS="2000",
            BRIDGE_DATA_DIR=str(self.root), BRIDGE_STOP_DECISION_WINDOW_S=str(window_s), schema=self.schema))

    def stop_bridge(self) -> None:
        self.stack.close()
        self.stack = ExitStack()

    # -- what the shell and the panel send, through the bridge ---------------------------------------------

    def status(self, cron: int, status: int, pid: int, log: str, begin: int, running: int = 0,
               exit_code: int | None = None) -> httpx.Response:
        body = render_status_body(cron, status, pid, log, begin, running, exit_code)
        with httpx.Client(base_url=self.url, timeout=20) as client:
            return client.put(f"/open/crons/status?t={int(time.time())}", content=body,
                              headers={**CURL_HEADERS, "Authorization": f"Bearer {self.data.system_token}"})

    def panel(self, method: str, path: str, body: bytes | None = None) -> httpx.Response:
        """The panel's call on /open (App token) or /api (its JWT)."""
        token = PANEL_TOKEN if path.startswith("/api/") else self.data.system_token
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        with httpx.Client(base_url=self.url, timeout=20) as client:
            return client.request(method, path, content=body, headers=headers)

    # -- what the bridge recorded ----------------------------------------------------------------------------

    def runs(self, cron: int) -> dict[int, dict[str, Any]]:
        """The cron's Runs by pid, with their Attempt and event types."""
        engine = make_engine(self.database_url, pg_search_path=self.schema)
        try:
            with engine.connect() as conn:
                out = {}
                for row in conn.execute(select(runs_table).where(runs_table.c.legacy_cron_id == cron)).mappings():
                    run = dict(row)
                    run["attempt"] = dict(conn.execute(select(run_attempts_table).where(
                        run_attempts_table.c.run_id == row["id"])).mappings().one())
                    run["events"] = [e.type for e in conn.execute(
                        select(run_events_table.c.type).where(run_events_table.c.run_id == row["id"])
                        .order_by(run_events_table.c.sequence))]
                    out[run["legacy_pid"]] = run
                return out
        finally:
            engine.dispose()

    def ended(self, cron: int, pid: int, timeout_s: float = 20) -> dict[str, Any]:
        """The Run of (cron, pid) once it is terminal."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.runs(cron).get(pid)
            if run is not None and run["status"] in ("succeeded", "failed", "cancelled"):
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"the Run of pid {pid} did not end: {run and run['status']}")
            time.sleep(0.1)

    def reconcile_findings(self, cron: int) -> list[str]:
        """One reconcile pass over this store and 2.x's rows (no grace): the kinds opened for this cron."""
        settings = wiring.legacy_settings(self.data.root, BRIDGE_DATABASE_URL=self.database_url,
                                          BRIDGE_DATABASE_SCHEMA=self.schema or "", BRIDGE_DATA_DIR=str(self.root),
                                          BRIDGE_RECONCILE_GRACE_S="0")
        store = build_store(settings)
        try:
            reconciler = wiring.reconciler(settings, store, StaticModes(frozenset()))
            deadline = time.monotonic() + 30
            while (result := reconciler.run_once().result) == "locked" and time.monotonic() < deadline:
                time.sleep(0.2)  # the serving bridge's own pass holds the lease
            assert result == "ok"
            with store.engine.connect() as conn:
                return sorted(r.kind for r in conn.execute(select(mismatches_table.c.kind).where(
                    mismatches_table.c.legacy_cron_id == cron, mismatches_table.c.resolved_at_ms.is_(None))))
        finally:
            store.close()


@pytest.fixture(scope="module", params=[pytest.param("sqlite", id="sqlite"),
                                        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StopWorld]:
    root = tmp_path_factory.mktemp(f"stops-{request.param}")
    data = create_legacy_data_dir(root / "ql-data")
    pg_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    with fresh_store(request.param, root, pg_url, name="stops") as (database_url, schema), \
            Legacy2xDouble(data, panel_token=PANEL_TOKEN).start() as double:
        found = StopWorld(data, double, database_url, schema, root)
        found.start_bridge()
        try:
            yield found
        finally:
            found.stop_bridge()


@pytest.fixture(autouse=True)
def no_hooks(world: StopWorld) -> Iterator[None]:
    yield
    world.double.on_kill(None)
    world.double.on_stop_answer(None)


def new_cron(world: StopWorld, schedule: str = "0 * * * *", **cols: Any) -> int:
    return world.data.add_cron(f"job-{time.monotonic_ns()}", f"task job{time.monotonic_ns()}.sh", schedule, **cols)


def the_end(world: StopWorld, cron: int, pid: int, log: str, begin: int, exit_code: int = 143) -> Callable[..., None]:
    """A hook that sends the killed shell's end callback (its trap) through the bridge."""
    def send(*_args: object) -> None:
        assert world.status(cron, 1, pid, log, begin, 3, exit_code).status_code == 200
    return send


@contextmanager
def trap_shell(world: StopWorld, cron: int, log: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real task shell (its own session, 30 s of work) that has sent its begin callback; killed if left running."""
    shell = subprocess.Popen(["bash", str(TRAP_SHELL), world.url, world.data.system_token, str(cron),
                              str(int(time.time())), log, "30"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while shell.pid not in world.runs(cron) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield shell
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()


@pytest.mark.parametrize("order", ["trap_reaches_2x_before_the_stop_marks_rows", "stop_marks_rows_first"])
def test_an_api_stop_whose_killed_shell_ends_before_2x_answers_ends_cancelled_by_user(
        world: StopWorld, order: str) -> None:
    cron, begin = new_cron(world), int(time.time()) - 30
    assert world.status(cron, 0, 501, "s/a.log", begin).status_code == 200
    send_end = the_end(world, cron, 501, "s/a.log", begin)
    if order == "trap_reaches_2x_before_the_stop_marks_rows":
        world.double.on_kill(lambda _cron, pid: send_end() if pid == 501 else None)
    else:
        world.double.on_stop_answer(send_end)

    stop = world.panel("PUT", "/open/crons/stop", f"[{cron}]".encode())

    assert stop.content == b'{"code":200}'
    (row,) = world.data.instance_rows(cron)
    expected_row = (3, 143) if order == "trap_reaches_2x_before_the_stop_marks_rows" else (2, None)
    assert (row["status"], row["exit_code"]) == expected_row  # 2.x: error 143, or stopped, by the race
    run = world.ended(cron, 501)
    assert (run["status"], run["error_code"], run["cancel_reason"]) == ("cancelled", "cancelled_by_user",
                                                                        "cancelled_by_user")
    assert (run["attempt"]["status"], run["attempt"]["exit_code"]) == ("cancelled", 143)
    assert run["cancel_requested_at_ms"] is not None and run["finished_at_ms"] is not None
    assert world.reconcile_findings(cron) == []  # 2.x's error 143 after a relayed stop is agreement


def test_an_api_stop_of_a_real_shell_whose_answer_waits_for_the_trap_ends_cancelled(world: StopWorld) -> None:
    cron = new_cron(world)
    with trap_shell(world, cron, "real/shell.log") as shell:
        world.double.on_kill(lambda _cron, pid: os.killpg(pid, signal.SIGTERM) if pid == shell.pid else None)
        # killTask signals, 2.x marks the rows and answers; here the answer waits until the trap's end callback
        # has had its answer (the shell exits 1 once curl returns), as when killAllTasks takes its time.
        world.double.on_stop_answer(lambda: shell.wait(10))
        assert world.panel("PUT", "/api/crons/stop", f"[{cron}]".encode()).content == b'{"code":200}'
        assert shell.wait(10) == 1  # the trap exits 1
        assert any(b'"status":"1"' in r.body and f'"pid":"{shell.pid}"'.encode() in r.body
                   for r in world.double.requests())  # the end reached 2.x before 2.x answered the stop
    run = world.ended(cron, shell.pid)
    assert (run["status"], run["error_code"], run["attempt"]["exit_code"]) == ("cancelled", "cancelled_by_user", 143)


def test_stop_instance_on_open_and_api_cancels_only_that_execution(world: StopWorld) -> None:
    cron, begin = new_cron(world, "*/5 * * * * *", allow_multiple_instances=1), int(time.time()) - 20
    assert world.status(cron, 0, 601, "i/a.log", begin).status_code == 200
    assert world.status(cron, 0, 602, "i/b.log", begin + 5).status_code == 200
    first, second = (row["id"] for row in world.data.instance_rows(cron))
    world.double.on_kill(lambda _cron, pid: the_end(world, cron, 601, "i/a.log", begin)() if pid == 601 else None)

    stopped = world.panel("POST", f"/open/crons/{cron}/instances/{first}/stop")

    assert (stopped.status_code, stopped.json()["code"]) == (200, 200)
    run = world.ended(cron, 601)
    assert (run["status"], run["error_code"], run["cancel_reason"], run["attempt"]["exit_code"]) == (
        "cancelled", "instance_stopped_by_user", "instance_stopped_by_user", 143)
    assert world.runs(cron)[602]["status"] == "running"  # the other instance goes on
    world.double.on_kill(None)

    assert world.panel("POST", f"/api/crons/{cron}/instances/{second}/stop").json()["code"] == 200
    assert world.status(cron, 1, 602, "i/b.log", begin + 5, 2, 143).status_code == 200  # its trap, after
    run = world.ended(cron, 602)
    assert (run["status"], run["error_code"]) == ("cancelled", "instance_stopped_by_user")
    assert run["events"][-1] == "attempt.late_callback_ignored"

    again = world.panel("POST", f"/api/crons/{cron}/instances/{second}/stop")  # HTTP 200, code 400
    assert (again.status_code, again.json()["code"]) == (200, 400)
    assert [r["status"] for r in world.data.instance_rows(cron)] == [2, 2]
    assert world.reconcile_findings(cron) == []


def test_a_refused_stop_instance_changes_nothing(world: StopWorld) -> None:
    cron, begin = new_cron(world), int(time.time()) - 20
    assert world.status(cron, 0, 611, "r/a.log", begin).status_code == 200
    (row,) = world.data.instance_rows(cron)

    refused = world.panel("POST", f"/open/crons/{cron}/instances/{row['id'] + 1000}/stop")  # no such instance

    assert (refused.status_code, refused.json()["code"]) == (200, 400)
    time.sleep(WINDOW_S + 0.5)
    assert world.runs(cron)[611]["status"] == "running"


def test_a_single_instance_run_killed_by_the_next_fire_is_cancelled_as_replaced_by_next_run(
        world: StopWorld) -> None:
    cron = new_cron(world, "*/5 * * * * *", allow_multiple_instances=0)
    begin, fired = int(time.time()) - 5, next_tick()  # the fire: taken before the kill stamps its finish time
    assert world.status(cron, 0, 701, "t/a.log", begin).status_code == 200

    assert world.double.simulate_run_cron(cron)  # runCron: kill, row stopped, cron idle, then the next spawn
    assert world.status(cron, 1, 701, "t/a.log", begin, 5, 143).status_code == 200  # the killed shell's trap
    assert world.status(cron, 0, 702, "t/b.log", fired).status_code == 200  # the next fire's execution

    (old, new) = world.data.instance_rows(cron)
    assert (old["status"], old["exit_code"], new["status"]) == (2, None, 0)
    run = world.ended(cron, 701)
    assert (run["status"], run["error_code"], run["cancel_reason"]) == ("cancelled", "replaced_by_next_run",
                                                                        "replaced_by_next_run")
    assert run["attempt"]["exit_code"] == 143
    assert world.runs(cron)[702]["status"] == "running"
    assert "terminal_status" not in world.reconcile_findings(cron)


def test_a_stop_2x_made_without_the_bridge_ends_as_stopped_in_legacy(world: StopWorld) -> None:
    cron, begin = new_cron(world), int(time.time()) - 20
    assert world.status(cron, 0, 801, "d/a.log", begin).status_code == 200
    headers = {"Authorization": f"Bearer {world.data.system_token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=world.double.url, timeout=10) as direct:  # the panel talks to 2.x directly
        assert direct.put("/open/crons/stop", content=f"[{cron}]".encode(), headers=headers).status_code == 200
    assert world.status(cron, 1, 801, "d/a.log", begin, 20, 143).status_code == 200
    run = world.ended(cron, 801)
    assert (run["status"], run["error_code"], run["attempt"]["exit_code"]) == ("cancelled", "stopped_in_legacy", 143)


def test_a_plain_kill_of_a_real_shell_with_no_stop_stays_failed(world: StopWorld) -> None:
    cron = new_cron(world)
    with trap_shell(world, cron, "k/shell.log") as shell:
        os.killpg(shell.pid, signal.SIGTERM)  # `kill -TERM` of the shell and its command, no stop anywhere
        assert shell.wait(10) == 1
    run = world.ended(cron, shell.pid)
    assert (run["status"], run["error_code"], run["attempt"]["exit_code"]) == ("failed", "process_exit_error", 143)
    (row,) = world.data.instance_rows(cron)
    assert (row["status"], row["exit_code"]) == (3, 143)  # 2.x says error too
    assert world.reconcile_findings(cron) == []


def test_a_restart_during_the_window_still_decides_with_the_exit_code(world: StopWorld) -> None:
    cron = new_cron(world, "*/5 * * * * *", allow_multiple_instances=0)
    begin = int(time.time()) - 5
    world.stop_bridge()
    world.start_bridge(window_s=4)
    try:
        fired = next_tick()  # the fire: taken before the kill stamps its finish time
        assert world.status(cron, 0, 901, "w/a.log", begin).status_code == 200
        assert world.double.simulate_run_cron(cron)
        assert world.status(cron, 1, 901, "w/a.log", begin, 5, 143).status_code == 200
        assert world.status(cron, 0, 902, "w/b.log", fired).status_code == 200
        assert world.runs(cron)[901]["status"] == "running"  # kept: the window is not over
        world.stop_bridge()  # the bridge goes down inside the window
        world.start_bridge(window_s=4)
        run = world.ended(cron, 901)
    finally:
        world.stop_bridge()
        world.start_bridge()
    assert (run["status"], run["error_code"], run["attempt"]["exit_code"]) == ("cancelled", "replaced_by_next_run",
                                                                               143)


def test_2xs_boot_reset_found_by_recovery_at_start_is_a_legacy_boot_reset(world: StopWorld) -> None:
    cron, begin = new_cron(world), int(time.time()) - 20
    assert world.status(cron, 0, 951, "b/a.log", begin).status_code == 200
    world.stop_bridge()
    try:
        world.double.simulate_boot_reset()  # 2.x restarted: initData stops every running instance
        (row,) = world.data.instance_rows(cron)
        assert (row["status"], row["finished_at"], row["exit_code"]) == (2, None, None)
    finally:
        world.start_bridge()  # startup recovery runs before it listens
    run = world.runs(cron)[951]
    assert (run["status"], run["error_code"], run["cancel_reason"]) == ("cancelled", "legacy_boot_reset",
                                                                        "legacy_boot_reset")
    assert run["attempt"]["status"] == "cancelled"
