"""Pure reconciliation rules: a 2.x row and a shadow Run in, findings (with a DeepDiff diff) out.

2.x keeps whole seconds, so times compare within a tolerance; volatile bookkeeping fields (updatedAt,
the bridge's receipt time) never count as a difference. A value no rule can judge is a finding of its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from bridge.domain.events import ErrorCode, is_signal_exit
from bridge.domain.mismatches import CRON_KINDS, MismatchKind
from bridge.domain.model import RUN_ACTIVE, Origin, RunStatus, outcome_unreported
from bridge.service.reconcile import ActiveRun, ComparedRun, OpenMismatch
from legacy_adapters.callbacks import exit_code_as_given
from legacy_adapters.errors import LegacyTimeError
from legacy_adapters.log_files import LoggedExecution
from legacy_adapters.records import LegacyCron, LegacyInstance
from legacy_adapters.schema import ENDED_INSTANCE, CrontabStatus, InstanceStatus, crontab_state
from legacy_adapters.timeconv import MAX_EPOCH_SECONDS, epoch_seconds_to_ms, ms_to_epoch_seconds

# 2.x instance status → the shadow Run status it should sit beside (docs/legacy-2x.md#status-numbers).
EXPECTED_RUN_STATUS = {status: ended.run for status, ended in ENDED_INSTANCE.items()}
# A stop 2.x answered through the bridge: its killed shell's trap may have closed the row first (error, 143).
RELAYED_STOP_CODES = frozenset({ErrorCode.CANCELLED_BY_USER.value, ErrorCode.INSTANCE_STOPPED_BY_USER.value})
VOLATILE = ["root['updated_at']", "root['received_at_ms']"]
INVALID_LEGACY_VALUE = MismatchKind.INVALID_LEGACY_VALUE
# One execution (cron, pid, log path, begin second) that 2.x holds more than one row for: replayed callbacks.
LEGACY_DUPLICATE_INSTANCE = MismatchKind.LEGACY_DUPLICATE_INSTANCE
LISTED_ROWS = 20  # the rows such a finding names by id and status; it counts them all
# Crontabs kinds: about a cron, whatever Run they name (see judged_subject).
_CRON_KINDS = CRON_KINDS
# A RunningInstances row without a usable one of these has no Run key and no place in any window.
KEY_COLUMNS = frozenset({"cron_id", "started_at"})
_INT64_LIMIT = 2**63  # SQLite INTEGER and the store's BIGINT hold [-2^63, 2^63)


@dataclass(frozen=True, slots=True)
class Finding:
    """One disagreement a pass found; ``kind`` is a MismatchKind (a kind outside it raises ValueError)."""

    kind: MismatchKind
    cron_id: int | None
    run_id: str | None = None
    instance_id: int | None = None
    origin: Origin | None = None
    diff: dict[str, Any] = field(default_factory=dict)
    log_ref: str | None = None  # before v2.21: the log file (its path's digest) that speaks for the execution

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", MismatchKind(self.kind))

    @property
    def dedupe_key(self) -> str:
        if self.instance_id is not None:
            subject = f"i{self.instance_id}"
        elif self.log_ref is not None:  # a log file stands where a RunningInstances row would
            subject = f"l{self.log_ref}"
        else:
            subject = f"r{self.run_id}"
        return f"{self.kind}:{self.cron_id}:{subject}"


def judged_subject(kind: MismatchKind, cron_id: int | None, dedupe_key: str) -> str:
    """What a pass has to judge again before a mismatch may close: its 2.x row (``i<id>``), its Run
    (``r<id>``) or, for Crontabs findings, its cron (``c<id>``; the Run they name changes as Runs come and go)."""
    subject = dedupe_key.split(":", 2)[-1]
    if kind in _CRON_KINDS or (kind == INVALID_LEGACY_VALUE and not subject.startswith("i")):
        return f"c{cron_id}"
    return subject


# Why a pass closed a mismatch it can no longer judge (``expired``, never an agreement).
PAST_LOOKBACK = "past_lookback"  # its 2.x row or Run is older than the lookback: no pass reads it for a comparison
CRON_DELETED = "cron_deleted"  # its cron's Crontabs row is gone: nothing to compare the cron's active Runs with
LEGACY_ROW_GONE = "legacy_row_gone"  # a whole pass read 2.x's RunningInstances and its row was not there
# Before v2.21 (no RunningInstances): a log file (``l<digest>``) a whole pass did not read is out of the window or
# gone (``ql rmlog``): past_lookback either way, no pass compares it again.


class JudgedSubjects:
    """The reconciler mismatches open when a pass began, those whose subject the pass judged again, and those
    it can no longer judge.

    Judged ones may close as resolved, and only when the pass did not find them again: a fact the pass did not
    look at (an execution in flight, a cron too recent to compare, a duplicate group it did not read) is no
    agreement and stays open. One whose subject no pass will judge again closes as expired, with the reason:

    - a 2.x row (``i<id>``) read older than the lookback, or (after a whole pass) not read at all: past_lookback,
      legacy_row_gone;
    - a Run (``r<id>``) created before the lookback: past_lookback (``runs_past_lookback`` says which);
    - a cron (``c<id>``) whose Crontabs row is gone: cron_deleted; one the pass never visited (no Run of it in the
      lookback): past_lookback.

    It holds what is open, never what 2.x holds.
    """

    def __init__(self, open_mismatches: Iterable[OpenMismatch]) -> None:
        self._open: dict[str, list[tuple[MismatchKind, int]]] = {}
        for mismatch_id, kind, cron_id, dedupe_key in open_mismatches:
            self._open.setdefault(judged_subject(kind, cron_id, dedupe_key), []).append((kind, mismatch_id))
        self._judged: dict[int, MismatchKind] = {}
        self._read: set[str] = set()  # subjects with open mismatches the pass read (rows) or visited (crons)
        self._unjudgeable: dict[str, str] = {}  # such subjects, with why they can no longer be judged

    def __len__(self) -> int:
        return sum(len(mismatches) for mismatches in self._open.values())

    @property
    def ids(self) -> list[int]:
        return sorted(self._judged)

    def instance(self, instance_id: int, *, compared: bool = True) -> None:
        """A 2.x row judged (compared with its Run, or found to have none), or only read without invalid values."""
        self._judge(f"i{instance_id}", None if compared else {INVALID_LEGACY_VALUE})

    def log_file(self, log_ref: str, *, judged: bool) -> None:
        """A log file the pass read in its window (before v2.21); ``judged``: outside the grace window, compared
        with its Run or found to have none, as ``instance`` for a RunningInstances row."""
        self._seen(f"l{log_ref}", None)
        if judged:
            self._judge(f"l{log_ref}", None)

    def row_read(self, instance_id: int, *, past_lookback: bool) -> None:
        """A 2.x row the pass read, judged or not; ``past_lookback``: older than the lookback, never compared."""
        self._seen(f"i{instance_id}", PAST_LOOKBACK if past_lookback else None)

    def run_matched(self, run_id: str) -> None:
        """A 2.x row matched the Run: it is no orphan, and its duplicate group (if any) was read."""
        self._judge(f"r{run_id}", {MismatchKind.ORPHAN, MismatchKind.DUPLICATE})

    def execution(self, run_id: str) -> None:
        """Every row 2.x holds for the Run's execution was read, outside the grace window."""
        self._judge(f"r{run_id}", {LEGACY_DUPLICATE_INSTANCE})

    def cron_visited(self, cron_id: int, *, exists: bool) -> None:
        """A cron with Runs in the lookback, looked up in Crontabs; ``exists`` False: 2.x deleted it."""
        self._seen(f"c{cron_id}", None if exists else CRON_DELETED)

    def cron(self, cron_id: int, *, compared: bool) -> None:
        """A Crontabs row read without invalid values, and compared with the cron's active Runs or not."""
        self._judge(f"c{cron_id}", {INVALID_LEGACY_VALUE, *(_CRON_KINDS if compared else ())})

    def forget(self, kind: MismatchKind) -> None:
        """The pass could not judge every mismatch of this kind after all (it read a page of them only)."""
        self._judged = {mismatch_id: k for mismatch_id, k in self._judged.items() if k != kind}

    @property
    def open_runs(self) -> list[str]:
        """The Runs that open Run mismatches (``r<id>``) name; the caller says which were created before the
        lookback."""
        return sorted(subject[1:] for subject in self._open if subject.startswith("r"))

    def unjudgeable(self, runs_past_lookback: Iterable[str] = ()) -> dict[int, str]:
        """After a whole pass: each open mismatch it did not judge and no pass can judge any more, with why."""
        why = dict(self._unjudgeable)
        why.update((f"r{run_id}", PAST_LOOKBACK) for run_id in runs_past_lookback)
        for subject in self._open.keys() - self._read:
            if subject.startswith("i"):
                why[subject] = LEGACY_ROW_GONE  # every row was read: this one is not in 2.x's table any more
            elif subject.startswith(("c", "l")):
                # c: no Run of the cron in the lookback, the pass never compares it; l: the log file is out of the
                # window or was removed
                why[subject] = PAST_LOOKBACK
        return {mismatch_id: reason for subject, reason in why.items()
                for _kind, mismatch_id in self._open.get(subject, ()) if mismatch_id not in self._judged}

    def _seen(self, subject: str, unjudgeable: str | None) -> None:
        if subject in self._open:
            self._read.add(subject)
            if unjudgeable is not None:
                self._unjudgeable[subject] = unjudgeable

    def _judge(self, subject: str, kinds: Collection[MismatchKind] | None) -> None:
        for kind, mismatch_id in self._open.get(subject, ()):
            if kinds is None or kind in kinds:
                self._judged[mismatch_id] = kind


