"""`bridge import-legacy` on both SQL stores: 2.x's RunningInstances become Runs, once, resumably, read-only."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import delete, func, select

from bridge.bootstrap.commands import run_legacy_import
from bridge.jobs.import_legacy.backup import ImportRefusedError
from bridge.jobs.import_legacy.summary import ImportSummary, print_summary
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.imports import SqlImportStore
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.report_queries import ReportQueries
from bridge.storage.runs import SqlRunStore
from bridge.storage.schema import bridge_settings_table, run_events_table, runs_table, task_snapshots_table
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.identity import instance_import_key, task_revision
from legacy_adapters.online_backup import backup_copy
from legacy_adapters.reader import LegacyReader
from legacy_adapters.schema import InstanceStatus
from tests.importer.conftest import BEGIN_S, ImportEnv, Instance, add_instances

FINISHED, STOPPED, ERROR, RUNNING = (int(InstanceStatus.FINISHED), int(InstanceStatus.STOPPED),
                                     int(InstanceStatus.ERROR), int(InstanceStatus.RUNNING))
TERMINAL_PATH = ["run.created", "run.queued", "run.dispatching", "attempt.claimed", "attempt.starting",
                 "attempt.running", "run.running"]


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def do_import(env: ImportEnv, **kw: Any) -> ImportSummary:
    return run_legacy_import(env.settings, console=quiet(), **kw)


def imported_run(env: ImportEnv, instance_id: int) -> dict[str, Any]:
    """The Run imported for the execution of 2.x's row ``instance_id`` (its key names the execution)."""
    instance = next(iter(LegacyReader(env.data.database_path).iter_instances(after_id=instance_id - 1, batch_size=1)))
    assert instance.id == instance_id
    return env.run(instance_import_key(instance))


def payloads(env: ImportEnv, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(e["payload"]) for e in env.events(run_id)]


def snapshot(env: ImportEnv) -> dict[str, Any]:
    """The store's import-relevant state with ids and wall-clock stamps left out (they differ between stores)."""
    volatile = {"id", "run_id", "attempt_id", "received_at_ms", "request_fingerprint"}
    runs = {}
    for run in env.runs():
        attempts = [{k: v for k, v in a.items() if k not in volatile | {"created_at_ms"}}
                    for a in env.attempts(run["id"])]
        events = [(e["sequence"], e["type"], e["actor_type"], e["actor_id"], e["payload"], e["dedupe_key"])
                  for e in env.events(run["id"])]
        runs[run["idempotency_key"]] = ({k: v for k, v in run.items() if k not in volatile}, attempts, events)
    snaps = [{k: v for k, v in s.items() if k != "created_at_ms"}
             for s in env.rows(task_snapshots_table, task_snapshots_table.c.task_revision)]
    return {"runs": runs, "snapshots": snaps, "cursor": env.cursor()}


def history(env: ImportEnv) -> tuple[int, list[int]]:
    """A cron and one instance of every kind 2.x leaves behind (plus one of a deleted cron)."""
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    ids = add_instances(env.data, [
        Instance(cron, FINISHED, BEGIN_S + 1, BEGIN_S + 4, 0, pid=101, log_path="job_1/a.log"),
        Instance(cron, ERROR, BEGIN_S + 3601, BEGIN_S + 3608, 2, pid=102, log_path="job_1/b.log"),
        Instance(cron, STOPPED, BEGIN_S + 7201, BEGIN_S + 7230, 143, pid=103, log_path="job_1/c.log"),
        Instance(cron, STOPPED, BEGIN_S + 10801, None, None, pid=104, log_path="job_1/d.log"),  # boot reset
        Instance(cron, FINISHED, 1_796_216_497.5, 1_796_216_499.25, 0, pid=105, log_path="job_1/e.log"),
        Instance(99, FINISHED, BEGIN_S + 5, BEGIN_S + 6, 0, pid=106, log_path="gone_99/f.log"),  # deleted cron
    ])
    return cron, ids


