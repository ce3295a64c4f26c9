"""`import-legacy` on releases without RunningInstances: the history is read from the task logs the release's own
shells write (tests/legacy/release_shells.py), keyed so that a second import, or an execution its callbacks already
recorded, adds nothing."""

from __future__ import annotations

import io
import json
import time
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from rich.console import Console

from bridge.bootstrap.commands import run_legacy_import
from bridge.domain.keys import imported_execution_key
from bridge.domain.model import RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.unit_of_work import SqlUnitOfWork
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.log_files import LogDirectory
from legacy_adapters.releases import profile_for
from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.importer.conftest import ImportEnv
from tests.legacy.release_shells import run_task

ZONE = "Asia/Shanghai"


@pytest.fixture(params=["v2.20.2", "v2.18.3", "v2.17.13"])
def old_env(request: pytest.FixtureRequest, env: ImportEnv, tmp_path: Path) -> ImportEnv:
    data = create_legacy_data_dir(tmp_path / "ql-old", release=request.param)
    settings = replace(env.settings, legacy_data_dir=data.root, legacy_tz=ZONE, legacy_release=request.param)
    return ImportEnv(settings, data, env.engine, env.backend)


def do_import(env: ImportEnv) -> int:
    return run_legacy_import(env.settings, console=Console(file=io.StringIO())).imported


def logged(env: ImportEnv, log_path: str, cron_id: int):  # type: ignore[no-untyped-def]
    release = env.settings.legacy_release or ""
    found = LogDirectory(env.data.log_dir, ZoneInfo(ZONE),
                         profile_for(release, "test").stop_marker).read(log_path, cron_id)
    assert found is not None
    return found


def test_task_logs_are_imported_once_with_their_times_and_no_invented_outcome(old_env: ImportEnv) -> None:
    release = old_env.settings.legacy_release or ""
    c = old_env.data.add_cron("job", "task job.sh", "0 * * * *")
    done = run_task(release, old_env.data, c, "job.sh", "echo hi\n", tz=ZONE)
    stopped = run_task(release, old_env.data, c, "job.sh", "sleep 30\n", tz=ZONE, stop_after_s=0.3)
    assert do_import(old_env) == 2
    first = logged(old_env, done, c)
    run = old_env.run(imported_execution_key(c, None, log_path_digest(done), (first.started_s or 0) * 1000))
    assert run["status"] == RunStatus.ENDED.value and run["error_summary"] is None
    assert (run["started_at_ms"], run["finished_at_ms"], run["duration_ms"]) == (
        (first.started_s or 0) * 1000, (first.ended_s or 0) * 1000, (first.duration_s or 0) * 1000)
    second = logged(old_env, stopped, c)
    halted = old_env.run(imported_execution_key(c, None, log_path_digest(stopped), (second.started_s or 0) * 1000))
    assert (halted["status"] == RunStatus.CANCELLED.value) is (release != "v2.17.13")  # v2.17 leaves no marker
    assert all(json.loads(e["payload"]).get("synthesized") for e in old_env.events(run["id"]))
    assert do_import(old_env) == 0  # a second import adds nothing
    assert len(old_env.runs()) == 2


def test_an_execution_its_callbacks_recorded_is_not_imported_again(old_env: ImportEnv) -> None:
    release = old_env.settings.legacy_release or ""
    c = old_env.data.add_cron("seen", "task seen.sh", "0 * * * *")
    log_path = run_task(release, old_env.data, c, "seen.sh", "echo hi\n", tz=ZONE)
    begin = logged(old_env, log_path, c).started_s or 0
    runs = RunService(SqlUnitOfWork(old_env.engine), clock=SystemClock())
    facts = CallbackFacts(cron_id=c, pid=4242, log_ref=log_path_digest(log_path), started_at_ms=begin * 1000,
                          duration_ms=None, exit_code=None, received_at_ms=int(time.time() * 1000))
    ShadowRecorder(runs).record_start(facts, ExecutionContext(origin="scheduled_system", evidence="test",
                                                              task_revision="r"))
    assert do_import(old_env) == 0
    assert len(old_env.runs()) == 1