@dataclass
class RecordedAgain:
    """The rows 2.x holds for the execution of one Run, counted as a pass reads them (over any batches)."""

    run_id: str
    cron_id: int | None
    origin: Origin | None
    rows: int = 0
    listed: list[tuple[int, int | None]] = field(default_factory=list)

    def add(self, instances: Iterable[LegacyInstance]) -> None:
        for instance in instances:
            self.rows += 1
            self.listed = sorted([*self.listed, (instance.id, instance.status)])[:LISTED_ROWS]

    def finding(self) -> Finding:
        """``legacy_duplicate_instance``: how many rows, and the ids and statuses of the first ones; no value."""
        instances = [{"id": row_id, "status": _status_name(status)} for row_id, status in self.listed]
        return Finding(LEGACY_DUPLICATE_INSTANCE, self.cron_id, self.run_id, None, self.origin,
                       {"rows": self.rows, "instances": instances})


def structured_diff(legacy: dict[str, Any], shadow: dict[str, Any], *, epsilon: float = 0.0) -> dict[str, Any]:
    """DeepDiff of two views as plain JSON data; empty when they agree.

    Agreement is checked first with plain comparisons: almost every pair agrees, and a DeepDiff costs far
    more than comparing the fields.
    """
    if _agree(legacy, shadow, epsilon):
        return {}
    diff = DeepDiff(legacy, shadow, exclude_paths=VOLATILE, math_epsilon=epsilon or None, verbose_level=2)
    return json.loads(diff.to_json()) if diff else {}