def test_statuses_and_times_are_mapped_to_terminal_runs_in_milliseconds(env: ImportEnv) -> None:
    cron, ids = history(env)
    summary = do_import(env)
    assert (summary.imported, summary.skipped, summary.handed_to_shadow, summary.scanned) == (6, 0, 0, 6)
    assert summary.by_status == {"succeeded": 3, "failed": 1, "cancelled": 2}
    assert summary.finish_time_unknown == 1 and summary.deleted_crons == 1
    expected = {  # instance -> (run status, started ms, finished ms, duration ms, exit code, error code)
        ids[0]: ("succeeded", 1_796_216_401_000, 1_796_216_404_000, 3_000, 0, None),
        ids[1]: ("failed", 1_796_220_001_000, 1_796_220_008_000, 7_000, 2, "process_exit_error"),
        ids[2]: ("cancelled", 1_796_223_601_000, 1_796_223_630_000, 29_000, 143, "cancelled_by_user"),
        ids[3]: ("cancelled", 1_796_227_201_000, None, None, None, "finish_time_unknown"),
        ids[4]: ("succeeded", 1_796_216_497_500, 1_796_216_499_250, 1_750, 0, None),
        ids[5]: ("succeeded", 1_796_216_405_000, 1_796_216_406_000, 1_000, 0, None),
    }
    revision = task_revision(LegacyReader(env.data.database_path).get_cron(cron))  # type: ignore[arg-type]
    for instance_id, (status, started, finished, duration, exit_code, error) in expected.items():
        run = imported_run(env, instance_id)
        assert run["idempotency_key"] == f"legacy-import:{run['legacy_cron_id']}:{run['legacy_pid']}:" \
            f"{run['log_ref']}:{started}"
        (attempt,) = env.attempts(run["id"])
        assert (run["status"], run["started_at_ms"], run["finished_at_ms"], run["duration_ms"], run["error_code"]) \
            == (status, started, finished, duration, error)
        assert (attempt["status"], attempt["started_at_ms"], attempt["finished_at_ms"], attempt["exit_code"],
                attempt["error_code"]) == (status, started, finished, exit_code, error)
        assert (run["mode"], run["owner"], run["trigger_type"], run["origin"], run["origin_evidence"]) == (
            "legacy_import", "legacy", "legacy_import", None, "legacy_import")
        assert run["synthesized"] and attempt["synthesized"]
        assert run["created_at_ms"] == run["queued_at_ms"] == started  # the Run row is consistent in time
        events = env.events(run["id"])
        assert [e["type"] for e in events] == [*TERMINAL_PATH, f"attempt.{status}", f"run.{status}"]
        assert run["event_sequence"] == len(events) and run["version"] == 0
        assert {(e["actor_type"], e["actor_id"]) for e in events} == {("system", "legacy_import")}
        assert all(p["synthesized"] is True for p in payloads(env, run["id"]))
        assert payloads(env, run["id"])[-1] == {"from": "running", "to": status, "synthesized": True, **{
            k: v for k, v in (("finished_at_ms", finished), ("duration_ms", duration), ("exit_code", exit_code),
                              ("error_code", error)) if v is not None}}
        if instance_id == ids[5]:
            assert (run["task_id"], run["task_revision"], run["legacy_cron_id"]) == ("legacy-cron:99",
                                                                                      "deleted-cron", 99)
        else:
            assert (run["task_id"], run["task_revision"], run["legacy_cron_id"]) == (f"legacy-cron:{cron}",
                                                                                      revision, cron)
    snaps = env.rows(task_snapshots_table, task_snapshots_table.c.task_revision)
    assert [(s["task_revision"], s["task_id"], s["command"], s["schedule"]) for s in snaps] == [
        (revision, f"legacy-cron:{cron}", "task job.sh", "0 * * * *")]
    assert env.cursor() == str(ids[-1])


