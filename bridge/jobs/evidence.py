"""What 2.x recorded of an execution: the evidence port reconcile, startup recovery and ``import-legacy`` ask, and
its two implementations, chosen once in bootstrap from ``ReleaseProfile.has_running_instances``
(docs/reconciliation.md#releases-before-v221):

- ``InstanceRowEvidence``: v2.21's ``RunningInstances``, one row per execution (docs/legacy-2x.md#runninginstances);
- ``LogFileEvidence``: before v2.21, the ``Crontabs`` row (the cron's latest execution only) and the execution's
  log file (docs/legacy-2x.md#crontabs-before-v221, #stops-and-log-lines-before-v221).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from bridge.domain.events import ErrorCode
from bridge.jobs.stop_decisions import ANY_NODE_FIRE, Replacements, instance_of, legacy_stop_code
from bridge.service.reconcile import UnfinishedRun
from legacy_adapters.callbacks import exit_code_as_given, log_path_digest
from legacy_adapters.log_files import NO_LOG, LogDirectory, LoggedExecution
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.records import LegacyCron
from legacy_adapters.schema import OUTCOME_NOT_REPORTED as OUTCOME_NOT_REPORTED_AS
from legacy_adapters.schema import EndedAs, InstanceStatus, crontab_state, format_updated_at, instance_outcome
from legacy_adapters.timeconv import duration_seconds_to_ms, epoch_seconds_to_ms

if TYPE_CHECKING:
    from bridge.jobs.reconcile_logs import PassContext

# An execution that ended without reporting how (before v2.21 neither the shell nor 2.x keeps an exit code,
# docs/legacy-2x.md#no-exit-code-before-v221): its Run ends ``ended``, never succeeded
# (docs/releases.md#outcome-not-reported).
OUTCOME_NOT_REPORTED = "outcome_not_reported"  # the events' word for it
ENDED_WITHOUT_OUTCOME = OUTCOME_NOT_REPORTED_AS
# How far before a Run's start second its log file may be named: runSingle names a panel run's file in Node, just
# before the shell takes its begin second (docs/legacy-2x.md#log-paths).
NAMED_BEFORE_START_S = 60
# How many Crontabs rows one update must have stamped for it to be taken as 2.x's boot reset (which stamps every
# row): more than a panel run's exit handler, which stamps one.
BOOT_STAMPED_ROWS = 2


class ExecutionState(StrEnum):
    RUNNING = "running"  # 2.x still shows it running (its row, its cron row, or a log without an end line)
    ENDED = "ended"
    STOPPED = "stopped"  # 2.x shows it stopped (a stopped row; a log end line with the stop marker)


@dataclass(frozen=True, slots=True)
class LegacyExecution:
    """What 2.x's records say of one execution, whichever records the release keeps."""

    state: ExecutionState
    evidence: str  # legacy_instance | log_file | crontab: what the Run's events name
    ended_as: EndedAs | None = None  # ENDED: the Run it ends as (ENDED_WITHOUT_OUTCOME when nothing says)
    finished_at_ms: int | None = None
    duration_ms: int | None = None
    exit_code: int | float | None = None
    stop_code: ErrorCode | None = None  # STOPPED: who stopped it, as far as 2.x shows
    details: dict[str, int] = field(default_factory=dict)  # 2.x's own status number, for the event
    claims_running: bool = True  # RUNNING: False when 2.x's row holds a status it never writes (proves nothing)

    @property
    def outcome_reported(self) -> bool:
        return self.ended_as is not ENDED_WITHOUT_OUTCOME


class ExecutionEvidence(Protocol):
    """The records of 2.x's executions one release keeps."""

    @property
    def source(self) -> str:
        """``running_instances`` or ``crontabs_and_log_files``: for logs and the pass's figures."""
        ...

    def execution_of(self, run: UnfinishedRun) -> LegacyExecution | None:
        """What 2.x shows of the execution an open shadow Run records; None when 2.x keeps nothing of it.
        Raises LegacyDatabaseError when 2.x's database cannot be read (nothing is proved then)."""
        ...

    def reconcile(self, context: PassContext) -> None:
        """Judge 2.x's executions of the pass's window against their Runs (findings, cancels, seen Runs)."""
        ...


class InstanceRowEvidence:
    """v2.21: the execution's RunningInstances row, found by its identity (cron, pid, log path, begin second)."""

    source = "running_instances"

    def __init__(self, reader: LegacyRecords, replacements: Replacements = ANY_NODE_FIRE) -> None:
        self._reader = reader
        self._replacements = replacements  # which next start can have replaced a stopped execution

    def execution_of(self, run: UnfinishedRun) -> LegacyExecution | None:
        if run.legacy_cron_id is None:
            return None
        instance = instance_of(self._reader, run.legacy_cron_id, run.legacy_pid, run.log_ref, run.started_at_ms,
                               run.created_at_ms)
        if instance is None:
            return None
        status = {"legacy_status": int(instance.status or 0)}
        finished = epoch_seconds_to_ms(instance.finished_at, field="finished_at") if instance.finished_at else None
        if instance.status == InstanceStatus.STOPPED:
            return LegacyExecution(ExecutionState.STOPPED, "legacy_instance", finished_at_ms=finished,
                                   stop_code=legacy_stop_code(self._reader, instance, self._replacements),
                                   details=status)
        if instance.status in (InstanceStatus.FINISHED, InstanceStatus.ERROR):
            exit_code = exit_code_as_given(instance.exit_code)
            ended = instance_outcome(InstanceStatus(instance.status), exit_code)
            return LegacyExecution(ExecutionState.ENDED, "legacy_instance", ended, finished,
                                   exit_code=exit_code, details=status)
        # A status 2.x never writes proves nothing either way: only the process can.
        return LegacyExecution(ExecutionState.RUNNING, "legacy_instance", details=status,
                               claims_running=instance.status == InstanceStatus.RUNNING)

    def reconcile(self, context: PassContext) -> None:
        context.judge_instance_rows()


