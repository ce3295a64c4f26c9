"""Stop decisions: when 2.x stops an execution, its Run ends cancelled with the stop's source, never failed.

The killed shell's trap reports a signal exit (128 + N) and often reaches 2.x before 2.x's own answer to the
stop does. So an end with a signal exit whose Run is open is kept (``pending_ends``) for the stop-decision
window instead of closing the Run, and the Run closes on the first evidence, in this order:

1. a stop relayed through the bridge: ``PUT /crons/stop`` answered 2xx cancels the cron's Runs
   (cancelled_by_user); ``POST /crons/:id/instances/:iid/stop`` answered with JSON ``code`` 200 cancels that
   instance's Run (instance_stopped_by_user). Ends kept meanwhile close cancelled with their exit codes;
2. once the window is over, 2.x's instance row of the execution: stopped with neither finish time nor exit
   code → legacy_boot_reset (initData); stopped, and a single-instance cron started again right after →
   replaced_by_next_run (runCron); stopped otherwise → stopped_in_legacy. Any other row (error, finished,
   still running) → the exit code decides: a signal exit with no stop evidence stays failed, as 2.x says;
3. where 2.x has no instance row of it (v2.17–v2.20 have no RunningInstances), the task shell's own word that
   its signal trap ended it: the seam block's trapped header, else 2.x's stop marker on the log's end line
   (``(手动停止)`` from v2.18.0, which v2.18.1+ writes after the end callback: hence the wait). Then a
   single-instance cron whose Crontabs row shows a newer execution begun right after → replaced_by_next_run
   (runCron, v2.20); otherwise → stopped_in_legacy. No word from the trap → the exit code decides.

Before v2.21 an end may say nothing of how it ended (no exit code): it is kept too while a stop of its cron is in
flight, and, where the release writes a stop marker, for the window, to read the log's end line. From v2.17 to
v2.19 a relayed stop kills only the pid 2.x's Crontabs row holds (``killTask(doc.pid)``): the other open Runs of
the cron ran on, and are passed over.

While a stop of the cron is on its way to 2.x (forwarded, not yet answered), an end with any failing exit (the
trap's code need not be a signal's) is kept too, and no pending end of that cron is decided: the stop's answer is
the evidence that decides them, however long 2.x takes past the window (up to STOP_IN_FLIGHT_MAX_S). This
memory is the serving process's own; a pending end another replica decides meanwhile falls back to 2.x's row.

A 2.x database that cannot be read puts the decision off, until GIVE_UP_S after the end; then the exit code
decides. Deciding is idempotent (the end's dedupe key; a Run already ended takes the end as late), so the
decider thread in ``bridge serve``, startup recovery and another replica may all meet the same row.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, tzinfo
from itertools import islice

from bridge.domain.events import Actor, ActorType, ErrorCode, is_signal_exit
from bridge.service.callback_facts import CallbackFacts, Outcome, ShadowResult
from bridge.service.pending_ends import EndVerdict, PendingEnd, PendingEndStore
from bridge.service.ports import ActiveCandidate, Clock
from bridge.service.shadow import ShadowRecorder
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.identity import instance_execution_key, speaking_row
from legacy_adapters.log_files import LogDirectory
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.records import LegacyCron, LegacyInstance
from legacy_adapters.scheduler_mode import SchedulerMode
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.reconcile import instance_defects

log = logging.getLogger("bridge.stops")
RECONCILER = Actor(ActorType.RECONCILER)  # the actor of every change the jobs make (reconcile, recovery, stops)
DEFAULT_WINDOW_S = 5
GIVE_UP_S = 3600  # 2.x's database unreadable for this long after the end: its exit code decides
RETRY_S = 5  # how soon a decision put off for an unreadable 2.x database is tried again
BATCH = 64
# runCron stamps the old row's finished_at, then spawns the next shell, whose begin second follows at once.
REPLACEMENT_GAP_S = 5
NEWER_ROWS_READ = 64  # 2.x rows read after the stopped one when looking for the cron's next start
# A stop forwarded this long ago without an answer no longer holds its cron's pending ends (an answer that never
# came back through this process: the forward failed, or the process handing it over died).
STOP_IN_FLIGHT_MAX_S = 120
IN_FLIGHT_RETRY_MS = 500  # how soon a pending end held by a stop in flight is looked at again


def instance_of(reader: LegacyRecords, cron_id: int, pid: int | None, log_ref: str | None,
                started_at_ms: int | None, near_ms: int) -> LegacyInstance | None:
    """The 2.x instance row of one execution: same cron and pid, same log digest, same begin second.

    Looked up among the rows 2.x inserted around ``near_ms`` (when the shadow Run was created, just after 2.x
    answered the start callback), never among a cron's newest rows only: the cron may have run any number of
    times since. Replayed start callbacks give 2.x more than one row: the one that speaks is chosen by
    ``legacy_adapters.identity.speaking_row``, as the reconciler and the import choose it.
    """
    found = [instance for instance in reader.instances_inserted_near(cron_id, pid, near_ms)
             if log_path_digest(instance.log_path) == log_ref and _started_ms(instance) == started_at_ms]
    if not found:
        return None
    return speaking_row(found, {instance.id for instance in found if instance_defects(instance, math.inf)})


@dataclass(frozen=True, slots=True)
class Replacements:
    """Which next start can have replaced a single-instance cron's execution. Only runCron kills the previous run
    (``allow_multiple_instances === 0``, v2.20+), and only Node's scheduler calls it (back/schedule/addCron.ts,
    back/shared/runCron.ts at v2.20.2, v2.21.0): a panel run (runSingle) or a crond fire right after a stop kills
    nothing, so a start counts only where it is a Node scheduled fire of the cron, in 2.x's zone."""

    scheduler_mode: SchedulerMode = SchedulerMode.NODE
    tz: tzinfo = UTC

    def fired_by_node(self, cron: LegacyCron, begin_s: int | float) -> bool:
        decision = infer_scheduled_origin(cron, int(begin_s), self.scheduler_mode, self.tz)
        return decision.origin == "scheduled_node"