def test_boot_reset_rows_become_cancelled_with_finish_time_unknown(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    (boot_reset,) = add_instances(env.data, [Instance(cron, STOPPED, BEGIN_S + 1)])  # no finished_at, no exit_code
    do_import(env)
    run = imported_run(env, boot_reset)
    (attempt,) = env.attempts(run["id"])
    assert (run["status"], run["error_code"], run["finished_at_ms"], run["duration_ms"]) == (
        "cancelled", "finish_time_unknown", None, None)
    assert (attempt["status"], attempt["error_code"], attempt["finished_at_ms"], attempt["exit_code"]) == (
        "cancelled", "finish_time_unknown", None, None)
    assert payloads(env, run["id"])[-1]["error_code"] == "finish_time_unknown"


def test_running_rows_become_active_shadow_runs_that_the_end_callback_closes(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    log_path = "job_1/2026-12-02-13-00-01-000.log"
    (running,) = add_instances(env.data, [Instance(cron, RUNNING, BEGIN_S + 1, pid=777, log_path=log_path)])
    summary = do_import(env)
    assert (summary.handed_to_shadow, summary.imported) == (1, 0)
    key = f"legacy:{cron}:777:{log_path_digest(log_path)}:{(BEGIN_S + 1) * 1000}"
    run = env.run(key)
    (attempt,) = env.attempts(run["id"])
    assert (run["status"], run["mode"], run["owner"], run["origin"], run["legacy_pid"], run["started_at_ms"]) == (
        "running", "shadow", "legacy", "scheduled_node", 777, (BEGIN_S + 1) * 1000)
    assert (attempt["status"], attempt["pid"], attempt["log_artifact_id"]) == ("running", 777,
                                                                              log_path_digest(log_path))
    assert [e["type"] for e in env.events(run["id"])] == TERMINAL_PATH
    assert SqlReconcileStore(env.engine).active_legacy_runs((-1, ""), 10)[0].id == run["id"]  # recovery sees it

    recorder = ShadowRecorder(RunService(env.backend.uow, clock=SystemClock()))  # type: ignore[arg-type]
    end = CallbackFacts(cron_id=cron, pid=777, log_ref=log_path_digest(log_path), started_at_ms=(BEGIN_S + 1) * 1000,
                        duration_ms=9_000, exit_code=0, received_at_ms=(BEGIN_S + 10) * 1000)
    result = recorder.record_end(end, lambda: None)
    assert (result.outcome, result.run_id) == (Outcome.CLOSED, run["id"])
    closed = env.run(key)
    assert (closed["status"], closed["duration_ms"]) == ("succeeded", 9_000)
    assert env.attempts(run["id"])[0]["exit_code"] == 0
    assert env.cursor() == str(running)


def test_a_running_row_the_shadow_already_recorded_is_skipped(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    log_path = "job_1/x.log"
    add_instances(env.data, [Instance(cron, RUNNING, BEGIN_S + 1, pid=55, log_path=log_path),
                             Instance(cron, FINISHED, BEGIN_S + 3601, BEGIN_S + 3602, 0, pid=56, log_path="job_1/y")])
    recorder = ShadowRecorder(RunService(env.backend.uow, clock=SystemClock()))  # type: ignore[arg-type]
    start = CallbackFacts(cron_id=cron, pid=55, log_ref=log_path_digest(log_path), started_at_ms=(BEGIN_S + 1) * 1000,
                          duration_ms=None, exit_code=None, received_at_ms=(BEGIN_S + 1) * 1000)
    assert recorder.record_start(start, ExecutionContext("manual", "run_single_row", "rev")).outcome is \
        Outcome.STARTED
    summary = do_import(env)
    assert (summary.skipped, summary.handed_to_shadow, summary.imported) == (1, 0, 1)
    assert len(env.runs()) == 2


@pytest.mark.parametrize("blind_looks, looks", [(1, 2), (2, 4)], ids=["seen-at-write", "insert-lost-retried"])
def test_a_shadow_write_racing_the_import_is_skipped_not_duplicated(
        env: ImportEnv, monkeypatch: pytest.MonkeyPatch, blind_looks: int, looks: int) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    log_path = "job_1/x.log"
    add_instances(env.data, [Instance(cron, FINISHED, BEGIN_S + 1, BEGIN_S + 2, 0, pid=54, log_path="job_1/w"),
                             Instance(cron, RUNNING, BEGIN_S + 61, pid=55, log_path=log_path)])
    recorder = ShadowRecorder(RunService(env.backend.uow, clock=SystemClock()))  # type: ignore[arg-type]
    start = CallbackFacts(cron_id=cron, pid=55, log_ref=log_path_digest(log_path), started_at_ms=(BEGIN_S + 61) * 1000,
                          duration_ms=None, exit_code=None, received_at_ms=(BEGIN_S + 61) * 1000)
    recorder.record_start(start, ExecutionContext("manual", "run_single_row", "rev"))
    real = SqlImportStore.existing_keys
    seen: list[int] = []

    def blind(self: Any, project_id: str, keys: Any) -> set[str]:
        seen.append(1)  # the shadow Run "commits" only after the first blind_looks looks
        return set() if len(seen) <= blind_looks else real(self, project_id, keys)

    monkeypatch.setattr(SqlImportStore, "existing_keys", blind)
    summary = do_import(env)
    assert len(seen) == looks and (summary.imported, summary.skipped, summary.handed_to_shadow) == (1, 1, 0)
    assert len(env.runs()) == 2 and env.run(start.execution_key)["origin"] == "manual"


def test_a_second_import_imports_nothing(env: ImportEnv) -> None:
    cron, _ = history(env)
    add_instances(env.data, [Instance(cron, RUNNING, BEGIN_S + 20_000, pid=9, log_path="job_1/r.log")])
    first = do_import(env)
    state = snapshot(env)
    events = len(env.events())
    again = do_import(env)
    assert (again.imported, again.handed_to_shadow, again.scanned) == (0, 0, 0)
    rescan = do_import(env, resume=False)  # the cursor ignored: the idempotency keys still skip everything
    assert (rescan.imported, rescan.handed_to_shadow, rescan.skipped) == (0, 0, first.scanned)
    assert snapshot(env) == state and len(env.events()) == events


def test_a_lost_cursor_imports_nothing_twice(env: ImportEnv) -> None:
    history(env)
    first = do_import(env)
    state = snapshot(env)
    with env.engine.begin() as conn:
        conn.execute(delete(bridge_settings_table).where(bridge_settings_table.c.key == "import_cursor"))
    again = do_import(env)
    assert (again.resumed_after, again.imported, again.skipped) == (0, 0, first.imported)
    assert snapshot(env) == state


def test_an_interrupted_import_resumes_after_its_last_committed_batch(
        env: ImportEnv, fresh_store: Callable[[], ImportEnv]) -> None:
    cron, ids = history(env)
    ids += add_instances(env.data, [Instance(cron, RUNNING, BEGIN_S + 20_000, pid=9, log_path="job_1/r.log")])

    def interrupt(last_id: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        do_import(env, batch_size=3, after_batch=interrupt)
    assert env.cursor() == str(ids[2]) and len(env.runs()) == 3
    resumed = do_import(env, batch_size=3)
    assert (resumed.resumed_after, resumed.scanned, resumed.skipped) == (ids[2], len(ids) - 3, 0)

    straight = fresh_store()
    do_import(straight, batch_size=3)
    assert snapshot(env) == snapshot(straight)


def test_a_batch_that_fails_midway_leaves_nothing_of_itself(env: ImportEnv, monkeypatch: pytest.MonkeyPatch,
                                                            fresh_store: Callable[[], ImportEnv]) -> None:
    _, ids = history(env)
    real = SqlImportStore.advance_import_cursor
    calls: list[int] = []

    def fails_second_time(self: Any, last_id: int, at_ms: int) -> None:
        calls.append(last_id)
        if len(calls) == 2:  # batch 2's Runs are inserted, its cursor write fails
            raise RuntimeError("store went away")
        real(self, last_id, at_ms)

    monkeypatch.setattr(SqlImportStore, "advance_import_cursor", fails_second_time)
    with pytest.raises(RuntimeError):
        do_import(env, batch_size=3)
    assert env.cursor() == str(ids[2]) and len(env.runs()) == 3  # batch 2 rolled back whole
    monkeypatch.setattr(SqlImportStore, "advance_import_cursor", real)
    do_import(env, batch_size=3)
    straight = fresh_store()
    do_import(straight, batch_size=3)
    assert snapshot(env) == snapshot(straight)


def test_the_batched_insert_writes_exactly_what_run_store_apply_writes(
        env: ImportEnv, monkeypatch: pytest.MonkeyPatch, fresh_store: Callable[[], ImportEnv]) -> None:
    cron, _ = history(env)
    add_instances(env.data, [Instance(cron, RUNNING, BEGIN_S + 20_000, pid=9, log_path="job_1/r.log")])
    do_import(env)

    def one_by_one(self: Any, changes: Any) -> None:
        for change in changes:
            self.apply(change)  # SqlRunStore.apply, the RunTransaction.commit path

    monkeypatch.setattr(SqlRunStore, "apply_many", one_by_one)
    applied = fresh_store()
    do_import(applied)
    assert snapshot(env) == snapshot(applied)


def test_a_file_that_is_not_a_2x_database_is_refused_and_nothing_is_written(env: ImportEnv) -> None:
    path = env.data.database_path
    path.unlink()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE something_else (id INTEGER PRIMARY KEY)")
    with pytest.raises(ImportRefusedError) as refused:
        do_import(env)
    assert refused.value.reason == "not_legacy" and refused.value.code == "LEGACY_IMPORT_REFUSED"
    path.write_bytes(b"this is not an SQLite file at all" * 100)
    with pytest.raises(ImportRefusedError, match="not a QingLong 2.x database"):
        do_import(env)
    path.unlink()
    with pytest.raises(ImportRefusedError) as missing:
        do_import(env)
    assert missing.value.reason == "missing"
    assert env.runs() == [] and env.cursor() is None
    assert list(env.settings.data_dir.glob(".legacy-import-*")) == []  # the temp copies are gone too


def test_a_database_that_already_holds_3_0_tables_is_refused(env: ImportEnv) -> None:
    history(env)
    with closing(sqlite3.connect(env.data.database_path)) as conn:
        conn.execute("CREATE TABLE Runs (id TEXT)")
    with pytest.raises(ImportRefusedError) as refused:
        do_import(env)
    assert refused.value.reason == "unsupported"
    assert env.runs() == [] and env.cursor() is None


def test_no_legacy_data_dir_is_refused(env: ImportEnv) -> None:
    with pytest.raises(ImportRefusedError) as refused:
        run_legacy_import(replace(env.settings, legacy_data_dir=None), console=quiet())
    assert refused.value.reason == "not_configured"
    assert env.runs() == []


def test_the_2x_database_file_is_left_byte_for_byte_unchanged(env: ImportEnv) -> None:
    history(env)
    db_dir = env.data.database_path.parent
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in db_dir.iterdir()}
    summary = do_import(env)
    assert summary.imported == 6
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in db_dir.iterdir()}
    assert after == before  # same bytes, and no -journal / -wal / -shm file appeared
    assert list(env.settings.data_dir.glob(".legacy-import-*")) == []


def test_instances_are_streamed_in_batches_never_loaded_at_once(env: ImportEnv,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    add_instances(env.data, [Instance(cron, FINISHED, BEGIN_S + i * 60, BEGIN_S + i * 60 + 5, 0, pid=1000 + i,
                                      log_path=f"job_1/{i}.log") for i in range(23)])
    fetched: list[int] = []
    real_fetch = LegacyReader._fetch

    def spy(self: LegacyReader, sql: str, params: Any = ()) -> Any:
        rows = real_fetch(self, sql, params)
        if '"RunningInstances"' in sql:
            fetched.append(len(rows))
        return rows

    monkeypatch.setattr(LegacyReader, "_fetch", spy)
    batches: list[int] = []
    summary = do_import(env, batch_size=5, after_batch=batches.append)
    assert summary.imported == 23 and summary.batches == 5
    assert fetched and max(fetched) <= 5 and sum(fetched) == 23
    assert len(batches) == 5 and batches == sorted(batches)


def test_backup_copy_restarts_when_2x_writes_during_it_and_ends_consistent(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    add_instances(env.data, [Instance(cron, FINISHED, BEGIN_S + i, BEGIN_S + i + 1, 0, log_path="x" * 200)
                             for i in range(400)])  # a few dozen pages
    steps: list[int] = []

    def concurrent_write(remaining: int, total: int) -> None:
        steps.append(remaining)
        if len(steps) <= 12:  # 2.x keeps writing while the first steps run
            add_instances(env.data, [Instance(cron, FINISHED, BEGIN_S + 9_000 + len(steps), None, 0)])

    copy = env.settings.data_dir / "copy.sqlite"
    env.settings.data_dir.mkdir(parents=True, exist_ok=True)
    backup_copy(env.data.database_path, copy, pages=1, sleep_s=0, on_step=concurrent_write)
    assert any(b >= a for a, b in zip(steps, steps[1:]))  # SQLite restarted the copy (no progress in a step)
    assert any(a - b > 1 for a, b in zip(steps, steps[1:]))  # ... so the step grew and the copy could finish
    with closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT count(*) FROM RunningInstances").fetchone()[0] == 412
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_imported_history_stays_out_of_reconciliation_and_reports(env: ImportEnv) -> None:
    history(env)
    do_import(env)
    store = SqlReconcileStore(env.engine)
    assert store.unseen_runs(0, 0, 2**62, (-1, ""), 100) == []
    assert store.duplicate_groups(0, 100) == []
    assert store.active_legacy_runs((-1, ""), 100) == []
    assert ReportQueries(env.engine).runs_created_by_origin(0, 2**62) == {}


def replayed_history(env: ImportEnv) -> None:
    """An execution 2.x recorded three times (replayed start callbacks), then another execution."""
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    same = {"pid": 301, "log_path": "job_1/r.log"}
    add_instances(env.data, [
        Instance(cron, ERROR, BEGIN_S + 1, BEGIN_S + 9, 4, **same),  # the execution, closed by its own end
        Instance(cron, ERROR, BEGIN_S + 1, BEGIN_S + 9, 4, **same),  # a replayed start, closed by the same end
        Instance(cron, STOPPED, BEGIN_S + 1, None, None, **same),  # replayed after the end, stopped at 2.x's boot
        Instance(cron, FINISHED, BEGIN_S + 61, BEGIN_S + 62, 0, pid=302, log_path="job_1/s.log"),
    ])


def imported_runs(env: ImportEnv) -> list[tuple[str, int | None, int | None, list[int | None]]]:
    runs = sorted(env.runs(), key=lambda r: r["started_at_ms"])
    return [(r["status"], r["legacy_pid"], r["finished_at_ms"], [a["exit_code"] for a in env.attempts(r["id"])])
            for r in runs]


ONE_RUN_PER_EXECUTION = [("failed", 301, (BEGIN_S + 9) * 1000, [4]), ("succeeded", 302, (BEGIN_S + 62) * 1000, [0])]


def test_an_execution_2x_recorded_three_times_is_one_run_from_the_row_its_own_end_closed(env: ImportEnv) -> None:
    replayed_history(env)

    summary = do_import(env)

    assert (summary.scanned, summary.imported, summary.replayed, summary.skipped) == (4, 2, 2, 0)
    assert imported_runs(env) == ONE_RUN_PER_EXECUTION
    again = do_import(env, resume=False)  # a rescan finds the execution's Run from any of its rows
    assert (again.imported, again.replayed, again.skipped) == (0, 2, 2)


def test_rows_of_one_execution_in_two_batches_still_make_one_run(env: ImportEnv) -> None:
    replayed_history(env)

    summary = do_import(env, batch_size=2)  # the first batch, holding the execution's first rows, decides

    assert (summary.scanned, summary.imported, summary.replayed, summary.skipped) == (4, 2, 1, 1)
    assert imported_runs(env) == ONE_RUN_PER_EXECUTION


def test_the_reconciler_and_the_report_leave_every_row_of_an_imported_execution_alone(env: ImportEnv) -> None:
    from bridge.bootstrap.commands import report_sources
    from bridge.cli.demo import ALL_ORIGINS
    from bridge.jobs.report.build import build_report
    from bridge.service.ports import StaticModes
    from tests.importer.conftest import judging_all_history
    from tests.support import wiring

    replayed_history(env)
    do_import(env, batch_size=2)
    reconciler = wiring.reconciler(judging_all_history(env.settings), wiring.store_on(env.engine, env.backend.uow),
                                   StaticModes(frozenset(ALL_ORIGINS.split(","))))
    assert reconciler.run_once().stats["findings"] == 0
    report = build_report(env.settings, report_sources(env.engine), LegacyReader(env.data.database_path),
                          since_ms=(BEGIN_S - 60) * 1000, until_ms=(BEGIN_S + 3600) * 1000)
    assert sum(o["figures"]["legacy_import_excluded"] for o in report["origins"]) == 4


def test_the_summary_prints_as_a_table(env: ImportEnv) -> None:
    history(env)
    summary = do_import(env)
    out = Console(file=io.StringIO(), width=120)
    print_summary(summary, out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "imported (legacy_import Runs)" in text and "finish_time_unknown" in text
    assert "skipped (already present)" in text and "handed to the shadow path" in text


def test_events_of_an_import_are_counted_once_per_run(env: ImportEnv) -> None:
    history(env)
    do_import(env)
    with env.engine.connect() as conn:
        per_run = conn.execute(select(run_events_table.c.run_id, func.count()).group_by(run_events_table.c.run_id))
        counts = {n for _, n in per_run}
        runs = conn.execute(select(func.count()).select_from(runs_table)).scalar()
    assert counts == {9} and runs == 6


def test_odd_rows_are_counted_not_guessed(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    odd_status, ms_already = add_instances(env.data, [
        Instance(cron, 7, BEGIN_S + 1, BEGIN_S + 2, 0),  # a status 2.x does not define
        Instance(cron, FINISHED, (BEGIN_S + 1) * 1000, BEGIN_S + 2, 0, pid=8),  # a start already in ms: unusable
    ])
    summary = do_import(env)
    assert (summary.unsupported, summary.imported, summary.unusable_times) == (1, 1, 1)
    assert all(r["idempotency_key"] != f"legacy-import:{odd_status}" for r in env.runs())
    run = env.run(f"legacy-import:{ms_already}")
    assert (run["started_at_ms"], run["finished_at_ms"], run["duration_ms"]) == (None, (BEGIN_S + 2) * 1000, None)
    assert env.cursor() == str(ms_already)