def compare_ended(instance: LegacyInstance, run: ComparedRun, tolerance_s: int) -> list[Finding]:
    """An ended 2.x instance against its shadow Run: status, exit code, start and finish times.

    For a row ``instance_defects`` finds nothing in; any other row is an ``invalid_value`` finding. A Run
    ``ended`` without a reported outcome (docs/run-state.md#outcome-not-reported) has no status or exit code to
    set beside 2.x's: neither agrees nor disagrees, so only the times are compared.
    """
    status = _instance_status(instance.status)
    expected = EXPECTED_RUN_STATUS.get(status) if status is not None else None
    stopped = status is InstanceStatus.STOPPED or stopped_by_relayed_stop(instance, run)
    if stopped:
        expected = RunStatus.CANCELLED

    def finding(kind: MismatchKind, legacy: dict[str, Any], shadow: dict[str, Any],
                epsilon: float = 0.0) -> list[Finding]:
        diff = structured_diff(legacy, shadow, epsilon=epsilon)
        return [Finding(kind, instance.cron_id, run.id, instance.id, run.origin, diff)] if diff else []

    found: list[Finding] = []
    known = not outcome_unreported(run.status)  # an open Run does disagree: 2.x says it ended
    if known:  # as plain text on both sides: the diff is stored and shown as JSON
        found += finding(MismatchKind.TERMINAL_STATUS, {"status": _text(expected)}, {"status": run.status.value})
    if known and not stopped:  # a stopped row's 143 (or nothing, at boot) pairs with cancelled
        # Like with like: both sides as 2.x keeps the number (a fraction stays a fraction).
        found += finding(MismatchKind.EXIT_CODE, {"exit_code": exit_code_as_given(instance.exit_code)},
                         {"exit_code": exit_code_as_given(run.exit_code)})
    found += finding(MismatchKind.START_TIME, {"started_s": instance.started_at},
                     {"started_s": _seconds(run.started_at_ms)}, tolerance_s)
    if instance.finished_at is not None and run.status not in RUN_ACTIVE:
        found += finding(MismatchKind.FINISH_TIME, {"finished_s": instance.finished_at},
                         {"finished_s": _seconds(run.finished_at_ms)}, tolerance_s)
    return found


