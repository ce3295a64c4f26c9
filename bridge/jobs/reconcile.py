"""Reconciler: one bounded pass comparing 2.x's tables with the shadow store (docs/reconciliation.md#reconcile-passes).

Everything is read in keyset-paged batches (memory stays flat as data grows) and 2.x's database is only
ever held for one short read per batch. Each disagreement becomes a mismatch row (and one deduped
`run.legacy_projection_mismatch` event when it names a Run), and so does a 2.x value no rule can judge
(`invalid_legacy_value`) and an execution 2.x recorded more than once (`legacy_duplicate_instance`). A
mismatch is closed, not deleted, once a pass judged its subject again and did not find it again; what a
pass did not judge stays open, until no pass can judge it any more: then it is closed as expired, with the
reason (projections.reconcile.JudgedSubjects) and the pass; so is a callback the bridge could not place
(``compat.*``), once it was last seen before the lookback. A pass that fails midway records why (a code, never
a message), closes nothing, and leaves the rest to the next one.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import islice
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from bridge.domain.errors import BridgeError
from bridge.domain.events import ErrorCode, EventType
from bridge.domain.keys import import_key
from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import RUN_ACTIVE, Mode, Origin
from bridge.jobs.evidence import ExecutionEvidence, InstanceRowEvidence
from bridge.jobs.reconcile_logs import PassContext
from bridge.jobs.stop_decisions import RECONCILER, Replacements, legacy_stop_code
from bridge.metrics import BridgeMetrics
from bridge.service.pending_ends import PendingEndStore
from bridge.service.ports import Clock, MismatchRecord, ModeSource
from bridge.service.reconcile import ComparedRun, ReconcileStore
from bridge.service.run_service import RunService, RunTransaction
from bridge.service.shadow import ShadowRecorder
from bridge.storage.errors import reconcile_failure_code
from legacy_adapters.identity import instance_execution_key, instance_import_key, speaking_row
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.process_identity import ProcessHandle, ProcProbe
from legacy_adapters.records import LegacyCron, LegacyInstance
from legacy_adapters.scheduler_mode import SchedulerMode
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.reconcile import (
    INVALID_LEGACY_VALUE,
    KEY_COLUMNS,
    LEGACY_DUPLICATE_INSTANCE,
    PAST_LOOKBACK,
    Finding,
    JudgedSubjects,
    RecordedAgain,
    compare_cron,
    compare_ended,
    compare_running,
    cron_defects,
    instance_defects,
    invalid_value,
)

log = logging.getLogger("bridge.jobs.reconcile")
T = TypeVar("T")
_PROJECTION_OF_KIND = {MismatchKind.ACTIVE_STATE: "crontab_status", MismatchKind.PID: "crontab_pid",
                       LEGACY_DUPLICATE_INSTANCE: "running_instance"}
_PROJECTION_OF_TABLE = {"Crontabs": "crontab_times", "RunningInstances": "running_instance"}


@dataclass(frozen=True)
class ReconcileSettings:
    tolerance_s: int = 2
    grace_s: int = 120
    lookback_s: int = 7 * 86_400
    batch_size: int = 500
    lease_ms: int = 10 * 60_000
    # A 2.x time further ahead than this is no time the pass can place (it would never leave the grace window).
    future_s: int = 86_400


@dataclass
class PassResult:
    result: str  # ok | failed | locked
    reason: str | None = None
    stats: dict[str, int] = field(default_factory=dict)


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def failure_code(exc: BaseException) -> str:
    """What a failed pass records: the bridge's error code, else the exception's type; never its message."""
    if isinstance(exc, BridgeError):
        return exc.code
    return reconcile_failure_code(exc) or type(exc).__name__


class Reconciler:
    def __init__(self, store: ReconcileStore, runs: RunService, reader: LegacyRecords, modes: ModeSource,
                 metrics: BridgeMetrics, clock: Clock, *, recorder: ShadowRecorder, pending_ends: PendingEndStore,
                 scheduler_mode: SchedulerMode,
                 tz: ZoneInfo, enabled_since: Callable[[str], int | None] = lambda origin: 0,
                 settings: ReconcileSettings | None = None, probe: ProcProbe | None = None,
                 evidence: ExecutionEvidence | None = None, queued_status: float = 3) -> None:
        """``evidence``: the records of 2.x's executions the release keeps (bootstrap chooses; RunningInstances by
        default); ``queued_status``: the release's queued ``Crontabs.status`` (ReleaseProfile.queued_status)."""
        self._store = store
        self._evidence = evidence or InstanceRowEvidence(reader)
        self._queued_status = queued_status
        self._runs = runs
        self._recorder = recorder  # cancels the Runs of executions 2.x shows stopped
        self._pending = pending_ends  # Runs whose pending end the stop decider settles
        self._reader = reader
        self._modes = modes
        self._metrics = metrics
        self._clock = clock
        self._scheduler_mode = scheduler_mode
        self._tz = tz
        self._replacements = Replacements(scheduler_mode, tz)
        self._enabled_since = enabled_since
        self._settings = settings or ReconcileSettings()
        self._probe = probe or ProcProbe()
        self._judges_processes = False
        self._holder = f"{socket.gethostname()}:{os.getpid()}"
        self._cron = lru_cache(maxsize=4096)(self._read_cron)
        self._findings = 0
        self._judged = JudgedSubjects(())  # the open mismatches a pass began with, and those it judged again
        self._replays: dict[str, RecordedAgain] = {}  # Runs whose execution 2.x holds more than one row for

    @property
    def reader(self) -> LegacyRecords:
        return self._reader

    def run_once(self) -> PassResult:
        started = self._clock.now_ms()
        with self._store.singleton(self._holder, started, self._settings.lease_ms) as held:
            if not held:
                self._metrics.reconcile("locked")
                return PassResult("locked", "another reconciler holds the lock")
            return self._guarded_pass(started)

    def _guarded_pass(self, started: int) -> PassResult:
        self._cron.cache_clear()
        # Without 2.x's processes in sight (another pid namespace) no process can be proved gone: a pid here
        # may be anything of ours, so no instance is judged stuck in such a pass.
        self._judges_processes = self._probe.sees_legacy()
        pass_id = self._store.open_pass(started)
        try:
            stats = self._pass(pass_id, started)
            stats["resolved"] = self._store.resolve_unseen(self._judged.ids, started, self._clock.now_ms(), pass_id)
            stats["expired"] = self._expire(pass_id, started)
            self._store.close_pass(pass_id, self._clock.now_ms(), "ok", None, stats)
        except Exception as exc:  # noqa: BLE001 - any failure ends this pass cleanly; the next one starts over
            reason = failure_code(exc)
            log.warning("reconcile pass %d stopped: %s (%s)", pass_id, reason, type(exc).__name__)
            self._metrics.reconcile("failed")
            try:
                self._store.close_pass(pass_id, self._clock.now_ms(), "failed", reason, {})
            except Exception:  # noqa: BLE001 - the store itself may be what failed
                log.warning("could not record the failed pass %d", pass_id)
            return PassResult("failed", reason)
        self._metrics.reconcile("ok")
        return PassResult("ok", None, stats)

    def _expire(self, pass_id: int, started: int) -> int:
        """Close as expired what this whole pass could not judge and no pass will; returns how many."""
        since_ms = started - self._settings.lookback_s * 1000
        old_runs = self._store.runs_created_before(self._judged.open_runs, since_ms)
        reasons = self._judged.unjudgeable(old_runs)
        at_ms = self._clock.now_ms()
        expired = self._store.expire_unseen(reasons, started, at_ms, pass_id)
        return expired + self._store.expire_callback_mismatches(since_ms, at_ms, pass_id, PAST_LOOKBACK)

    def _pass(self, pass_id: int, now_ms: int) -> dict[str, int]:
        stats: dict[str, int] = {"instances": 0, "findings": 0, "cancelled": 0, "crons": 0}
        self._findings = 0
        self._judged = JudgedSubjects(self._store.open_reconciler_mismatches())
        self._replays.clear()
        since_ms = now_ms - self._settings.lookback_s * 1000
        self._evidence.reconcile(PassContext(
            pass_id, since_ms, now_ms, stats, self._store, self._judged, self._pending, self._emit, self._missing,
            partial(self._instance_rows, pass_id, since_ms, now_ms, stats), partial(self._cancel, stats=stats),
            self._probe if self._judges_processes else None, self._settings.grace_s, self._settings.tolerance_s,
            self._settings.batch_size))
        self._orphans_and_duplicates(pass_id, since_ms, now_ms, stats)
        self._crons(since_ms, now_ms, stats)
        stats.update(findings=self._findings, open_mismatches=len(self._judged), judged=len(self._judged.ids))
        return stats

    # -- 2.x instances against shadow Runs -----------------------------------------------------------

    def _instance_rows(self, pass_id: int, since_ms: int, now_ms: int, stats: dict[str, int]) -> None:
        """v2.21: every RunningInstances row, in keyset batches (the pass of InstanceRowEvidence)."""
        for batch in chunks(self._reader.iter_instances(batch_size=self._settings.batch_size),
                            self._settings.batch_size):
            self._instances(pass_id, batch, since_ms, now_ms, stats)
        self._report_replays()

    def _instances(self, pass_id: int, batch: list[LegacyInstance], since_ms: int, now_ms: int,
                   stats: dict[str, int]) -> None:
        latest_s = now_ms / 1000 + self._settings.future_s
        defects = {i.id: found for i in batch if (found := instance_defects(i, latest_s))}
        unplaceable = {i.id for i in batch if defects.get(i.id, {}).keys() & KEY_COLUMNS}
        # No Run key and no place in any window: such a row is reported on every pass until 2.x's is fixed.
        self._emit([invalid_value("RunningInstances", defects[i.id], i.cron_id, instance_id=i.id)
                    for i in batch if i.id in unplaceable])
        for instance in batch:
            if instance.id not in defects:  # read without invalid values: an invalid_legacy_value on it is judged
                self._judged.instance(instance.id, compared=False)
        window = [i for i in batch if i.id not in unplaceable and (i.started_at or 0) * 1000 >= since_ms]
        in_window = {i.id for i in window}
        for instance in batch:  # a row older than the lookback is never compared again
            self._judged.row_read(instance.id, past_lookback=instance.id not in unplaceable | in_window)
        executions: dict[str, list[LegacyInstance]] = {}
        for instance in window:  # replayed starts give one execution more than one row
            key = instance_execution_key(instance.cron_id, instance.pid, instance.log_path, instance.started_at)
            executions.setdefault(key, []).append(instance)
        # History imported by `bridge import-legacy` (keyed by the execution, or by instance id as earlier imports
        # were): found, then left out of the checks, every row of the execution.
        imports = {key: instance_import_key(rows[0]) for key, rows in executions.items()}
        runs = self._store.runs_by_keys([*executions, *imports.values(), *(import_key(i.id) for i in window)])
        earlier = self._store.mark_seen(pass_id, [run.id for run in runs.values()])
        for matched in runs.values():
            self._judged.run_matched(matched.id)
        cutoff_s = (now_ms - self._settings.grace_s * 1000) / 1000
        for key, rows in executions.items():
            stats["instances"] += 1
            run = runs.get(key)
            imported = {i.id for i in rows if run is None and (imports[key] in runs or import_key(i.id) in runs)}
            for instance_id in imported - defects.keys():
                self._judged.instance(instance_id)  # it has its Run, whose history is not compared
            again = run is not None and run.id in earlier
            if rows := [i for i in rows if i.id not in imported]:
                self._execution(key, rows, run, defects, cutoff_s, stats, again=again)

    def _execution(self, key: str, rows: list[LegacyInstance], run: ComparedRun | None,
                   defects: dict[int, dict[str, str]], cutoff_s: float, stats: dict[str, int], *, again: bool) -> None:
        """One execution's rows in this batch. One is compared with the Run; any other is 2.x recording the
        execution again (replayed callbacks), counted and never compared. ``again``: the Run was matched in
        an earlier batch of this pass, so every row here is such a row."""
        compared = None if again else speaking_row(rows, defects.keys())
        if compared is not None and self._judge(compared, run, defects.get(compared.id), cutoff_s, stats):
            self._judged.instance(compared.id)
        in_flight = (rows[0].started_at or 0) > cutoff_s  # one begin second for all of them
        extras = [i for i in rows if i is not compared]
        for extra in extras:
            if extra.id in defects:
                self._invalid(extra, run, defects[extra.id])
            elif not in_flight:
                self._judged.instance(extra.id)
        if run is not None and not in_flight:
            self._judged.execution(run.id)
            if extras:
                self._recorded_again(key, run, rows, again)

    def _judge(self, instance: LegacyInstance, run: ComparedRun | None, defects: dict[str, str] | None,
               cutoff_s: float, stats: dict[str, int]) -> bool:
        """Compare one execution's row with its Run (or find it missing); False when it was not judged."""
        if defects:  # the Run is named (a repair in 2.x closes the finding) and its comparison waits
            self._invalid(instance, run, defects)
            return False
        if (instance.started_at or 0) > cutoff_s:
            return False  # in flight: inside the grace window
        if run is None:
            self._missing(instance.cron_id, instance.started_at or 0,
                          {"legacy": {"status": instance.status, "pid": instance.pid}, "shadow": None},
                          instance_id=instance.id)
            return True
        return self._compare(instance, run, stats)

    def _invalid(self, instance: LegacyInstance, run: ComparedRun | None, defects: dict[str, str]) -> None:
        run_id, origin = (run.id, run.origin) if run else (None, None)
        self._emit([invalid_value("RunningInstances", defects, instance.cron_id, run_id, instance.id, origin)])

    def _compare(self, instance: LegacyInstance, run: ComparedRun, stats: dict[str, int]) -> bool:
        if instance.status == InstanceStatus.RUNNING:
            handle = ProcessHandle.from_json(run.executor_handle)
            alive = self._probe.same_process(instance.pid, handle) if self._judges_processes else None
            self._emit(compare_running(instance, run, alive))
        elif run.status in RUN_ACTIVE and self._pending.waiting_runs([run.id]):
            return False  # its end is kept: the stop decider closes the Run, with its exit code, within the window
        elif instance.status == InstanceStatus.STOPPED and run.status in RUN_ACTIVE:
            finished = epoch_seconds_to_ms(instance.finished_at, field="finished_at") if instance.finished_at else None
            code = legacy_stop_code(self._reader, instance, self._replacements)
            self._recorder.cancel_run(run.id, actor=RECONCILER, code=code,
                                      evidence="legacy_instance", finished_at_ms=finished)
            stats["cancelled"] += 1
            return False  # the next pass compares the cancelled Run
        else:
            self._emit(compare_ended(instance, run, self._settings.tolerance_s))
        return True

    def _cancel(self, run: ComparedRun, code: ErrorCode, evidence: str, *, stats: dict[str, int]) -> None:
        """2.x shows the execution stopped (before v2.21: its cron row and log): cancel its Run with ``code``."""
        self._recorder.cancel_run(run.id, actor=RECONCILER, code=code, evidence=evidence)
        stats["cancelled"] += 1

    def _recorded_again(self, key: str, run: ComparedRun, rows: list[LegacyInstance], again: bool) -> None:
        entry = self._replays.get(run.id)
        if entry is None:
            entry = self._replays[run.id] = RecordedAgain(run.id, rows[0].cron_id, run.origin)
            if again:  # the rows of an earlier batch, found as recovery finds them: inserted near the Run's creation
                first = min(i.id for i in rows)
                near = self._reader.instances_inserted_near(rows[0].cron_id or 0, rows[0].pid, run.created_at_ms)
                found = [i for i in near if i.id < first
                         and instance_execution_key(i.cron_id, i.pid, i.log_path, i.started_at) == key]
                entry.add(found)
                entry.rows += 0 if found else 1  # the one that matched the Run earlier is no longer near it
        entry.add(rows)
        if len(self._replays) > self._settings.batch_size:
            self._report_replays()

    def _report_replays(self) -> None:
        self._emit([entry.finding() for entry in self._replays.values()])
        self._replays.clear()

    def _missing(self, cron_id: int | None, started_s: int | float, diff: dict[str, Any], *,
                 instance_id: int | None = None, log_ref: str | None = None) -> None:
        """A 2.x execution (a RunningInstances row, or a log file before v2.21) with no shadow Run counts only if
        its origin was being shadowed when it began."""
        cron = self._cron(cron_id) if cron_id is not None else None
        origin = Origin(infer_scheduled_origin(cron, int(started_s), self._scheduler_mode, self._tz).origin)
        # Without a callback a panel run looks like an ad-hoc one: either could be the truth.
        candidates = {origin} | ({Origin.MANUAL, Origin.BOOT} if origin is Origin.SCRIPT else set())
        started_ms = int(started_s * 1000)
        for candidate in candidates:
            since = self._enabled_since(candidate)
            if self._modes.mode_for(candidate) is not Mode.OFF and since is not None and started_ms >= since:
                self._emit([Finding(MismatchKind.MISSING, cron_id, None, instance_id, origin, diff, log_ref)])
                return

    # -- shadow Runs with no (or two) 2.x executions ------------------------------------------------

    def _orphans_and_duplicates(self, pass_id: int, since_ms: int, now_ms: int, stats: dict[str, int]) -> None:
        cursor: tuple[int, str] = (since_ms - 1, "")
        until = now_ms - self._settings.grace_s * 1000
        while page := self._store.unseen_runs(pass_id, since_ms, until, cursor, self._settings.batch_size):
            self._emit([Finding(MismatchKind.ORPHAN, r.legacy_cron_id, r.id, None, r.origin,
                                {"legacy": None, "shadow": {"status": r.status.value}}) for r in page])
            cursor = (page[-1].created_at_ms, page[-1].id)
        groups = self._store.duplicate_groups(since_ms, self._settings.batch_size)
        if len(groups) >= self._settings.batch_size:
            self._judged.forget(MismatchKind.DUPLICATE)  # one page of the groups: those past it were not read
        for group in groups:
            self._emit([Finding(MismatchKind.DUPLICATE, group.legacy_cron_id, group.last_run_id, None,
                                group.origin, {"runs": group.runs, "first_run_id": group.first_run_id})])

    # -- Crontabs.status / pid against active Runs --------------------------------------------------

    def _crons(self, since_ms: int, now_ms: int, stats: dict[str, int]) -> None:
        after = 0
        cutoff_ms = now_ms - self._settings.grace_s * 1000
        latest_s = now_ms / 1000 + self._settings.future_s
        while ids := self._store.crons_with_runs(since_ms, after, self._settings.batch_size):
            active = self._store.active_by_cron(ids)
            # A Run whose end is kept has ended as far as 2.x knows; the stop decider closes it within the window.
            waiting = self._pending.waiting_runs([r.id for runs in active.values() for r in runs])
            active = {cron: [r for r in runs if r.id not in waiting] for cron, runs in active.items()}
            for cron_id in ids:
                stats["crons"] += 1
                cron = self._cron(cron_id)
                self._judged.cron_visited(cron_id, exists=cron is not None)
                if cron is None:
                    continue
                if defects := cron_defects(cron, latest_s):
                    self._emit([invalid_value("Crontabs", defects, cron_id)])  # "recent" cannot be told
                    continue
                runs = active.get(cron_id, [])
                recent = (cron.last_execution_time or 0) * 1000 > cutoff_ms or \
                    any(r.created_at_ms > cutoff_ms for r in runs)
                if not recent:
                    self._emit(compare_cron(cron_id, cron.status, cron.pid, runs,
                                            queued_status=self._queued_status))
                self._judged.cron(cron_id, compared=not recent)
            after = ids[-1]

    # -- recording ---------------------------------------------------------------------------------

    def _emit(self, findings: list[Finding]) -> None:
        self._findings += len(findings)
        for finding in findings:
            opened = self._runs.transaction(partial(_record_mismatch, finding))
            if opened:
                self._metrics.projection_mismatch(_projection(finding))
            if opened and finding.run_id is not None:
                self._mark_run(finding)

    def _mark_run(self, finding: Finding) -> None:
        fields = sorted(_changed_fields(finding.diff))[:8]

        def mutate(store: Any, change: Any) -> None:
            change.append(EventType.RUN_LEGACY_PROJECTION_MISMATCH, {"kind": finding.kind.value, "diff": fields})

        self._runs.change(finding.run_id or "", mutate, actor=RECONCILER, command="reconcile",
                          dedupe_key=f"mismatch:{finding.dedupe_key}")

    def _read_cron(self, cron_id: int) -> LegacyCron | None:
        return self._reader.get_cron(cron_id)


