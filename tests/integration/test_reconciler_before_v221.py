"""Reconcile and startup recovery on releases without RunningInstances (v2.17–v2.20): an execution's evidence is
its log file, written here by the release's own task shell, and its cron's Crontabs row, written as 2.x's
``status()`` writes it (back/services/cron.ts at v2.20.2; docs/legacy-2x.md#status-handler-before-v221)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bridge.bootstrap import Store
from bridge.cli.demo import ALL_ORIGINS
from bridge.config import Settings
from bridge.domain.model import RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.ports import StaticModes
from bridge.service.shadow import ShadowRecorder
from bridge.storage.reconcile_queries import SqlReconcileStore
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.log_files import LogDirectory
from legacy_adapters.process_identity import ProcProbe
from legacy_adapters.reader import LegacyReader
from legacy_adapters.records import cron_from_row
from legacy_adapters.releases import profile_for
from legacy_adapters.schema import crontab_state
from legacy_adapters.testing.datadir import LegacyDataDir, connect, create_legacy_data_dir
from tests.conftest import Backend
from tests.legacy.release_shells import run_task
from tests.support import wiring

ZONE = "Asia/Shanghai"  # 2.x's image zone: the log names and lines are read in it, not in the bridge's
RELEASES = ("v2.20.2", "v2.19.2", "v2.17.13")


class OutOfLegacyNamespace(ProcProbe):
    """This machine's /proc, read from another pid namespace than 2.x's: no process is proved alive or gone."""

    def sees_legacy(self) -> bool:
        return False


@dataclass
class World:
    release: str
    data: LegacyDataDir
    settings: Settings
    bridge: Store
    store: SqlReconcileStore
    recorder: ShadowRecorder

    def cron(self, name: str) -> int:
        return self.data.add_cron(name, f"task {name}.sh", "0 * * * *")

    def shell(self, cron_id: int, name: str, body: str = "echo hi\n", **options: float) -> tuple[str, int]:
        """Run the release's task shell; the log path and the begin second its log says."""
        log_path = run_task(self.release, self.data, cron_id, f"{name}.sh", body, tz=ZONE, **options)
        logged = self.logs().read(log_path, cron_id)
        assert logged is not None and logged.started_s is not None
        return log_path, logged.started_s

    def logs(self) -> LogDirectory:
        return LogDirectory(self.data.log_dir, ZoneInfo(ZONE),
                            profile_for(self.release, "test").stop_marker)

    def facts(self, cron_id: int, pid: int, log_path: str, begin_s: int,
              duration_s: int | None = None) -> CallbackFacts:
        return CallbackFacts(cron_id=cron_id, pid=pid, log_ref=log_path_digest(log_path), started_at_ms=begin_s * 1000,
                             duration_ms=None if duration_s is None else duration_s * 1000, exit_code=None,
                             received_at_ms=int(time.time() * 1000))

    def started(self, cron_id: int, pid: int, log_path: str, begin_s: int) -> str:
        """The start callback, through the bridge: a Run, and 2.x's row running with its pid and log path."""
        context = ExecutionContext(origin="scheduled_system", evidence="test", task_revision="r")
        run_id = self.recorder.record_start(self.facts(cron_id, pid, log_path, begin_s), context).run_id
        self.crontab(cron_id, status=0, pid=pid, log_path=log_path, last_execution_time=begin_s)
        assert run_id is not None
        return run_id

    def ended(self, cron_id: int, pid: int, log_path: str, begin_s: int, duration_s: int) -> None:
        context = ExecutionContext(origin="scheduled_system", evidence="test", task_revision="r")
        self.recorder.record_end(self.facts(cron_id, pid, log_path, begin_s, duration_s), lambda: context)
        self.crontab(cron_id, status=1, last_running_time=duration_s)

    def crontab(self, cron_id: int, **columns: object) -> None:
        names = ", ".join(f"{k} = ?" for k in columns)
        with connect(self.data.database_path) as conn:
            conn.execute(f"UPDATE Crontabs SET {names} WHERE id = ?", (*columns.values(), cron_id))

    def reconcile(self) -> list[tuple[str, int | None]]:
        reconciler = wiring.reconciler(self.settings, self.bridge, StaticModes(frozenset(ALL_ORIGINS.split(","))),
                                       reader=LegacyReader(self.data.database_path), reconcile_store=self.store,
                                       probe=OutOfLegacyNamespace())
        result = reconciler.run_once()
        assert result.result == "ok", result
        return sorted((m["kind"], m["legacy_cron_id"]) for m in self.store.open_mismatches())

    def recover(self) -> dict[str, int]:
        return dict(wiring.recover(self.settings, self.bridge, probe=OutOfLegacyNamespace()))

    def run(self, run_id: str) -> dict[str, object]:
        found = self.bridge.runs.read(lambda tx: tx.store.get_run(run_id))
        assert found is not None
        return {"status": found.status, "error_summary": found.error_summary, "finished": found.finished_at_ms,
                "duration": found.duration_ms}


@pytest.fixture(params=RELEASES)
def world(request: pytest.FixtureRequest, sql_backend: Backend, tmp_path: Path) -> Iterator[World]:
    release = request.param
    data = create_legacy_data_dir(tmp_path / "data", release=release)
    settings = wiring.legacy_settings(data.root, BRIDGE_RECONCILE_GRACE_S="0", BRIDGE_RECONCILE_TOLERANCE_S="2",
                                      BRIDGE_LEGACY_TZ=ZONE, BRIDGE_LEGACY_RELEASE=release)
    bridge = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    yield World(release, data, settings, bridge, SqlReconcileStore(sql_backend.engine), ShadowRecorder(bridge.runs))


