"""ShadowInterceptor: watches the status callbacks on their way to 2.x and records them.

The front door decides the route once (bridge.callbacks.routes); each route has its handler here. Shadow
(fail-open): before forwarding it parses the body with 2.x's own rules and, for a start callback, reads the
cron's Crontabs row (2.x overwrites it on receipt, and it is the evidence of a panel run). After 2.x answered
2xx, what it accepted becomes one command per cron (bridge.callbacks.commands), handed to the cron's lane; the
callback waits at most the shadow budget: an overrun or failure is counted and logged, and 2.x's answer goes
back unchanged either way. On PostgreSQL an end's open Runs are read in the lane while 2.x answers (a read-only
transaction that ends before the write begins), so only the write waits for the 2xx. Primary (fail-closed):
for an execution the bridge owns it returns a LocalAnswer instead, and nothing is forwarded. Logs carry error
codes only — never bodies, tokens, commands or paths. A 2.x database that cannot be read (locked, hot journal,
missing, damaged) never stops a callback: each failed read is counted by its state, the state is logged when it
changes, and the next callback reads again. Stops (`PUT /crons/stop`, stopInstance) and ends with a signal exit
go to the stop decisions the composition root hands in (``StopEvidence``): a stopped execution ends cancelled.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import cast
from zoneinfo import ZoneInfo

from bridge.callbacks.answers import LocalAnswer
from bridge.callbacks.commands import (
    ApplyInstanceStop,
    ApplyStop,
    FactCommand,
    LaneCommand,
    ReadEndOwner,
    ReadOpenRuns,
    RecordEnd,
    RecordStart,
)
from bridge.callbacks.keeper import STORE_DID_NOT_TAKE, FactKeeper
from bridge.callbacks.lanes import WriteLanes
from bridge.callbacks.ports import StopEvidence
from bridge.callbacks.prepared import Forwarded, Prepared, PreparedCallback, PreparedInstanceStop, PreparedStop
from bridge.callbacks.primary import PrimaryAnswerer, ToLegacy
from bridge.callbacks.routes import InstanceStopRoute, InterceptedRoute, StatusRoute, StopRoute
from bridge.domain.errors import BridgeError, StoreBusyError
from bridge.domain.model import Mode, Owner
from bridge.metrics import SHADOW_FAILURE_LABELS, BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome, ShadowResult
from bridge.service.ports import ActiveCandidate, Clock, ModeSource
from bridge.service.shadow import ShadowRecorder
from legacy_adapters.callbacks import (
    StatusCallback,
    decode_json_body,
    exit_code_as_given,
    log_path_digest,
    parse_status_body,
    validate_id_array,
)
from legacy_adapters.errors import LegacyCallbackParseError, LegacyDatabaseError
from legacy_adapters.identity import task_revision, task_snapshot
from legacy_adapters.origin import OriginDecision, infer_scheduled_origin, infer_start_origin
from legacy_adapters.ports import LegacyRecords, OpenTokenCheck
from legacy_adapters.process_identity import ProcProbe
from legacy_adapters.records import LegacyCron
from legacy_adapters.shell_report import NOTHING, ShellReport, read_shell_report
from legacy_adapters.timeconv import duration_seconds_to_ms, epoch_seconds_to_ms

log = logging.getLogger("bridge.shadow")
MAX_IDS = 16  # the shell sends one id; a batch caller is bounded


class ShadowInterceptor:
    def __init__(self, recorder: ShadowRecorder, reader: LegacyRecords, modes: ModeSource, metrics: BridgeMetrics,
                 clock: Clock, *, budget_ms: int, scheduler_mode: str, tz: ZoneInfo, primary_budget_ms: int = 1000,
                 lanes: int = 4,
                 probe: ProcProbe | None = None, auth: OpenTokenCheck | None = None,
                 on_primary_commit: Callable[[], None] = lambda: None, read_ahead: bool = False,
                 stops: StopEvidence, keeper: FactKeeper | None = None) -> None:
        """``keeper``: where facts the store does not take are kept and replayed (none: they are counted lost)."""
        self._recorder = recorder
        self._keeper = keeper
        self._primary_budget_s = primary_budget_ms / 1000
        self._stops = stops
        self._reader = reader
        self._modes = modes
        self._metrics = metrics
        self._clock = clock
        self._scheduler_mode = scheduler_mode
        self._tz = tz
        self._probe = probe or ProcProbe()
        self._primary = PrimaryAnswerer(recorder, auth, metrics, clock, on_primary_commit) if auth else None
        self._lanes = WriteLanes(lanes, self._execute, budget_s=budget_ms / 1000, metrics=metrics)
        # Where every read is a round trip (PostgreSQL), an end's open Runs are read while 2.x answers, so
        # only the write is left once it has: the write still goes only after a 2xx, in its own transaction.
        self._read_ahead = read_ahead
        self._legacy_state: str | None = None  # why 2.x's database could not be read last time, if it could not

    def before_forward(self, route: InterceptedRoute, body: bytes,
                       headers: Mapping[str, str] | None = None) -> Prepared | None:
        prepared = self._prepare(route, body, headers)
        self._metrics.callback_seen(_callback_kind(route, body, prepared), _handled_mode(prepared))
        if isinstance(prepared, (PreparedStop, PreparedInstanceStop)):
            # Until its answer is applied, the stop holds its crons' failing ends (after_forward settles it).
            self._stops.stop_forwarded(prepared.cron_ids)
        return prepared

    def _prepare(self, route: InterceptedRoute, body: bytes, headers: Mapping[str, str] | None) -> Prepared | None:
        if not self._modes.any_enabled() and not (self._primary and self._primary.owns_active_runs()):
            return None
        received = self._clock.now_ms()
        match route:
            case StopRoute():
                return _prepare_stop(body, received)
            case InstanceStopRoute(cron_id=cron_id, instance_id=instance_id):
                return PreparedInstanceStop(instance_id, (cron_id,), received)
            case StatusRoute(from_shell=from_shell):
                return self._prepare_status(body, received, from_shell, headers)

    def _prepare_status(self, body: bytes, received: int, from_shell: bool,
                        headers: Mapping[str, str] | None) -> Prepared | None:
        try:
            callback = parse_status_body(body)
        except LegacyCallbackParseError:
            return None  # 2.x rejects it too; a rejected call never creates facts
        if callback.status not in (0, 1) or not callback.ids:
            return None
        ids = tuple(int(i) for i in callback.ids[:MAX_IDS] if float(i).is_integer() and i > 0)
        if not callback.is_start:
            prepared = PreparedCallback(callback, ids, received, shell=read_shell_report(headers))
            owned = self._answer_if_bridge_owned(from_shell, prepared, headers)
            return owned if isinstance(owned, LocalAnswer) else self._with_read_ahead(prepared)
        # The shell is alive now (it waits for this answer): the one moment its identity can be taken.
        handle = self._probe.handle_for_shell(callback.pid)
        before, unreadable = {}, set()
        for cron_id in ids:
            try:
                before[cron_id] = self._read_cron(cron_id)
            except LegacyDatabaseError:
                before[cron_id] = None
                unreadable.add(cron_id)
        begin_s = _begin_seconds(callback)
        origins = {cron_id: infer_start_origin(cron, callback.pid, callback.log_path, begin_s, self._scheduler_mode,
                                               self._tz)
                   for cron_id, cron in before.items() if cron is not None}
        prepared = PreparedCallback(callback, ids, received, before, handle.to_json() if handle else None,
                                    frozenset(unreadable), origins=origins)
        answered = self._answer_if_primary(from_shell, prepared, headers)
        if isinstance(answered, ToLegacy):
            return replace(prepared, handed_to_legacy=answered.reason)
        return answered or prepared

    def _with_read_ahead(self, prepared: PreparedCallback) -> PreparedCallback:
        """Queue the read on the cron's lane, ahead of the write that may follow it in the same lane."""
        if not self._read_ahead or len(prepared.cron_ids) != 1:
            return prepared
        future = self._lanes.submit(ReadOpenRuns(prepared.cron_ids[0]))
        return prepared if future is None else replace(prepared, read_ahead=future)

    # -- primary mode: the bridge answers ----------------------------------------------------------

    def _answer_if_primary(self, from_shell: bool, prepared: PreparedCallback,
                           headers: Mapping[str, str] | None) -> LocalAnswer | ToLegacy | None:
        """A start of an origin in primary mode is accepted by the bridge, which answers it itself."""
        if self._primary is None or not from_shell or len(prepared.cron_ids) != 1:
            return None
        cron = prepared.crons_before.get(prepared.cron_ids[0])
        if cron is None:
            return None  # 2.x does not know the id: let 2.x say so
        decision = prepared.origins[cron.id]
        if self._modes.mode_for(decision.origin) is not Mode.PRIMARY:
            return None
        context = self._context(cron, decision, prepared.shell_handle, mode=Mode.PRIMARY)
        assert context is not None
        facts = _facts(prepared.callback, cron.id, prepared.received_at_ms, prepared.shell, keep_log_path=True)
        if self._store_is_out():
            return self._primary.hand_to_legacy("store_unavailable")
        return self._primary.answer(headers, RecordStart(facts, context), self._within_budget)

    def _answer_if_bridge_owned(self, from_shell: bool, prepared: PreparedCallback,
                                headers: Mapping[str, str] | None) -> LocalAnswer | ToLegacy | None:
        """An end of an execution the bridge accepted stays the bridge's, even after a demotion."""
        if self._primary is None or not from_shell or len(prepared.cron_ids) != 1 \
                or not prepared.callback.is_end or not self._primary.owns_active_runs():
            return None
        facts = _facts(prepared.callback, prepared.cron_ids[0], prepared.received_at_ms, prepared.shell,
                       keep_log_path=True)
        # Who owns it is read within the budget; unknown (the store is out or slow), 2.x answers the end and the
        # shadow path records it, which closes the bridge's Run all the same (in order, from the journal).
        if self._store_is_out() or self._owner_within_budget(facts) != Owner.BRIDGE.value:
            return None
        command = RecordEnd(facts, _begin_seconds(prepared.callback), bridge_owned=True)
        return self._primary.answer(headers, command, self._within_budget)

    def _store_is_out(self) -> bool:
        """The journal holds facts: the store did not take the last writes, and is not asked again meanwhile."""
        return self._keeper is not None and self._keeper.holding

    def _within_budget(self, command: FactCommand | ReadEndOwner) -> object:
        """``command`` on its cron's lane, waited for at most the primary budget. Raises what it raised, and
        StoreBusyError when the lanes are full or the budget ran out (the command may still finish there)."""
        future = self._lanes.submit(command)
        if future is None:
            raise StoreBusyError("the write lanes are full")
        try:
            return future.result(timeout=self._primary_budget_s)
        except FutureTimeout:
            raise StoreBusyError("the store did not answer within the primary budget") from None

    def _owner_within_budget(self, facts: CallbackFacts) -> str | None:
        try:
            return cast("str | None", self._within_budget(ReadEndOwner(facts)))
        except Exception:  # noqa: BLE001 - an owner that cannot be read in time is unknown: 2.x answers
            return None

    def keep_fresh(self, every_s: float) -> Callable[[], None]:
        """Keep what the callback path reads of the store between callbacks fresh, off the callback path; returns
        the function that stops it (nothing to keep without primary mode's answerer)."""
        return self._primary.keep_fresh(every_s) if self._primary is not None else (lambda: None)

    @property
    def stop_decisions(self) -> StopEvidence:
        return self._stops

    def after_forward(self, prepared: Forwarded, upstream_status: int, answer: bytes | None = None) -> None:
        """Record what 2.x accepted. ``answer`` is 2.x's body, for the routes that answer 200 either way."""
        handed: list[FactCommand] = []
        try:
            if _accepted(prepared, upstream_status, answer):
                read_ahead = prepared.read_ahead if isinstance(prepared, PreparedCallback) else None
                handed = self._lanes.write_within_budget(list(self._commands(prepared)), read_ahead,
                                                         self._lanes_refused)
        finally:
            if isinstance(prepared, (PreparedStop, PreparedInstanceStop)):
                # A stop a lane took is settled there once applied; every other one is settled now.
                in_lanes = {command.cron_id for command in handed}
                self._stops.stop_settled(tuple(c for c in prepared.cron_ids if c not in in_lanes))

    def _lanes_refused(self, command: FactCommand) -> None:
        """The lanes were full (a slow store): the fact is kept for later, or, without a journal, lost."""
        if self._keeper is not None:
            self._keeper.keep(command, "overload")
        else:
            self._metrics.shadow_write_failed(None, "overload")

    def close(self) -> None:
        self._lanes.close()

    # -- what 2.x accepted, as commands ----------------------------------------------------------------

    def _commands(self, prepared: Forwarded) -> Iterator[FactCommand]:
        """One command per cron id; a cron whose command cannot be made is counted and logged, never raised."""
        for cron_id in prepared.cron_ids:
            try:
                command = self._command(prepared, cron_id)
            except Exception as exc:  # noqa: BLE001 - fail-open: nothing may reach the shell
                self._write_failed(exc)
                continue
            if command is not None:
                yield command

    def _command(self, prepared: Forwarded, cron_id: int) -> FactCommand | None:
        if isinstance(prepared, PreparedStop):
            return ApplyStop(cron_id, prepared.received_at_ms)
        if isinstance(prepared, PreparedInstanceStop):
            return ApplyInstanceStop(prepared.instance_id, cron_id, prepared.received_at_ms)
        callback = prepared.callback
        facts = _facts(callback, cron_id, prepared.received_at_ms, prepared.shell)
        if callback.is_end:
            return RecordEnd(facts, _begin_seconds(callback))
        if cron_id in prepared.unreadable:
            # Its origin evidence is gone (2.x has overwritten the row since): the end back-fills the Run.
            self._metrics.shadow_write_failed(None, "legacy_unreadable")
            return None
        cron = prepared.crons_before.get(cron_id)
        if cron is None:  # 2.x does not know this id: it changed nothing, neither do we
            self._metrics.callback_unmatched(None, "unmatched")
            return None
        decision = prepared.origins[cron_id]
        if prepared.handed_to_legacy:  # a primary start 2.x answered instead: recorded as 2.x's, saying why
            decision = replace(decision, evidence=f"{decision.evidence}; primary start answered by 2.x "
                                                  f"({prepared.handed_to_legacy})")
            context = self._context(cron, decision, prepared.shell_handle, mode=Mode.PRIMARY, accept_as=Mode.SHADOW)
        else:
            context = self._context(cron, decision, prepared.shell_handle)
        return RecordStart(facts, context) if context else None

    # -- inside a lane ----------------------------------------------------------------------------

    def _execute(self, command: LaneCommand, read_ahead: Future[object] | None = None) -> object:
        """What a lane runs. A read is returned (or raised) to its caller, and so is a write of an execution the
        bridge owns (primary: the answerer fails closed); a shadow fact is recorded, kept in the journal when
        the store does not take it, and any other failure counted and logged: nothing may reach the shell."""
        if isinstance(command, ReadOpenRuns):
            return None if self._store_is_out() else self._recorder.read_ahead_end(command.cron_id)
        if isinstance(command, ReadEndOwner):
            return self._recorder.owner_of_end(command.facts)
        if _bridge_owned(command):
            return self._record_owned(command)  # type: ignore[arg-type]
        try:
            if self._keeper is None or not self._keeper.hold(command):
                started = time.perf_counter()
                try:
                    self._record_or_keep(command, _read_ahead_result(read_ahead))
                except Exception as exc:  # noqa: BLE001 - fail-open: nothing may reach the shell
                    self._write_failed(exc)
                finally:
                    self._metrics.shadow_write_seconds.observe(time.perf_counter() - started)
        finally:
            if isinstance(command, (ApplyStop, ApplyInstanceStop)):
                self._stops.stop_settled((command.cron_id,))
        return None

    def _record_or_keep(self, command: FactCommand, read_ahead: list[ActiveCandidate] | None) -> None:
        try:
            self.execute_fact(command, read_ahead)
        except STORE_DID_NOT_TAKE as exc:
            if self._keeper is None:
                raise
            self._keeper.keep(command, SHADOW_FAILURE_LABELS.get(exc.code, "store_unavailable"))

    def execute_fact(self, command: FactCommand, read_ahead: list[ActiveCandidate] | None = None) -> None:
        """Record one fact through the shadow rules, at once or replayed from the journal; raises what the store
        or the rules raised."""
        if isinstance(command, (ApplyStop, ApplyInstanceStop)):
            self._apply_stop(command)
            return
        result = self._record(command, read_ahead)
        if result is not None:
            self._count(result)

    def _apply_stop(self, command: ApplyStop | ApplyInstanceStop) -> None:
        if isinstance(command, ApplyStop):
            self._stops.relayed_stop(command.cron_id, command.received_at_ms)
        else:
            self._stops.relayed_instance_stop(command.instance_id, command.received_at_ms)

    def _record_owned(self, command: RecordStart | RecordEnd) -> ShadowResult:
        if isinstance(command, RecordStart):
            return self._recorder.record_start(command.facts, command.context)
        return self._recorder.record_end(command.facts, lambda: None)

    def _record(self, command: RecordStart | RecordEnd,
                read_ahead: list[ActiveCandidate] | None) -> ShadowResult | None:
        if isinstance(command, RecordStart):
            return self._recorder.record_start(command.facts, command.context)
        facts = command.facts
        kept = self._stops.keep(facts, read_ahead)  # a signal exit waits for 2.x's evidence of a stop
        return kept or self._recorder.record_end(facts, lambda: self._context_for_finish_only(command), read_ahead)

    def _write_failed(self, exc: Exception) -> None:
        """A shadow write's failure, counted and logged without its message (it may quote a body or a path)."""
        if isinstance(exc, BridgeError):
            self._metrics.shadow_write_refused(None, exc.code)
            log.warning("shadow write failed: %s", exc.code)
        else:
            self._metrics.shadow_write_failed(None, "internal")
            log.error("shadow write failed: %s", type(exc).__name__)

    def _context_for_finish_only(self, command: RecordEnd) -> ExecutionContext | None:
        # Unreadable, the end cannot be back-filled: LegacyDatabaseError rolls the write back and is counted
        # as legacy_unreadable; the reconciler finds the execution missing once 2.x's database reads again.
        cron = self._read_cron(command.cron_id)
        if cron is None:
            self._metrics.callback_unmatched(None, "unmatched")
            return None
        decision = infer_scheduled_origin(cron, command.begin_s, self._scheduler_mode, self._tz)
        context = self._context(cron, decision)
        facts = command.facts
        if context is not None and facts.pid is None and cron.pid and log_path_digest(cron.log_path) == facts.log_ref:
            # A v2.17.0–v2.18.1 end sends no pid; the row beside its log path still holds its start's.
            context = replace(context, row_pid=cron.pid)
        return context

    def _context(self, cron: LegacyCron, decision: OriginDecision, shell_handle: str | None = None,
                 mode: Mode = Mode.SHADOW, accept_as: Mode | None = None) -> ExecutionContext | None:
        """The context a new Run is accepted with (under ``accept_as``, by default ``mode``), or None when its
        origin is not in ``mode``."""
        if self._modes.mode_for(decision.origin) is not mode:
            return None
        revision = task_revision(cron)
        snapshot = task_snapshot(cron, revision, self._clock.now_ms())
        return ExecutionContext(decision.origin, decision.evidence, revision, snapshot,
                                mode=(accept_as or mode).value, executor_handle=shell_handle)

    def _read_cron(self, cron_id: int) -> LegacyCron | None:
        """2.x's Crontabs row (None: 2.x has no such cron). Raises LegacyDatabaseError, its reason the
        database's state, when it cannot be read; the failure is counted and a new state logged."""
        try:
            cron = self._reader.get_cron(cron_id)
        except BridgeError as exc:  # the reader's LegacyDatabaseError, its reason the database's state
            state = str(getattr(exc, "reason", "") or "unreadable")
            self._metrics.legacy_database_unavailable(state, "shadow")
            if state != self._legacy_state:
                self._legacy_state = state
                log.warning("2.x's database is %s: callbacks are still forwarded, a start's Crontabs row is not "
                            "read and its end back-fills the Run", state)
            raise LegacyDatabaseError(str(self._reader.path), state) from exc
        if self._legacy_state is not None:
            log.warning("2.x's database reads again (it was %s)", self._legacy_state)
            self._legacy_state = None
        return cron

    def _count(self, result: ShadowResult) -> None:
        if result.outcome in (Outcome.STARTED, Outcome.BACKFILLED):
            self._metrics.shadow_run_created(result.origin)
        elif result.outcome in (Outcome.AMBIGUOUS, Outcome.UNMATCHED):
            self._metrics.callback_unmatched(result.origin, "ambiguous" if result.outcome is Outcome.AMBIGUOUS
                                             else "unmatched")
        elif result.outcome is Outcome.LATE_IGNORED:
            self._metrics.late_callback("late")