def _projection(finding: Finding) -> str:
    """The metric label of a finding: its kind's 2.x projection, or the table an invalid value sits in."""
    if finding.kind == INVALID_LEGACY_VALUE:
        table = next(iter(finding.diff), "").partition(".")[0]
        return _PROJECTION_OF_TABLE.get(table, "running_instance")
    return _PROJECTION_OF_KIND.get(finding.kind, "running_instance")


def _changed_fields(diff: dict[str, Any]) -> set[str]:
    """Field names a diff touches, for a small event payload (the values stay in the mismatch row).

    DeepDiff sections map paths like ``root['exit_code']`` to changes; hand-made diffs are plain fields.
    """
    names: set[str] = set()
    for section, changes in diff.items():
        paths = [p for p in (changes if isinstance(changes, (dict, list)) else []) if str(p).startswith("root[")]
        if not paths:
            names.add(section)
        names.update(str(p).removeprefix("root['").split("'")[0] for p in paths)
    return names


def _record_mismatch(finding: Finding, tx: RunTransaction) -> bool:
    """Record one finding's mismatch row; True when it is newly open."""
    return tx.store.record_mismatch(MismatchRecord(
        kind=finding.kind.value, dedupe_key=finding.dedupe_key, seen_at_ms=tx.at_ms, diff=finding.diff,
        origin=finding.origin, legacy_cron_id=finding.cron_id, run_id=finding.run_id))