def test_a_faithfully_recorded_execution_is_no_orphan(world: World) -> None:
    c = world.cron("faithful")
    log_path, begin = world.shell(c, "faithful")
    logged = world.logs().read(log_path, c)
    assert logged is not None
    world.started(c, 4100, log_path, begin)
    world.ended(c, 4100, log_path, begin, logged.duration_s or 1)
    assert world.reconcile() == []


def test_an_execution_around_the_bridge_is_missing_from_its_log_file(world: World) -> None:
    c = world.cron("around")
    world.shell(c, "around")  # its callbacks never reached the bridge; its log is all that is left
    assert world.reconcile() == [("missing", c)]


def test_a_run_whose_end_never_came_is_stuck_once_the_log_ended_and_the_cron_moved_on(world: World) -> None:
    c = world.cron("stuck")
    log_path, begin = world.shell(c, "stuck")
    world.started(c, 4200, log_path, begin)
    world.crontab(c, status=1)  # the end reached 2.x, not the bridge
    # and the cron row's idle sits beside the Run's running, as on v2.21
    assert world.reconcile() == [("active_state", c), ("stuck", c)]


def test_a_restart_keeps_a_live_run_open_for_its_end_callback(world: World) -> None:
    c = world.cron("live")
    log_path = f"live_{c}/2024-05-01-08-00-00-000.log"
    (world.data.log_dir / f"live_{c}").mkdir()
    # what share.sh's handle_task_start has written so far: the start line and a blank line
    (world.data.log_dir / log_path).write_bytes("## 开始执行... 2024-05-01 08:00:00\n\n".encode())
    begin = 1714521600
    run_id = world.started(c, 4300, log_path, begin)
    assert world.recover() == {"running:crontab": 1}
    world.ended(c, 4300, log_path, begin, 5)
    assert world.run(run_id)["status"] is not RunStatus.LOST


def test_a_run_that_ended_while_the_bridge_was_down_closes_as_its_log_says(world: World) -> None:
    c = world.cron("down")
    log_path, begin = world.shell(c, "down", "sleep 1\n")
    logged = world.logs().read(log_path, c)
    assert logged is not None and logged.duration_s
    run_id = world.started(c, 4400, log_path, begin)
    world.crontab(c, status=1, last_running_time=logged.duration_s)
    assert world.recover() == {"completed": 1}
    run = world.run(run_id)
    assert run["status"] is RunStatus.ENDED  # nothing reported how it ended
    assert run["error_summary"] is None
    assert run["duration"] == logged.duration_s * 1000 and run["finished"] == (logged.ended_s or 0) * 1000


def test_a_run_stopped_while_the_bridge_was_down_closes_cancelled_where_the_log_says_so(world: World) -> None:
    c = world.cron("halt")
    log_path, begin = world.shell(c, "halt", "sleep 30\n", stop_after_s=0.3)
    run_id = world.started(c, 4500, log_path, begin)
    world.crontab(c, status=1)
    world.recover()
    stopped = world.release != "v2.17.13"  # v2.17's trap leaves no marker: an end without outcome
    assert (world.run(run_id)["status"] is RunStatus.CANCELLED) is stopped


def test_a_queued_cron_reads_as_queued_before_v221(world: World) -> None:
    c = world.cron("queued")
    world.crontab(c, status=0.5)  # runSingle's queued before v2.21 (back/data/cron.ts)
    cron = LegacyReader(world.data.database_path).get_cron(c)
    assert cron is not None
    assert crontab_state(cron.status, profile_for(world.release, "test").queued_status) == "queued"
    assert cron_from_row({"id": 1, "status": 0.5}).status == 0.5


def test_the_cutover_report_counts_the_task_logs_as_2xs_executions_and_forms_no_exit_code_pair(world: World) -> None:
    from bridge.bootstrap.commands import report_sources
    from bridge.jobs.report.build import build_report

    recorded, around = world.cron("recorded"), world.cron("around")
    log_path, begin = world.shell(recorded, "recorded")
    logged = world.logs().read(log_path, recorded)
    assert logged is not None
    world.started(recorded, 4700, log_path, begin)
    world.ended(recorded, 4700, log_path, begin, logged.duration_s or 1)
    world.shell(around, "around")  # an execution that bypassed the bridge: a log, no Run
    now_ms = int(time.time() * 1000)
    assert world.bridge.engine is not None

    report = build_report(world.settings, report_sources(world.bridge.engine),
                          LegacyReader(world.data.database_path), since_ms=now_ms - 3_600_000, until_ms=now_ms,
                          release=profile_for(world.release, "test"), logs=world.logs())

    figures = {o["origin"]: o for o in report["origins"] if o["figures"]["executions_observed"]}
    observed = sum(o["figures"]["executions_observed"] for o in figures.values())
    with_run = sum(o["figures"]["with_shadow_run"] for o in figures.values())
    pairs = sum(o["figures"]["terminal_pairs"] for o in figures.values())
    agree = sum(o["figures"]["terminal_status_agree"] for o in figures.values())
    unknown = sum(o["figures"]["ended_without_outcome"] for o in figures.values())
    if profile_for(world.release, "test").stop_marker is not None:  # the log says not stopped; so does the Run
        assert (observed, with_run, pairs, agree, unknown) == (2, 1, 1, 1, 0)
    else:  # v2.17's log cannot say stopped or not, and the Run has no outcome: unknown against unknown
        assert (observed, with_run, pairs, agree, unknown) == (2, 1, 0, 0, 1)
    assert all(o["figures"]["exit_code_pairs"] == 0 for o in figures.values())
    gates = {g["gate"]: g for o in figures.values() for g in o["gates"]}
    assert gates["exit_code_agreement"]["reason"] == "not_reported_by_release"
    assert report["legacy_release"]["name"] == world.release