class LogFileEvidence:
    """Before v2.21: the execution's log file and its cron's Crontabs row.

    An end line in the log says it ended (with the stop marker: stopped; the duration is ``耗时 N 秒``); no end
    line, or the cron row still running with the Run's log path (and pid, where 2.x kept one), says it runs.
    """

    source = "crontabs_and_log_files"

    def __init__(self, reader: LegacyRecords, logs: LogDirectory, queued_status: float) -> None:
        self._reader = reader
        self.logs = logs
        self.queued_status = queued_status

    def execution_of(self, run: UnfinishedRun) -> LegacyExecution | None:
        if run.legacy_cron_id is None or run.log_ref is None:
            return None
        cron = self._reader.get_cron(run.legacy_cron_id)
        logged = self.find_log(run.legacy_cron_id, run.log_ref, run.started_at_ms, cron)
        if logged is not None and logged.ended:
            return logged_end(logged)
        if cron is not None and self.names_running(cron, run.log_ref, run.legacy_pid):
            return LegacyExecution(ExecutionState.RUNNING, "crontab")
        if cron is not None and self.reset_by_boot(cron, run.log_ref, run.started_at_ms, logged):
            return LegacyExecution(ExecutionState.STOPPED, "crontab", stop_code=ErrorCode.LEGACY_BOOT_RESET)
        if logged is not None:
            return LegacyExecution(ExecutionState.RUNNING, "log_file")  # no end line: nothing says it ended
        return None

    def names_running(self, cron: LegacyCron, log_ref: str | None, pid: int | None) -> bool:
        """The cron row still shows this execution running or queued: its log path, and its pid where both
        sides have one (up to v2.18.1 the end callback's pid never reaches 2.x; the start's stays)."""
        return (crontab_state(cron.status, self.queued_status) != "idle"
                and log_path_digest(cron.log_path) == log_ref
                and (cron.pid is None or pid is None or cron.pid == pid))

    def reset_by_boot(self, cron: LegacyCron, log_ref: str, started_at_ms: int | None,
                      logged: LoggedExecution | None) -> bool:
        """2.x's boot cut the execution off: its log has no end line (or its row still names it), and its cron
        row was idled after it began by an update that stamped several rows at once, as the boot's reset of every
        row does (docs/legacy-2x.md#crontabs-before-v221). A panel run's exit handler idles one row at a time, so
        an install with a single cron cannot tell the two apart, and its Run stays open."""
        if logged is not None and logged.ended or started_at_ms is None or not cron.updated_at:
            return False
        if logged is None and log_path_digest(cron.log_path) != log_ref:
            return False
        return (crontab_state(cron.status, self.queued_status) == "idle"
                and cron.updated_at >= format_updated_at(started_at_ms)
                and self._reader.crons_stamped(cron.updated_at) >= BOOT_STAMPED_ROWS)

    def find_log(self, cron_id: int, log_ref: str, started_at_ms: int | None,
                 cron: LegacyCron | None) -> LoggedExecution | None:
        """The log file whose path digests to ``log_ref``: the cron row's own when it still names it, else a
        file of the cron's log folders named in the minute before the Run's start."""
        if cron is not None and cron.log_path and log_path_digest(cron.log_path) == log_ref:
            return self.logs.read(cron.log_path, cron_id)
        if started_at_ms is None:
            return None
        folders = self._folders(cron_id, cron)
        since = started_at_ms - NAMED_BEFORE_START_S * 1000
        for logged in self.logs.scan(since, started_at_ms + 1000, {name: cron_id for name in folders}):
            if logged.cron_id == cron_id and logged.log_ref == log_ref:
                return logged
        return None

    def _folders(self, cron_id: int, cron: LegacyCron | None) -> Iterable[str]:
        names = {os.path.dirname(cron.log_path)} if cron is not None and cron.log_path else set()
        if cron is not None and cron.log_name and cron.log_name != NO_LOG:
            names.add(cron.log_name)
        return names - {""}

    def reconcile(self, context: PassContext) -> None:
        from bridge.jobs.reconcile_logs import LogFilePass

        LogFilePass(self, self._reader, context).run()


def logged_end(logged: LoggedExecution) -> LegacyExecution:
    """A log with an end line as what 2.x shows: stopped with the marker, else ended without a reported outcome."""
    finished = logged.ended_s * 1000 if logged.ended_s else None
    duration = duration_seconds_to_ms(logged.duration_s, field="duration") if logged.duration_s is not None else None
    if logged.stopped:
        return LegacyExecution(ExecutionState.STOPPED, "log_file", finished_at_ms=finished, duration_ms=duration,
                               stop_code=ErrorCode.STOPPED_IN_LEGACY)
    return LegacyExecution(ExecutionState.ENDED, "log_file", ENDED_WITHOUT_OUTCOME, finished, duration)


def choose_evidence(has_running_instances: bool, reader: LegacyRecords, logs: Callable[[], LogDirectory],
                    queued_status: float, replacements: Replacements = ANY_NODE_FIRE) -> ExecutionEvidence:
    """The one choice: bootstrap calls this with ``ReleaseProfile.has_running_instances``."""
    if has_running_instances:
        return InstanceRowEvidence(reader, replacements)
    return LogFileEvidence(reader, logs(), queued_status)


__all__ = ["ENDED_WITHOUT_OUTCOME", "OUTCOME_NOT_REPORTED", "ExecutionEvidence", "ExecutionState",
           "InstanceRowEvidence", "LegacyExecution", "LogFileEvidence", "choose_evidence", "logged_end"]
