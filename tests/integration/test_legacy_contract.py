"""The callback path against each older release's backend (v2.17.13, v2.18.3, v2.19.2, v2.20.2), in-process on each
store: the v2.17–v2.20 2.x double behind the real interceptor and stop decisions, the seam block's headers beside
2.x's unchanged bodies. Every execution gets the right Run facts, the callback path records no false mismatch, and
2.x's Crontabs rows are what the same calls give a twin double with no bridge in front."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.routes import StopRoute
from bridge.service.ports import StaticModes
from bridge.service.run_service import RunService
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import mismatches_table, runs_table
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.reader import LegacyReader
from legacy_adapters.releases import ReleaseProfile, profile_for
from legacy_adapters.shell_report import EXIT_CODE_HEADER, TRAPPED_HEADER
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.older_double import OlderLegacy2xDouble
from tests.conftest import Backend
from tests.support import wiring
from tests.support.routes import SHELL_STATUS

ORIGINS = frozenset({"manual", "boot", "scheduled_node", "scheduled_system", "script"})
RELEASES = ["2.17.13", "2.18.3", "2.19.2", "2.20.2"]
ROW = ("status", "pid", "log_path", "last_execution_time", "last_running_time")


@dataclass
class Shell:
    """One task shell: what its callbacks carry (the pid its end sends: none up to v2.18.1)."""

    cron: int
    pid: int
    log: str
    begin: int
    end_pid: int | None


@dataclass
class OlderWorld:
    release: ReleaseProfile
    data: LegacyDataDir
    double: OlderLegacy2xDouble
    twin: OlderLegacy2xDouble  # the same release with no bridge in front
    interceptor: ShadowInterceptor
    runs: RunService
    store: SqlReconcileStore
    http: httpx.Client
    twin_http: httpx.Client

    def add_cron(self, name: str, schedule: str = "0 * * * *", **cols: Any) -> int:
        cron = self.data.add_cron(name, f"task {name}.sh", schedule, **cols)
        assert self.twin.data_dir.add_cron(name, f"task {name}.sh", schedule, **cols) == cron
        return cron

    def shell(self, cron: int, pid: int, log: str, begin: int) -> Shell:
        return Shell(cron, pid, log, begin, None if self.release.end_pid_may_be_empty else pid)

    def start(self, shell: Shell) -> None:
        self.send(render_status_body(shell.cron, 0, shell.pid, shell.log, shell.begin))

    def end(self, shell: Shell, exit_code: int | None = 0, *, trapped: bool = False, to: str = "both") -> None:
        """The end callback as 2.x's shell sends it (no exit_code), the seam block's headers beside it; ``to``:
        through the bridge and to the twin, or to one of them (a killed shell's trap, from each double's kill)."""
        body = render_status_body(shell.cron, 1, shell.end_pid, shell.log, shell.begin, 3)
        headers = {**({EXIT_CODE_HEADER: str(exit_code)} if exit_code is not None else {}),
                   **({TRAPPED_HEADER: "1"} if trapped else {})}
        self.send(body, headers, to)

    def send(self, body: bytes, headers: dict[str, str] | None = None, to: str = "both") -> None:
        if to in ("both", "bridge"):
            prepared = self.interceptor.before_forward(SHELL_STATUS, body, headers)
            reply = self.put(self.http, "/open/crons/status", body)
            self.interceptor.after_forward(prepared, reply.status_code, reply.content)
        if to in ("both", "twin"):
            self.put(self.twin_http, "/open/crons/status", body)

    def on_kill_trap(self, shell: Shell) -> None:
        """Each double's kill runs the shell's trap, whose end reaches that double (through the bridge or not)."""
        self.double.on_kill(lambda _cron, _pid: self.end(shell, None, trapped=True, to="bridge"))
        self.twin.on_kill(lambda _cron, _pid: self.end(shell, None, trapped=True, to="twin"))

    def stop(self, cron: int) -> None:
        body = f"[{cron}]".encode()
        prepared = self.interceptor.before_forward(StopRoute(), body)
        reply = self.put(self.http, "/open/crons/stop", body)
        assert reply.status_code == 200
        self.interceptor.after_forward(prepared, reply.status_code, reply.content)
        self.put(self.twin_http, "/open/crons/stop", body)

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

    def rows_agree(self, cron: int) -> None:
        bridged, alone = self.data.cron_row(cron), self.twin.data_dir.cron_row(cron)
        assert bridged is not None and alone is not None
        assert {k: bridged[k] for k in ROW} == {k: alone[k] for k in ROW}


@pytest.fixture(params=RELEASES)
def older(request: pytest.FixtureRequest, sql_backend: Backend, tmp_path: Path) -> Iterator[OlderWorld]:
    release = profile_for(request.param, "test")
    data = create_legacy_data_dir(tmp_path / "ql")
    twin_data = create_legacy_data_dir(tmp_path / "twin", tokens=[data.system_token])
    settings = wiring.legacy_settings(data.root, BRIDGE_LEGACY_RELEASE=request.param,
                                      BRIDGE_STOP_DECISION_WINDOW_S="0")
    bridge = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    interceptor = wiring.interceptor(settings, bridge, StaticModes(ORIGINS), reader=LegacyReader(data.database_path))
    with OlderLegacy2xDouble(data, release).start() as double, \
            OlderLegacy2xDouble(twin_data, release).start() as twin, \
            httpx.Client(base_url=double.url, timeout=10) as http, \
            httpx.Client(base_url=twin.url, timeout=10) as twin_http:
        yield OlderWorld(release, data, double, twin, interceptor, bridge.runs,
                         SqlReconcileStore(sql_backend.engine), http, twin_http)  # type: ignore[arg-type]
    interceptor.close()


def now_s() -> int:
    return int(time.time()) - 5


def test_a_succeeding_and_a_failing_run_close_by_the_exit_code_the_seam_block_reports(older: OlderWorld) -> None:
    cron = older.add_cron("ok")
    good, bad = older.shell(cron, 101, "ok_1/a.log", now_s()), older.shell(cron, 102, "ok_1/b.log", now_s() + 1)
    older.start(good)
    older.end(good, 0)
    older.start(bad)
    older.end(bad, 3)
    assert older.run(good) == {"status": "succeeded", "error_code": None, "cancel_reason": None, "exit_code": 0,
                               "synthesized": False}
    assert (older.run(bad)["status"], older.run(bad)["error_code"], older.run(bad)["exit_code"]) == (
        "failed", "process_exit_error", 3)
    assert older.mismatches() == []
    older.rows_agree(cron)


def test_a_stop_through_the_bridge_cancels_the_run_whichever_answer_comes_first(older: OlderWorld) -> None:
    cron = older.add_cron("stopped")
    shell = older.shell(cron, 201, "stopped_1/a.log", now_s())
    older.start(shell)
    # killTask's signal runs the shell's trap: its end reaches 2.x before 2.x answers the stop
    older.on_kill_trap(shell)
    older.stop(cron)
    assert older.run(shell) == {"status": "cancelled", "error_code": "cancelled_by_user",
                                "cancel_reason": "cancelled_by_user", "exit_code": None, "synthesized": False}
    assert older.mismatches() == []
    older.rows_agree(cron)


def test_a_trapped_end_with_no_stop_through_the_bridge_is_cancelled_as_stopped_in_2x(older: OlderWorld) -> None:
    cron = older.add_cron("direct")
    shell = older.shell(cron, 301, "direct_1/a.log", now_s())
    older.start(shell)
    older.end(shell, None, trapped=True)  # the panel's stop went to 2.x directly
    assert older.run(shell)["status"] == "running"
    older.decide()
    assert (older.run(shell)["status"], older.run(shell)["error_code"]) == ("cancelled", "stopped_in_legacy")
    assert older.mismatches() == []


@pytest.mark.parametrize("older", [r for r in RELEASES if profile_for(r, "test").stop_marker is not None],
                         indirect=True)  # v2.17's trap leaves no marker in the log
def test_without_the_seam_block_the_logs_stop_marker_cancels_the_run(older: OlderWorld) -> None:
    cron = older.add_cron("marked")
    shell = older.shell(cron, 401, "marked_4/2026-01-01-00-00-00-000.log", now_s())
    older.start(shell)
    older.end(shell, None)  # no header at all; v2.18.1+ write the end line only after this callback
    log = older.data.log_dir / shell.log
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"## 开始执行... 2026-01-01 00:00:00\n\nwork\n\n## 执行结束{older.release.stop_marker}... "
                   "2026-01-01 00:00:03  耗时 3 秒　　　　　\n", encoding="utf-8")
    older.decide()
    assert (older.run(shell)["status"], older.run(shell)["error_code"]) == ("cancelled", "stopped_in_legacy")


@pytest.mark.parametrize("older", [r for r in RELEASES if profile_for(r, "test").kills_single_instance],
                         indirect=True)  # from v2.20 only
def test_a_single_instance_kill_is_a_cancel_by_2x_that_names_the_next_run(older: OlderWorld) -> None:
    cron = older.add_cron("single", "* * * * *", allow_multiple_instances=0)
    old, new = older.shell(cron, 501, "single_1/a.log", now_s()), older.shell(cron, 502, "single_1/b.log", now_s() + 5)
    older.start(old)
    older.on_kill_trap(old)
    assert older.double.simulate_run_cron(cron) and older.twin.simulate_run_cron(cron)
    older.start(new)  # runCron spawns the next execution at once
    older.decide()
    assert (older.run(old)["status"], older.run(old)["error_code"]) == ("cancelled", "replaced_by_next_run")
    assert older.run(new)["status"] == "running"
    assert older.mismatches() == []
    older.rows_agree(cron)


def test_overlapping_runs_of_one_cron_are_each_closed_by_their_own_end(older: OlderWorld) -> None:
    cron = older.add_cron("overlap")
    first, second = older.shell(cron, 601, "overlap_1/a.log", now_s()), older.shell(cron, 602, "overlap_1/b.log",
                                                                                      now_s() + 2)
    older.start(first)
    older.start(second)
    older.end(first, 3)
    older.end(second, 0)
    assert (older.run(first)["status"], older.run(second)["status"]) == ("failed", "succeeded")
    assert older.mismatches() == []
    older.rows_agree(cron)


def test_a_replayed_end_changes_nothing(older: OlderWorld) -> None:
    cron = older.add_cron("replayed")
    shell = older.shell(cron, 701, "replayed_1/a.log", now_s())
    older.start(shell)
    older.end(shell, 0)
    closed = older.run(shell)
    older.end(shell, 0)
    assert older.run(shell) == closed and older.run_count(cron) == 1
    assert older.mismatches() == []
    older.rows_agree(cron)


def test_a_stop_cancels_only_the_executions_the_release_kills(older: OlderWorld) -> None:
    """v2.17–v2.19 kill the pid the Crontabs row holds (the newest start's); v2.20 every shell of the cron."""
    cron = older.add_cron("two")
    first, second = older.shell(cron, 801, "two_1/a.log", now_s()), older.shell(cron, 802, "two_1/b.log", now_s() + 1)
    older.start(first)
    older.start(second)
    shells = {first.pid: first, second.pid: second}
    older.double.on_kill(lambda _cron, pid: older.end(shells[pid], None, trapped=True, to="bridge"))
    older.twin.on_kill(lambda _cron, pid: older.end(shells[pid], None, trapped=True, to="twin"))
    older.stop(cron)
    assert older.run(second)["error_code"] == "cancelled_by_user"
    if older.release.stop_kills_every_instance:
        assert older.run(first)["error_code"] == "cancelled_by_user"
    else:
        assert older.run(first)["status"] == "running"  # 2.x never signalled it: it runs on
        older.end(first, 0)
        assert (older.run(first)["status"], older.run(first)["exit_code"]) == ("succeeded", 0)
    assert older.mismatches() == []
    older.rows_agree(cron)
