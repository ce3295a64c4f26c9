"""The reconcile pass's judging of 2.x's executions before v2.21, from their log files and Crontabs rows
(docs/reconciliation.md#releases-before-v221), and the context a pass hands either kind of evidence.

Each task log named in the lookback window is one execution of its cron. Its Run is the one of that cron whose
log path digest is the file's (the file names hold the start, to the millisecond: no two executions share one),
the closest in start time where several do. Then, past the grace window:

- no Run: ``missing``, when its origin was being shadowed as it began (as for a RunningInstances row);
- an ended Run: its start second, end second and a stop marker against the Run (``compare_logged``);
- a Run still open: ``stuck`` when the log has an end line and the cron row has moved on (idle, or another
  execution), or when its process is provably gone; the end never reached the bridge. Cancelled as a boot reset
  when the log has no end line and 2.x's boot idled the cron row (``reset_by_boot``), as a v2.21 pass cancels a
  Run whose instance row the boot stopped.

A Run whose log file is not there (never written: ``/dev/null``; removed by ``ql rmlog``) is still 2.x's
execution while its cron row names it (its log path and begin second): it is no orphan. Any other Run no log
file or cron row names is an orphan, as today.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from bridge.domain.events import ErrorCode
from bridge.domain.model import RUN_ACTIVE, RunMode
from bridge.service.pending_ends import PendingEndStore
from bridge.service.reconcile import ComparedRun, ReconcileStore
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.log_files import NO_LOG, LoggedExecution
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.process_identity import ProcessHandle, ProcProbe
from legacy_adapters.records import LegacyCron
from projections.reconcile import Finding, JudgedSubjects, compare_logged, logged_stuck

if TYPE_CHECKING:
    from legacy_adapters.log_files import LogDirectory

Missing = Callable[..., None]


class LoggedEvidence(Protocol):
    """What a log-file pass asks of the evidence that chose it (bridge.jobs.evidence.LogFileEvidence); a protocol,
    so that this module and that one do not import each other."""

    @property
    def logs(self) -> LogDirectory: ...

    def names_running(self, cron: LegacyCron, log_ref: str, pid: int | None) -> bool: ...

    def reset_by_boot(self, cron: LegacyCron, log_ref: str, started_at_ms: int | None,
                      logged: LoggedExecution | None) -> bool: ...


@dataclass
class PassContext:
    """What one reconcile pass lends the evidence it judges 2.x's executions with."""

    pass_id: int
    since_ms: int
    now_ms: int
    stats: dict[str, int]
    store: ReconcileStore
    judged: JudgedSubjects
    pending: PendingEndStore
    emit: Callable[[list[Finding]], None]
    # missing(cron_id, started_s, diff, *, instance_id=None, log_ref=None): a 2.x execution without a Run, which
    # counts if its origin was being shadowed when it began
    missing: Missing
    judge_instance_rows: Callable[[], None]  # the RunningInstances pass, which the reconciler keeps
    cancel: Callable[[ComparedRun, ErrorCode, str], None]  # cancel(run, code, evidence): 2.x shows it stopped
    probe: ProcProbe | None  # None: 2.x's processes are not visible here, none is proved gone
    grace_s: int
    tolerance_s: int
    batch_size: int


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class LogFilePass:
    """One pass over the task logs of the window, for one release without RunningInstances."""

    def __init__(self, evidence: LoggedEvidence, reader: LegacyRecords, context: PassContext) -> None:
        self._evidence = evidence
        self._reader = reader
        self._ctx = context

    def run(self) -> None:
        ctx = self._ctx
        crons = {cron.id: cron for cron in self._reader.iter_crons(batch_size=ctx.batch_size)}
        folders = {cron.log_name: cron.id for cron in crons.values() if cron.log_name and cron.log_name != NO_LOG}
        cutoff_s = (ctx.now_ms - ctx.grace_s * 1000) / 1000
        ctx.stats.setdefault("log_files", 0)
        for batch in _chunks(self._evidence.logs.scan(ctx.since_ms, ctx.now_ms, folders), ctx.batch_size):
            self._batch(batch, crons, cutoff_s)
        self._named_by_crons(crons)

    def _batch(self, batch: list[LoggedExecution], crons: dict[int, LegacyCron], cutoff_s: float) -> None:
        ctx = self._ctx
        found = ctx.store.runs_by_log_refs([(logged.cron_id, logged.log_ref) for logged in batch
                                            if logged.cron_id is not None])
        matched = {logged.log_path: _closest(found.get((logged.cron_id or 0, logged.log_ref), []), logged)
                   for logged in batch}
        self._seen([run for run in matched.values() if run is not None])
        for logged in batch:
            ctx.stats["log_files"] += 1
            in_flight = (logged.started_s or 0) > cutoff_s
            judged = not in_flight and self._judge(logged, matched[logged.log_path], crons.get(logged.cron_id or 0))
            ctx.judged.log_file(logged.log_ref, judged=judged)

    def _judge(self, logged: LoggedExecution, run: ComparedRun | None, cron: LegacyCron | None) -> bool:
        """Compare one logged execution with its Run (or find it missing); False when it was not judged."""
        ctx = self._ctx
        if run is None:
            state = "ended" if logged.ended else "running"
            ctx.missing(logged.cron_id, logged.started_s or 0, {"legacy": {"log": state}, "shadow": None},
                        log_ref=logged.log_ref)
            return True
        if run.mode is RunMode.IMPORTED:
            return True  # history the import made of this very log: not compared
        if run.status not in RUN_ACTIVE:
            ctx.emit(compare_logged(logged, run, ctx.tolerance_s))
            return True
        if ctx.pending.waiting_runs([run.id]):
            return False  # its end is kept: the stop decider closes the Run within the window
        if logged.ended:
            if cron is None or not self._evidence.names_running(cron, logged.log_ref, run.pid):
                ctx.emit(logged_stuck(logged, run, process_gone=False))
            return True
        if cron is not None and self._evidence.reset_by_boot(cron, logged.log_ref, run.started_at_ms, logged):
            ctx.cancel(run, ErrorCode.LEGACY_BOOT_RESET, "crontab")
            return False  # the next pass compares the cancelled Run
        if ctx.probe is not None and \
                ctx.probe.same_process(run.pid, ProcessHandle.from_json(run.executor_handle)) is False:
            ctx.emit(logged_stuck(logged, run, process_gone=True))
        return True

    def _named_by_crons(self, crons: dict[int, LegacyCron]) -> None:
        """The Runs of the executions cron rows name (log path and begin second) whose file the scan did not see."""
        ctx = self._ctx
        named = {(cron.id, log_path_digest(cron.log_path) or ""): cron for cron in crons.values() if cron.log_path}
        for pairs in _chunks(sorted(named), ctx.batch_size):
            found = ctx.store.runs_by_log_refs(pairs)
            self._seen([run for pair, runs in found.items() for run in runs
                        if _begins_within(run, named[pair].last_execution_time, ctx.tolerance_s)])

    def _seen(self, runs: list[ComparedRun]) -> None:
        if not runs:
            return
        self._ctx.store.mark_seen(self._ctx.pass_id, [run.id for run in runs])
        for run in runs:
            self._ctx.judged.run_matched(run.id)


def _start_s(run: ComparedRun) -> float:
    return (run.started_at_ms if run.started_at_ms is not None else run.created_at_ms) / 1000


def _closest(runs: list[ComparedRun], logged: LoggedExecution) -> ComparedRun | None:
    """Of the Runs with the log's digest, the one whose start is nearest the log's."""
    if not runs:
        return None
    return min(runs, key=lambda run: (abs(_start_s(run) - (logged.started_s or 0)), run.created_at_ms, run.id))


def _begins_within(run: ComparedRun, begin_s: int | float | None, tolerance_s: int) -> bool:
    return bool(begin_s) and abs(_start_s(run) - float(begin_s or 0)) <= tolerance_s
