"""`ql-bridge import-legacy` on a release without RunningInstances (v2.17–v2.20): the history in 2.x's task logs.

Before v2.21 an execution's only lasting record is its log file (docs/legacy-2x.md#stops-and-log-lines-before-v221;
the Crontabs row holds the latest execution only). Each task log of a cron with an end line becomes a terminal Run
+ Attempt 1 in mode ``legacy_import``, as the RunningInstances import builds them: started at the log's start
line (else its name), finished at its end line with the ``耗时 N 秒`` duration; cancelled (``stopped_in_legacy``)
when the end line carries the release's stop marker, else ended without a reported outcome (no exit code exists
before v2.21). A log without an end line (running, or a script that called ``exit``) is counted, not imported:
its end callback or a reconcile pass settles it.

Keys: ``legacy-import:<cron>:None:<log digest>:<start ms>`` (bridge.domain.keys.imported_execution_key; a log
holds no pid). An execution already recorded by its callbacks has a Run under its execution key, which needs the
pid; so the store is also asked for a Run of the same cron and log digest, which the callbacks' Runs carry too.
A second import finds every key and adds nothing. There is no resume cursor: a rescan skips by those keys.
On a store with one writer at a time the writes are paced as the instance import's are (pacing.py), so a serving
bridge's shadow writes keep their budget while the logs are imported.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from bridge.config import Settings
from bridge.domain.aggregate import ChangeSet
from bridge.domain.events import ErrorCode
from bridge.domain.keys import imported_execution_key
from bridge.domain.ladder import open_to_running
from bridge.domain.model import (
    IMPORT_TRIGGER,
    IMPORTED_MODE,
    PROJECT_ID,
    AttemptStatus,
    Owner,
    RunAttempt,
    RunStatus,
    new_legacy_run,
)
from bridge.jobs.evidence import ENDED_WITHOUT_OUTCOME, OUTCOME_NOT_REPORTED
from bridge.jobs.import_legacy.job import DEFAULT_BATCH_SIZE, OpenedStore, _chunks, opened_import, paced_writes
from bridge.jobs.import_legacy.pacing import IMPORT_WRITE_BUDGET_MS
from bridge.jobs.import_legacy.plan import DELETED_CRON_REVISION, IMPORT_EVIDENCE, Builder
from bridge.jobs.import_legacy.summary import ImportSummary
from bridge.service.imports import ImportStore
from bridge.service.ports import Clock, TaskSnapshot
from legacy_adapters.identity import task_revision, task_snapshot
from legacy_adapters.log_files import NO_LOG, LogDirectory, LoggedExecution
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.records import LegacyCron

_SYNTH = {"synthesized": True}


def run_log_import(settings: Settings, open_store: Callable[[], OpenedStore], *,
                   open_reader: Callable[[Path], LegacyRecords], clock: Clock, logs: LogDirectory,
                   batch_size: int = DEFAULT_BATCH_SIZE, console: Console | None = None,
                   write_budget_ms: int = IMPORT_WRITE_BUDGET_MS, **_cursor: Any) -> ImportSummary:
    """Import 2.x's task logs into the bridge store; returns what was done. The crons are read from a private
    copy of 2.x's database, as ``run_import`` reads it; ``batch_size`` logs are read at a time and written in
    batches of at most that many (on SQLite, as many as ``write_budget_ms`` of write lock allows). Raises as
    ``run_import`` does."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.monotonic()
    with opened_import(settings, open_reader, open_store) as (reader, store):
        uow, pacing = paced_writes(settings, store, batch_size, write_budget_ms)
        crons = {cron.id: cron for cron in reader.iter_crons()}
        folders = {cron.log_name: cron.id for cron in crons.values() if cron.log_name and cron.log_name != NO_LOG}
        summary = ImportSummary(notes=["2.x keeps no RunningInstances before v2.21: history read from its task "
                                       "logs (no resume cursor; the keys skip what is already there)"])
        chunks = _chunks(logs.scan(0, None, folders), batch_size)
        for batch in (b for chunk in chunks for b in pacing.batches(chunk)) if pacing else chunks:
            began: list[float] = []  # when the write transaction had taken the lock
            if pacing is not None:
                pacing.wait_turn()
            counts = uow.write(partial(_write, batch=batch, crons=crons, at_ms=clock.now_ms(),
                                       payload_cap_bytes=settings.payload_cap_bytes, began=began))
            if pacing is not None:
                pacing.written(len(batch), time.monotonic() - began[-1])
            summary._add(counts)
            summary.unfinished_logs += counts["unfinished_logs"]
            summary.total += len(batch)
            summary.batches += 1
    summary.elapsed_s = time.monotonic() - started
    if console is not None:
        console.print(f"imported {summary.imported} of {summary.scanned} task logs")
    return summary


