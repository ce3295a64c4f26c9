"""Startup recovery (docs/run-state.md#startup-recovery): every non-terminal shadow Run is checked against evidence.

First the ends kept for a stop decision whose window is over are decided (bridge.jobs.stop_decisions), so an
exit code observed before a restart is never lost; a Run whose pending end is not due yet is left to the decider.
Then what 2.x recorded of the execution says how it ended (bridge.jobs.evidence, chosen by release): from v2.21
its own instance row, found by the execution's identity (cron id, pid, log path, begin second); before, its log
file (an end line: ended, with the duration it gives and no outcome, or stopped by its marker) and its cron's
Crontabs row (still running with the Run's log path: running). Which evidence decides an execution 2.x still
shows running depends on the deployment:

- 2.x's processes visible (the bridge shares 2.x's pid namespace; ``ProcProbe.sees_legacy``): only the recorded
  process identity (boot id, start ticks, process group) proves the shell alive; a shell that is gone or cannot
  be proven alive becomes ``lost`` (the "script called exit" case 2.x itself never closes);
- 2.x's processes not visible (another pid namespace: no pid here names 2.x's shell): identity can be judged
  neither way, so 2.x's row is the evidence and the Run stays open, with a ``run.reconciled`` event saying it
  was not proven (``processes_not_visible``); its end callback, or a later pass, closes it.

Either way: proven running stays running (``run.reconciled``), ended is completed with 2.x's facts, or cancelled
with the stop's source (legacy_boot_reset, replaced_by_next_run, stopped_in_legacy), and a Run 2.x holds no row
for becomes ``lost``. A 2.x database that cannot be read proves nothing: those Runs are left as they are
(``deferred:<state>``) for the next call. Never a bulk reset, never a signal; safe to call at every process
start, and again later.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Protocol

from bridge.domain.events import ErrorCode, EventType
from bridge.domain.model import AttemptStatus, RunStatus
from bridge.jobs.evidence import (
    ENDED_WITHOUT_OUTCOME,
    OUTCOME_NOT_REPORTED,
    ExecutionEvidence,
    ExecutionState,
    InstanceRowEvidence,
    LegacyExecution,
)
from bridge.jobs.stop_decisions import RECONCILER, StopDecisions
from bridge.service.pending_ends import PendingEndStore
from bridge.service.reconcile import UnfinishedRun, UnfinishedRuns
from bridge.service.run_service import RunService, RunTransaction
from bridge.service.shadow import ShadowRecorder
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.process_identity import ProcessHandle, ProcProbe

log = logging.getLogger("bridge.jobs.recovery")
PAGE = 64  # runs per page (docs/run-state.md#startup-scan-bounds)
# Why a Run 2.x shows running was left open unproven: no process of 2.x is visible from here.
PROCESSES_NOT_VISIBLE = "processes_not_visible"


class RecoveryMetrics(Protocol):
    def legacy_database_unavailable(self, state: str, use: str) -> None: ...


def recover_on_startup(store: UnfinishedRuns, runs: RunService, reader: LegacyRecords, pending: PendingEndStore,
                       probe: ProcProbe | None = None, *, decisions: StopDecisions, recorder: ShadowRecorder,
                       max_pages: int = 32, metrics: RecoveryMetrics | None = None,
                       evidence: ExecutionEvidence | None = None) -> Counter[str]:
    """Check each non-terminal legacy-owned Run once; returns how many ended in each outcome.

    Never raises for 2.x's database: Runs it cannot read for are counted as ``deferred:<state>`` (the
    DatabaseState code) and left untouched, so calling it again once 2.x's database reads settles them.
    ``pending`` holds the ends kept for a stop decision: ``decisions`` (over the same store) decides first those
    whose window is over. ``recorder`` cancels the Runs of executions 2.x shows stopped. ``evidence``: the records
    of executions the release keeps (bootstrap chooses; RunningInstances rows by default).
    """
    evidence = evidence or InstanceRowEvidence(reader)
    probe = probe or ProcProbe()
    judge_processes = probe.sees_legacy()  # once per call: the deployment does not change under it
    outcomes: Counter[str] = Counter({f"stop_decision:{kind}": n
                                      for kind, n in _decide_pending_ends(decisions).items()})
    cursor: tuple[int, str] = (-1, "")
    unavailable: str | None = None  # once 2.x's database failed a read, this call reads it no more
    for _ in range(max_pages):
        page = store.active_legacy_runs(cursor, PAGE)
        if not page:
            break
        waiting = pending.waiting_runs([run.id for run in page])
        for run in page:
            if run.id in waiting:  # its pending end is decided by the decider once its window is over
                outcomes["awaiting_stop_decision"] += 1
                continue
            if unavailable is None:
                try:
                    outcomes[_recover(run, runs, recorder, evidence, probe if judge_processes else None)] += 1
                    continue
                except LegacyDatabaseError as exc:  # its reason is the state 2.x's database is in
                    unavailable = exc.reason
                    log.warning("startup recovery deferred: 2.x's database is %s", unavailable)
                    if metrics is not None:
                        metrics.legacy_database_unavailable(unavailable, "recovery")
            outcomes[f"deferred:{unavailable}"] += 1
        cursor = (page[-1].created_at_ms, page[-1].id)
    if outcomes:
        log.info("startup recovery: %s", dict(outcomes))
    return outcomes


def _decide_pending_ends(decisions: StopDecisions) -> Counter[str]:
    """Every pending end whose window is over (a restart during the window included), decided from 2.x's rows."""
    total: Counter[str] = Counter()
    while batch := decisions.decide_due():
        total.update(batch)
        if all(kind.startswith("deferred:") for kind in batch):
            break  # 2.x's database does not read: they were put off, and are not due again yet
    return total