def _bridge_owned(command: FactCommand) -> bool:
    """A write of an execution the bridge answers for (primary): never kept, its failure is the answer's."""
    if isinstance(command, RecordEnd):
        return command.bridge_owned
    return isinstance(command, RecordStart) and command.context.mode == Mode.PRIMARY.value


def _read_ahead_result(future: Future[object] | None) -> list[ActiveCandidate] | None:
    """The read, when it is there: queued ahead in the same lane, it has finished unless it failed."""
    if future is None or not future.done() or future.exception() is not None:
        return None  # the write reads for itself, and a store that failed the read is counted there
    return cast(list[ActiveCandidate], future.result())  # ReadOpenRuns' answer


def _accepted(prepared: Forwarded, upstream_status: int, answer: bytes | None) -> bool:
    """Whether 2.x accepted the request, so that its facts are recorded."""
    if not 200 <= upstream_status < 300 or not prepared.cron_ids:
        return False
    # stopInstance answers HTTP 200 either way; {"code":400,"message":"实例不存在或已停止"}: 2.x stopped nothing.
    return not isinstance(prepared, PreparedInstanceStop) or _answer_code(answer) == 200


def _answer_code(answer: bytes | None) -> object:
    """The ``code`` of 2.x's JSON answer, or None when there is none to read."""
    try:
        body = json.loads(answer) if answer else None
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _callback_kind(route: InterceptedRoute, body: bytes, prepared: Prepared | None) -> str:
    """start, end, stop, instance_stop or other, for legacy_callback_total (a body read only when not parsed)."""
    if not isinstance(route, StatusRoute):
        return route.route.value
    if isinstance(prepared, PreparedCallback):
        callback: StatusCallback | None = prepared.callback
    else:
        try:
            callback = parse_status_body(body)
        except LegacyCallbackParseError:
            callback = None
    if callback is None or not callback.ids:
        return "other"
    return "start" if callback.is_start else "end" if callback.is_end else "other"