# Without 2.x's settings at hand: every schedule taken as Node's, in UTC (bootstrap always passes the install's).
ANY_NODE_FIRE = Replacements()


def legacy_stop_code(reader: LegacyRecords, instance: LegacyInstance, replacements: Replacements) -> ErrorCode:
    """Who stopped an instance 2.x shows stopped, when no stop went through the bridge
    (docs/legacy-2x.md#run-state-routes, #startup-reset)."""
    if instance.finished_at is None and instance.exit_code is None:
        return ErrorCode.LEGACY_BOOT_RESET  # initData sets status only
    if replaced_by_next_run(reader, instance, replacements):
        return ErrorCode.REPLACED_BY_NEXT_RUN
    return ErrorCode.STOPPED_IN_LEGACY


def replaced_by_next_run(reader: LegacyRecords, instance: LegacyInstance, replacements: Replacements) -> bool:
    """runCron's single-instance check (``allow_multiple_instances === 0``) killed this execution: 2.x stamped
    the row's finished_at, set the cron idle and started the next one, a Node scheduled fire whose start callback
    inserted a newer row of the same cron beginning within REPLACEMENT_GAP_S. Reads the cron and a page of newer
    rows by key."""
    if instance.finished_at is None or instance.cron_id is None:
        return False
    cron = reader.get_cron(instance.cron_id)
    if cron is None or cron.allow_multiple_instances is not False:
        return False
    finished = instance.finished_at
    for later in islice(reader.iter_instances(after_id=instance.id, batch_size=NEWER_ROWS_READ), NEWER_ROWS_READ):
        if later.cron_id == instance.cron_id and later.started_at is not None \
                and finished - 1 <= later.started_at <= finished + REPLACEMENT_GAP_S \
                and replacements.fired_by_node(cron, later.started_at):
            return True
    return False