def _recover(run: UnfinishedRun, runs: RunService, recorder: ShadowRecorder, evidence: ExecutionEvidence,
             probe: ProcProbe | None) -> str:
    """One Run against what 2.x shows of its execution; ``probe`` None: 2.x's processes are not visible, so 2.x's
    records decide alone."""
    if run.legacy_cron_id is None:  # no 2.x execution names it: nothing of 2.x's can show it alive
        return _lost(runs, run, "no_legacy_instance")
    execution = evidence.execution_of(run)
    if execution is None:
        return _lost(runs, run, "no_legacy_instance")
    if execution.state is ExecutionState.STOPPED:
        recorder.cancel_run(run.id, actor=RECONCILER, code=execution.stop_code or ErrorCode.STOPPED_IN_LEGACY,
                            evidence=execution.evidence, finished_at_ms=execution.finished_at_ms)
        return "cancelled"
    if execution.state is ExecutionState.ENDED:
        return _complete(runs, run, execution)
    if probe is None:
        if not execution.claims_running:
            return _lost(runs, run, "process_unprovable")
        _still_running(runs, run, {"evidence": execution.evidence, "reason": PROCESSES_NOT_VISIBLE})
        return f"running:{execution.evidence}"
    alive = probe.same_process(run.legacy_pid, ProcessHandle.from_json(run.executor_handle))
    if alive:
        _still_running(runs, run, {"evidence": "process_identity"})
        return "running"
    return _lost(runs, run, "process_gone" if alive is False else "process_unprovable")


def _still_running(runs: RunService, run: UnfinishedRun, why: dict[str, str]) -> None:
    """``run.reconciled``: the Run stays open, and the event says on what evidence (one per restart)."""
    runs.change(run.id, lambda store, change: change.append(EventType.RUN_RECONCILED, {"outcome": "running", **why}),
                actor=RECONCILER, command="reconcile", dedupe_key=None)


def _complete(runs: RunService, run: UnfinishedRun, execution: LegacyExecution) -> str:
    """Close the Run as 2.x shows it ended: with its outcome, or ended without a reported one (before v2.21)."""
    ended = execution.ended_as or ENDED_WITHOUT_OUTCOME

    def work(tx: RunTransaction) -> None:
        current = tx.store.get_run(run.id)
        attempt = tx.store.get_attempt(run.attempt_id) if run.attempt_id else None
        if current is None or current.is_terminal or attempt is None or attempt.is_terminal:
            return
        change = tx.begin(current, actor=RECONCILER, dedupe_key=f"recover-end:{run.id}")
        error: dict[str, Any] = {"error_code": ended.error_code.value} if ended.error_code else {}
        finished = execution.finished_at_ms
        payload = {"evidence": execution.evidence, **execution.details,
                   **({} if execution.outcome_reported else {"outcome": OUTCOME_NOT_REPORTED})}
        duration = {"duration_ms": execution.duration_ms} if execution.duration_ms is not None else {}
        change.move_attempt(attempt, ended.attempt, payload=payload, exit_code=execution.exit_code,
                            finished_at_ms=finished, **{k: v for k, v in error.items() if k == "error_code"})
        change.move_run(ended.run, payload=payload, finished_at_ms=finished, **duration, **error)
        tx.commit(change)

    runs.transaction(work)
    return "completed"


def _lost(runs: RunService, run: UnfinishedRun, reason: str) -> str:
    def work(tx: RunTransaction) -> None:
        current = tx.store.get_run(run.id)
        if current is None or current.is_terminal or current.status is RunStatus.LOST:
            return
        change = tx.begin(current, actor=RECONCILER, dedupe_key=f"recover-lost:{run.id}:{reason}")
        attempt = tx.store.get_attempt(run.attempt_id) if run.attempt_id else None
        error = {"error_code": ErrorCode.WORKER_LOST.value, "error_summary": reason}
        if attempt is not None and not attempt.is_terminal:
            change.move_attempt(attempt, AttemptStatus.LOST, payload={"reason": reason},
                                error_code=ErrorCode.WORKER_LOST.value)
        if current.status in (RunStatus.DISPATCHING, RunStatus.RUNNING):
            change.move_run(RunStatus.LOST, payload={"reason": reason}, **error)
        else:  # created / queued: never dispatched as far as we know, so nothing is lost; cancel it
            change.move_run(RunStatus.CANCELLED, payload={"reason": reason}, error_code=error["error_code"])
        tx.commit(change)

    runs.transaction(work)
    return f"lost:{reason}"