def stopped_by_relayed_stop(instance: LegacyInstance, run: ComparedRun) -> bool:
    """2.x says error with a signal exit, and the shadow Run was cancelled by a stop 2.x accepted through the
    bridge: the killed shell's end reached 2.x before the stop marked the row, so both tell the same story."""
    return (_instance_status(instance.status) is InstanceStatus.ERROR and is_signal_exit(instance.exit_code)
            and run.status is RunStatus.CANCELLED and run.error_code in RELAYED_STOP_CODES)


def compare_running(instance: LegacyInstance, run: ComparedRun, process_alive: bool | None) -> list[Finding]:
    """A 2.x instance still marked running: stuck when its process is provably gone, or ended in the shadow."""
    if process_alive is False:
        return [Finding(MismatchKind.STUCK, instance.cron_id, run.id, instance.id, run.origin,
                        {"legacy": "running", "process": "gone", "pid": instance.pid})]
    if run.status not in RUN_ACTIVE:
        return [Finding(MismatchKind.TERMINAL_STATUS, instance.cron_id, run.id, instance.id, run.origin,
                        structured_diff({"status": "running"}, {"status": run.status.value}))]
    return []


def compare_cron(cron_id: int, legacy_status: int | float | None, legacy_pid: int | None,
                 active_runs: list[ActiveRun], *, queued_status: float = CrontabStatus.QUEUED) -> list[Finding]:
    """Crontabs.status / pid against the cron's active shadow Runs (running > queued > idle); ``queued_status`` is
    the release's queued number (ReleaseProfile.queued_status)."""
    running = [r for r in active_runs if r.status is RunStatus.RUNNING]
    shadow_state = "running" if running else ("queued" if any(r.status is RunStatus.QUEUED for r in active_runs)
                                              else "idle")
    legacy_state = crontab_state(legacy_status, queued_status)
    run_id = active_runs[0].id if active_runs else None
    found = []
    diff = structured_diff({"state": legacy_state}, {"state": shadow_state})
    if diff:
        origin = active_runs[0].origin if active_runs else None
        found.append(Finding(MismatchKind.ACTIVE_STATE, cron_id, run_id, None, origin, diff))
    pid = running[0].pid if running else None
    if legacy_state == "running" and pid is not None and legacy_pid is not None and pid != legacy_pid:
        found.append(Finding(MismatchKind.PID, cron_id, running[0].id, None, running[0].origin,
                             structured_diff({"pid": legacy_pid}, {"pid": pid})))
    return found


def compare_logged(logged: LoggedExecution, run: ComparedRun, tolerance_s: int) -> list[Finding]:
    """An execution's log file (before v2.21) against its ended Run: start second, end second, and a stop.

    The log holds no outcome (no exit code before v2.21, docs/legacy-2x.md#no-exit-code-before-v221), so only a
    stop marker says how it ended: such a Run should be cancelled. Times compare within ``tolerance_s``.
    """

    def finding(kind: MismatchKind, legacy: dict[str, Any], shadow: dict[str, Any],
                epsilon: float = 0.0) -> list[Finding]:
        diff = structured_diff(legacy, shadow, epsilon=epsilon)
        return [Finding(kind, logged.cron_id, run.id, None, run.origin, diff, logged.log_ref)] if diff else []

    found = finding(MismatchKind.START_TIME, {"started_s": logged.started_s},
                    {"started_s": _seconds(run.started_at_ms)}, tolerance_s)
    if logged.ended_s is not None and run.status not in RUN_ACTIVE:
        found += finding(MismatchKind.FINISH_TIME, {"finished_s": logged.ended_s},
                         {"finished_s": _seconds(run.finished_at_ms)}, tolerance_s)
    if logged.stopped and run.status is not RunStatus.CANCELLED and run.status not in RUN_ACTIVE:
        found += finding(MismatchKind.TERMINAL_STATUS, {"status": RunStatus.CANCELLED.value},
                         {"status": run.status.value})
    return found