class StopDecisions:
    """Keeps ends with a signal exit, applies relayed stops, and decides pending ends once their window is over.

    Without a PendingEndStore nothing is kept (each end closes its Run at once) and relayed stops still apply.
    """

    def __init__(self, recorder: ShadowRecorder, reader: LegacyRecords, pending: PendingEndStore | None,
                 clock: Clock, *, window_ms: int = DEFAULT_WINDOW_S * 1000,
                 monotonic: Callable[[], float] = time.monotonic, logs: LogDirectory | None = None,
                 kills_every_instance: bool = True, replacements: Replacements = ANY_NODE_FIRE) -> None:
        """``logs``: 2.x's ``data/log``, read with the release's stop marker, where a stopped task's log is the
        only record of its stop: before v2.21 no instance row says so, its log's end line does
        (docs/legacy-2x.md#stops-and-log-lines-before-v221); None: never read. ``kills_every_instance``: the
        release's stop kills every execution of the cron (ReleaseProfile.stop_kills_every_instance). Bootstrap
        gives both from the release profile. ``replacements``: which next start can have replaced an execution
        (2.x's scheduler mode and zone, from the settings)."""
        self._recorder = recorder
        self._replacements = replacements
        self._logs = logs
        self._kills_every_instance = kills_every_instance
        self._reader = reader
        self._pending = pending
        self._clock = clock
        self._window_ms = window_ms
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stops_in_flight: dict[int, list[float]] = {}  # cron id -> when each stop of it was forwarded

    def stop_forwarded(self, cron_ids: Iterable[int]) -> None:
        """A stop of these crons is on its way to 2.x; ``stop_settled`` says when its answer has been applied."""
        now = self._monotonic()
        with self._lock:
            for cron_id in cron_ids:
                self._stops_in_flight.setdefault(cron_id, []).append(now)

    def stop_settled(self, cron_ids: Iterable[int]) -> None:
        with self._lock:
            for cron_id in cron_ids:
                started = self._stops_in_flight.get(cron_id)
                if started:
                    started.pop(0)
                if not started:
                    self._stops_in_flight.pop(cron_id, None)

    def stop_in_flight(self, cron_id: int) -> bool:
        horizon = self._monotonic() - STOP_IN_FLIGHT_MAX_S
        with self._lock:
            return any(at >= horizon for at in self._stops_in_flight.get(cron_id, ()))

    @property
    def pending(self) -> PendingEndStore | None:
        return self._pending

    def keep(self, facts: CallbackFacts, read_ahead: list[ActiveCandidate] | None = None) -> ShadowResult | None:
        """Keep an end with a signal exit whose Run is open, or with any failing exit while a stop of its cron is
        on its way to 2.x; None: close it the usual way, now."""
        if self._pending is None or not self._may_be_a_stop(facts):
            return None
        run = self._recorder.deferrable_run(facts, read_ahead)
        if run is None:
            return None
        self._pending.add(PendingEnd(facts, run.id, run.created_at_ms, facts.received_at_ms + self._window_ms))
        return ShadowResult(Outcome.DEFERRED, run.id, run.origin)

    def _may_be_a_stop(self, facts: CallbackFacts) -> bool:
        """Whether the end may be a stop's, so that its Run waits for the evidence: the trap sent it, it reports a
        signal exit, it does not report success while a stop of its cron is in flight, or it reports nothing and
        the log's end line will tell."""
        if facts.trapped or is_signal_exit(facts.exit_code):
            return True
        if facts.exit_code != 0 and self.stop_in_flight(facts.cron_id):  # failing, or no exit code (before v2.21)
            return True
        return facts.exit_code is None and self._logs is not None

    def relayed_stop(self, cron_id: int, received_at_ms: int) -> list[ShadowResult]:
        """2.x accepted ``PUT /crons/stop`` for this cron, which reached the bridge at ``received_at_ms``.

        Ends kept since then are the stop's own kills; a Run whose end was kept before had ended already (2.x
        closed its row on that end, and the stop's update passes it by): its pending end is decided on its own.
        So is a Run the stop did not kill (v2.17–v2.19 kill only the row's pid).
        """
        kept = self._pending.for_cron(cron_id, 0) if self._pending is not None else []
        spared = self._spared_by_stop(cron_id)
        ended = [end for end in kept if end.facts.received_at_ms >= received_at_ms and end.run_id not in spared]
        earlier = {end.run_id for end in kept if end.facts.received_at_ms < received_at_ms} | spared
        results = self._recorder.record_stop(cron_id, received_at_ms, ended, passed_over=earlier)
        self._forget(ended)
        return results

    def relayed_instance_stop(self, instance_id: int, received_at_ms: int) -> list[ShadowResult]:
        """2.x's stopInstance answered code 200 for ``instance_id``: its row is stopped; cancel its Run."""
        found = next(islice(self._reader.iter_instances(after_id=instance_id - 1, batch_size=1), 1), None)
        if found is None or found.id != instance_id or found.status != InstanceStatus.STOPPED or found.cron_id is None:
            return []
        identity = (found.pid, log_path_digest(found.log_path), _started_ms(found))
        ended = [end for end in (self._pending.for_cron(found.cron_id, received_at_ms) if self._pending else [])
                 if (end.facts.pid, end.facts.log_ref, end.facts.started_at_ms) == identity]
        key = instance_execution_key(found.cron_id, found.pid, found.log_path, found.started_at)
        results = self._recorder.record_instance_stop(key, received_at_ms, ended)
        self._forget(ended)
        return results

    def decide_due(self, limit: int = BATCH) -> Counter[str]:
        """Decide the pending ends whose window is over; returns how many closed each way (a stop code, ``exit``,
        ``deferred:<state>``)."""
        outcomes: Counter[str] = Counter()
        if self._pending is None:
            return outcomes
        now = self._clock.now_ms()
        for end in self._pending.due(now, limit):
            if self.stop_in_flight(end.facts.cron_id) and end.id is not None:
                self._pending.postpone(end.id, now + IN_FLIGHT_RETRY_MS)  # the stop's answer will decide it
                outcomes["deferred:stop_in_flight"] += 1
                continue
            try:
                verdict = self.verdict(end)
            except LegacyDatabaseError as exc:  # its reason is the state 2.x's database is in
                if now - end.facts.received_at_ms < GIVE_UP_S * 1000 and end.id is not None:
                    self._pending.postpone(end.id, now + RETRY_S * 1000)
                    outcomes[f"deferred:{exc.reason}"] += 1
                    continue
                verdict = EndVerdict(None, "legacy_unreadable")
            self._recorder.close_pending_end(end, verdict)
            self._forget([end])
            outcomes[verdict.stop.value if verdict.stop else "exit"] += 1
        if outcomes:
            log.info("stop decisions: %s", dict(outcomes))
        return outcomes

    def verdict(self, end: PendingEnd) -> EndVerdict:
        """What 2.x's instance row of the pending end's execution says, else (no row: before v2.21) what the task
        shell's trap left; raises when 2.x's database does not read."""
        facts = end.facts
        instance = instance_of(self._reader, facts.cron_id, facts.pid, facts.log_ref, facts.started_at_ms,
                               end.run_created_at_ms)
        if instance is not None:
            if instance.status == InstanceStatus.STOPPED:
                return EndVerdict(legacy_stop_code(self._reader, instance, self._replacements), "legacy_instance",
                                  RECONCILER)
            return EndVerdict(None, "no_stop_evidence")
        cron = self._reader.get_cron(facts.cron_id)
        trap = "trapped_end" if facts.trapped else "log_stop_marker" if self._marked_stopped(facts, cron) else None
        if trap is None:
            return EndVerdict(None, "no_stop_evidence")
        replaced = cron is not None and replaced_per_row(cron, facts, self._replacements)
        code = ErrorCode.REPLACED_BY_NEXT_RUN if replaced else ErrorCode.STOPPED_IN_LEGACY
        return EndVerdict(code, trap, RECONCILER)

    def _marked_stopped(self, facts: CallbackFacts, cron: LegacyCron | None) -> bool:
        """Whether the execution's log ends with the release's stop marker (found through the cron's row)."""
        if self._logs is None or facts.log_ref is None:
            return False
        logged = self._logs.read(self._logs.find(facts.log_ref, cron.log_path if cron is not None else None))
        return logged is not None and logged.stopped

    def _spared_by_stop(self, cron_id: int) -> set[str]:
        """The open Runs of the cron a stop did not kill: on releases that kill only the pid the Crontabs row
        holds, every other one (read after 2.x answered: the stop leaves the row's pid as it was)."""
        if self._kills_every_instance:
            return set()
        try:
            cron = self._reader.get_cron(cron_id)
        except LegacyDatabaseError:
            return set()  # unknown: the Runs end as 2.x's row does, idle
        killed = cron.pid if cron is not None else None
        open_runs = self._recorder.read_ahead_end(cron_id)
        return {c.run.id for c in open_runs if killed is None or c.run.legacy_pid != killed}

    def _forget(self, ended: list[PendingEnd]) -> None:
        if self._pending is not None and ended:
            self._pending.remove([end.id for end in ended if end.id is not None])