def _write(store: ImportStore, batch: list[LoggedExecution], crons: dict[int, LegacyCron], at_ms: int,
           payload_cap_bytes: int, began: list[float]) -> Counter[str]:
    """One batch in one transaction: what is already there (by key, or by cron and log digest) is skipped."""
    began.append(time.monotonic())  # inside the transaction: the write lock is held from here
    counts: Counter[str] = Counter(scanned=len(batch))
    keys = {logged.log_path: _key(logged) for logged in batch}
    present = store.existing_keys(PROJECT_ID, [k for k in keys.values() if k is not None])
    recorded = store.existing_log_refs(PROJECT_ID, [(logged.cron_id or 0, logged.log_ref) for logged in batch])
    build = Builder(at_ms, payload_cap_bytes)
    changes: list[ChangeSet] = []
    snapshots: dict[str, TaskSnapshot] = {}
    for logged in batch:
        key = keys[logged.log_path]
        if key is None or logged.cron_id is None:
            counts["unsupported"] += 1
        elif not logged.ended:
            counts["unfinished_logs"] += 1
        elif key in present or (logged.cron_id, logged.log_ref) in recorded:
            counts["skipped"] += 1
        else:
            present.add(key)
            cron = crons.get(logged.cron_id)
            revision = task_revision(cron) if cron is not None else DELETED_CRON_REVISION
            if cron is not None:
                snapshots.setdefault(revision, task_snapshot(cron, revision, at_ms))
            else:
                counts["deleted_crons"] += 1
            change, status = import_logged(build, logged, key, revision)
            changes.append(change)
            counts["imported"] += 1
            counts[f"status:{status.value}"] += 1
    for snapshot in snapshots.values():
        store.put_task_snapshot(snapshot)
    store.apply_many(changes)
    return counts


def _key(logged: LoggedExecution) -> str | None:
    if logged.cron_id is None or logged.started_s is None:
        return None
    return imported_execution_key(logged.cron_id, None, logged.log_ref, logged.started_s * 1000)


def import_logged(build: Builder, logged: LoggedExecution, key: str, revision: str) -> tuple[ChangeSet, RunStatus]:
    """A logged execution with an end line as a terminal Run + Attempt 1, each step marked synthesized."""
    started = (logged.started_s or 0) * 1000
    finished = logged.ended_s * 1000 if logged.ended_s is not None else None
    duration = logged.duration_s * 1000 if logged.duration_s is not None else None
    run = new_legacy_run(run_id=build.new_id(), cron_id=logged.cron_id or 0, task_revision=revision,
                         trigger_type=IMPORT_TRIGGER, created_at_ms=started, idempotency_key=key, origin=None,
                         origin_evidence=IMPORT_EVIDENCE, mode=IMPORTED_MODE, owner=Owner.LEGACY.value,
                         legacy_pid=None, log_ref=logged.log_ref, synthesized=True)
    change = build.create(run, {"evidence": IMPORT_EVIDENCE, "source": "log_file", **_SYNTH})
    attempt = RunAttempt(id=build.new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED,
                         executor_type="legacy_shell", callback_sequence=0, created_at_ms=started, pid=None,
                         log_artifact_id=logged.log_ref, synthesized=True)
    attempt = open_to_running(change, attempt, started_at_ms=started)
    end: dict[str, Any] = {k: v for k, v in (("finished_at_ms", finished), ("duration_ms", duration)) if v is not None}
    if logged.stopped:
        code = ErrorCode.STOPPED_IN_LEGACY.value
        change.move_attempt(attempt, AttemptStatus.CANCELLED, payload={**end, **_SYNTH}, finished_at_ms=finished,
                            error_code=code)
        reached = change.move_run(RunStatus.CANCELLED, payload={**end, **_SYNTH}, finished_at_ms=finished,
                                  duration_ms=duration, error_code=code)
    else:
        ended = ENDED_WITHOUT_OUTCOME
        payload = {**end, "outcome": OUTCOME_NOT_REPORTED, **_SYNTH}
        change.move_attempt(attempt, ended.attempt, payload=payload, finished_at_ms=finished)
        reached = change.move_run(ended.run, payload=payload, finished_at_ms=finished, duration_ms=duration)
    return change.result(), reached