def logged_stuck(logged: LoggedExecution, run: ComparedRun, *, process_gone: bool) -> list[Finding]:
    """A Run still open whose execution 2.x shows over (before v2.21): its log has an end line and its cron row
    has moved on, or its process is provably gone. The end never reached the bridge."""
    evidence = {"log": "end_line"} if logged.ended else {"process": "gone"}
    return [Finding(MismatchKind.STUCK, logged.cron_id, run.id, None, run.origin,
                    {"legacy": "ended" if logged.ended else "running", **evidence, "shadow": run.status.value},
                    logged.log_ref)]


def instance_defects(instance: LegacyInstance, latest_s: float) -> dict[str, str]:
    """Columns of a RunningInstances row that no rule can judge, each with why; never the value itself.

    2.x stores what Joi let through (any JS number: negative, fractional, up to 2^53) and NUMERIC affinity
    keeps odd text, which the reader turns into None, NaN or Infinity. A start later than ``latest_s``
    would sit in the grace window forever.
    """
    defects: dict[str, str] = {}
    if instance.cron_id is None:
        defects["cron_id"] = "no value"  # NOT NULL: the reader saw text or a fraction
    elif not _fits_int64(instance.cron_id):
        defects["cron_id"] = "out of range"
    if not instance.started_at:  # NOT NULL, and 2.x writes its own clock for a 0 start: unreadable text
        defects["started_at"] = "no value"
    elif started := _epoch_defect(instance.started_at, "started_at", latest_s):
        defects["started_at"] = started
    if instance.finished_at is not None and (finished := _epoch_defect(instance.finished_at, "finished_at")):
        defects["finished_at"] = finished
    if _instance_status(instance.status) is None:
        defects["status"] = "unknown"
    if isinstance(instance.exit_code, float) and not math.isfinite(instance.exit_code):
        defects["exit_code"] = "not finite"
    return defects


def cron_defects(cron: LegacyCron, latest_s: float) -> dict[str, str]:
    """Columns of a Crontabs row the cron rules cannot judge; None or 0 in last_execution_time is "never"."""
    last = cron.last_execution_time
    defect = _epoch_defect(last, "last_execution_time", latest_s) if last else None
    return {"last_execution_time": defect} if defect else {}


def invalid_value(table: str, defects: dict[str, str], cron_id: int | None, run_id: str | None = None,
                  instance_id: int | None = None, origin: Origin | None = None) -> Finding:
    """The finding for a row with unjudgeable columns: ``{"<table>.<column>": why}``, never a value."""
    diff = {f"{table}.{column}": why for column, why in sorted(defects.items())}
    return Finding(INVALID_LEGACY_VALUE, cron_id if _fits_int64(cron_id) else None, run_id, instance_id, origin,
                   diff)


def _fits_int64(value: int | None) -> bool:
    return isinstance(value, int) and -_INT64_LIMIT <= value < _INT64_LIMIT


def _epoch_defect(value: int | float | None, column: str, latest_s: float = math.inf) -> str | None:
    if type(value) is int and 0 < value <= MAX_EPOCH_SECONDS and value <= latest_s:
        return None  # the usual whole second, without the exact conversion's cost on every row of a pass
    try:
        epoch_seconds_to_ms(value, field=column)
    except LegacyTimeError as exc:
        return exc.reason
    return "in the future" if value is not None and value > latest_s else None


def _agree(legacy: dict[str, Any], shadow: dict[str, Any], epsilon: float) -> bool:
    if legacy == shadow:
        return True
    if not epsilon or legacy.keys() != shadow.keys():
        return False
    numbers = (int, float)
    return all(isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)
               and abs(a - b) <= epsilon for a, b in ((legacy[k], shadow[k]) for k in legacy))


def _instance_status(value: int | None) -> InstanceStatus | None:
    try:
        return InstanceStatus(value) if value is not None else None
    except ValueError:
        return None


def _status_name(value: int | None) -> str:
    status = _instance_status(value)
    return status.name.lower() if status is not None else "unknown"


def _seconds(ms: int | None) -> int | None:
    return ms_to_epoch_seconds(ms) if ms is not None else None


def _text(status: RunStatus | None) -> str | None:
    return status.value if status is not None else None