class StopDeciderThread:
    """Runs ``decide_due`` every ``interval_s`` inside ``bridge serve`` until ``close()``."""

    def __init__(self, decisions: StopDecisions, interval_s: float) -> None:
        self._decisions = decisions
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._last_error: str | None = None
        self._thread = threading.Thread(target=self._loop, name="bridge-stop-decider", daemon=True)

    def start(self) -> StopDeciderThread:
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            full = False
            try:
                full = sum(self._decisions.decide_due().values()) >= BATCH
                self._last_error = None
            except Exception as exc:  # noqa: BLE001 - the thread must survive; the rows wait for the next pass
                kind = getattr(exc, "code", None) or type(exc).__name__
                if kind != self._last_error:
                    log.error("stop decisions failed: %s (will retry)", kind)  # no message: it may hold paths
                self._last_error = kind
            if self._stop.wait(0 if full else self._interval_s):
                return


def decider_interval_s(window_s: float) -> float:
    """How often the decider looks for ends whose window is over: half the window, within 0.2..1 s."""
    return max(0.2, min(1.0, window_s / 2))


def replaced_per_row(cron: LegacyCron, facts: CallbackFacts, replacements: Replacements) -> bool:
    """runCron's single-instance kill (v2.20, ``allow_multiple_instances === 0``) as 2.x's Crontabs row shows it
    where there is no instance row: the row has moved on to another execution (another log path), a Node
    scheduled fire that began within REPLACEMENT_GAP_S of this one's end (back/shared/runCron.ts@v2.20.2: kill,
    idle, spawn)."""
    began = cron.last_execution_time
    if cron.allow_multiple_instances is not False or not began or log_path_digest(cron.log_path) == facts.log_ref:
        return False
    ended_s = facts.received_at_ms // 1000
    return ended_s - 1 <= began <= ended_s + REPLACEMENT_GAP_S and replacements.fired_by_node(cron, began)


def _started_ms(instance: LegacyInstance) -> int | None:
    return epoch_seconds_to_ms(instance.started_at, field="started_at") if instance.started_at else None