def _handled_mode(prepared: Prepared | None) -> str:
    """primary: the bridge answered; shadow: forwarded and watched; off: passed through untouched."""
    if isinstance(prepared, LocalAnswer):
        return Mode.PRIMARY.value
    return Mode.OFF.value if prepared is None else Mode.SHADOW.value


def _prepare_stop(body: bytes, received_at_ms: int) -> PreparedStop | None:
    """`PUT /crons/stop` takes a JSON array of ids; anything 2.x would refuse is left to 2.x."""
    try:
        ids = validate_id_array(decode_json_body(body))
    except LegacyCallbackParseError:
        return None
    return PreparedStop(tuple(int(i) for i in ids[:MAX_IDS] if float(i).is_integer() and i > 0), received_at_ms)


def _begin_seconds(callback: StatusCallback) -> int | None:
    value = callback.last_execution_time
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _facts(callback: StatusCallback, cron_id: int, received_at_ms: int, shell: ShellReport = NOTHING, *,
           keep_log_path: bool = False) -> CallbackFacts:
    """Seconds become milliseconds here, through the one conversion module, never by hand. An end's exit code is
    2.x's (v2.21), else the seam block's, else none (docs/releases.md#what-the-seam-block-adds)."""
    started = (epoch_seconds_to_ms(callback.last_execution_time, field="last_execution_time")
               if callback.last_execution_time is not None else None)
    duration = None
    if callback.is_end and callback.last_running_time is not None:
        duration = duration_seconds_to_ms(callback.last_running_time, field="last_running_time")
    exit_code = exit_code_as_given(callback.exit_code)
    if exit_code is None and callback.is_end:
        exit_code = shell.exit_code
    return CallbackFacts(cron_id=cron_id, pid=callback.pid, log_ref=log_path_digest(callback.log_path),
                         started_at_ms=started, duration_ms=duration, exit_code=exit_code,
                         received_at_ms=received_at_ms, log_path=callback.log_path if keep_log_path else None,
                         trapped=shell.trapped and callback.is_end)

