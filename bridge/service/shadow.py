"""ShadowRecorder: a 2.x execution recorded as Run / Attempt 1 / events (docs/shadow-recording.md).

Callbacks carry no run id, so each one is placed by evidence: a start opens one Run per execution
(idempotency key = cron, pid, log digest, begin time); an end closes the single active candidate found
by (pid, log digest), then pid, then "the only active Run"; an end with no open Run back-fills one, its
missing steps marked synthesized; several candidates is recorded as ambiguous and nothing is guessed.
Everything for one callback is one transaction. The same recorder serves primary mode: a Run accepted
under primary is owned by the bridge, keeps 2.x's log_path for the projection, and every change of it
adds a projection outbox row in the same transaction.

A signal exit (128 + N) is no proof of a stop: the end may be kept while 2.x's evidence comes in
(bridge.service.pending_ends), and its Run is then closed as decided: cancelled with the stop's source, or by
its exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from bridge.domain.aggregate import RunChange
from bridge.domain.errors import AttemptConflictError, RunVersionConflictError
from bridge.domain.events import SHELL, Actor, ErrorCode, EventType
from bridge.domain.ladder import bring_attempt_to_running, bring_run_to_running, open_to_running
from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import (
    CALLBACK_TRIGGER,
    PROJECT_ID,
    AttemptStatus,
    Owner,
    Run,
    RunAttempt,
    RunStatus,
    new_legacy_run,
)
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome, ShadowResult
from bridge.service.pending_ends import EndVerdict, PendingEnd
from bridge.service.ports import (
    ActiveCandidate,
    DedupeKeyTakenError,
    IdempotencyKeyTakenError,
    MismatchRecord,
)
from bridge.service.run_service import RunService, RunTransaction

CANDIDATE_LIMIT = 64  # docs/run-state.md#correlating-callbacks: bounded lookups
STORED_REVISIONS_KEPT = 4096
_SYNTH = {"synthesized": True}


ContextSource = Callable[[], ExecutionContext | None]


class ShadowRecorder:
    def __init__(self, runs: RunService) -> None:
        self._runs = runs
        # Revisions whose snapshot is known committed (snapshots are never deleted): a cron's every start
        # would otherwise re-send the same insert-or-ignore. Bounded; forgetting only costs that insert.
        self._stored_revisions: set[str] = set()

    def record_start(self, facts: CallbackFacts, context: ExecutionContext) -> ShadowResult:
        """Open the execution's Run (running, Attempt 1 running); a repeat appends nothing."""
        revision_stored = context.task_revision in self._stored_revisions
        ctx = replace(context, snapshot=None) if revision_stored else context

        def open_new(tx: RunTransaction) -> ShadowResult:
            run = _open_run(tx, facts, ctx, synthesized=False)
            return ShadowResult(Outcome.STARTED, run.id, ctx.origin)

        def work(tx: RunTransaction) -> ShadowResult:
            existing = tx.store.get_run_by_idempotency_key(PROJECT_ID, facts.execution_key)
            if existing is not None:
                return _late_or_duplicate(tx, existing, f"late-start:{facts.execution_key}", "start")
            return open_new(tx)

        # Almost every start is new: insert at once and let the idempotency key's unique index catch a
        # repeat, which then takes the reading path. That saves the happy path a read (a round trip on
        # PostgreSQL); the failed insert rolled back whole, so the repeat sees the store as it was.
        try:
            result = self._runs.transaction(open_new)
        except IdempotencyKeyTakenError:
            result = self._once(work, facts)
        if result.outcome is Outcome.STARTED and ctx.snapshot is not None:
            if len(self._stored_revisions) >= STORED_REVISIONS_KEPT:
                self._stored_revisions.clear()
            self._stored_revisions.add(ctx.task_revision)
        return result

    def read_ahead_end(self, cron_id: int) -> list[ActiveCandidate]:
        """The cron's open Runs, read in a transaction of their own while 2.x is still answering the end."""
        return self._runs.read(lambda tx: tx.store.active_candidates(cron_id, CANDIDATE_LIMIT))

    def record_end(self, facts: CallbackFacts, context: ContextSource,
                   read_ahead: list[ActiveCandidate] | None = None) -> ShadowResult:
        """Close the one matching Run, back-fill one, or record why the callback could not be placed.

        With ``read_ahead`` (read_ahead_end's answer) the usual case, the one open Run of this pid and log,
        is closed without reading again: the Run's version CAS proves the Run and its Attempts are as read
        (every change to them bumps it), and on a miss the callback is placed anew on what the store holds
        now. Anything else (a weaker match, none, several, a finished Attempt) takes the reading path.
        """
        matched = _strong_match(read_ahead, facts) if read_ahead is not None else None
        if matched is not None:
            try:
                return self._once(lambda tx: _close(tx, matched, facts), facts)
            except (RunVersionConflictError, AttemptConflictError):
                pass

        def work(tx: RunTransaction, ctx: ExecutionContext | None | _Unread) -> ShadowResult:
            candidates = tx.store.active_candidates(facts.cron_id, CANDIDATE_LIMIT)
            matched = correlate(candidates, facts)
            if len(matched) == 1:
                return _close(tx, matched[0], facts)
            if len(matched) > 1:
                return _unplaced(tx, facts, Outcome.AMBIGUOUS, [c.run.id for c in matched])
            existing = tx.store.get_run_by_idempotency_key(PROJECT_ID, facts.execution_key)
            if existing is not None:
                return _late_or_duplicate(tx, existing, f"late:{facts.end_key}", "end", facts.end_key)
            if isinstance(ctx, _Unread):
                raise ctx  # rolls this transaction back, having written nothing
            if ctx is None:
                return ShadowResult(Outcome.UNMATCHED)
            started = _run_of_row_pid(tx, facts, ctx)
            if started is not None:  # a pid-less end of a Run that has closed: a replay, or late
                return _late_or_duplicate(tx, started, f"late:{facts.end_key}", "end", facts.end_key)
            run = _open_run(tx, replace(facts, pid=facts.pid if facts.pid is not None else ctx.row_pid), ctx,
                            synthesized=True)
            closed = _close(tx, ActiveCandidate(*_reload(tx, run)), facts)
            return ShadowResult(Outcome.BACKFILLED, closed.run_id, ctx.origin)

        try:
            return self._once(lambda tx: work(tx, _Unread()), facts)
        except _Unread:
            pass
        # A back-fill needs 2.x's Crontabs row: read with no transaction of the store open
        # (docs/run-state.md#transaction-boundaries), then placed anew, so a Run that appeared meanwhile is closed
        # instead of a second one made.
        ctx = context()
        return self._once(lambda tx: work(tx, ctx), facts)

    def deferrable_run(self, facts: CallbackFacts, read_ahead: list[ActiveCandidate] | None = None) -> Run | None:
        """The Run this end would close, when its closing may wait for 2.x's evidence: the one active Run 2.x
        owns that the end correlates with, its Attempt still running and no cancel asked for. Read only; None
        sends the end down the usual path (a back-fill, several candidates, a late end)."""
        def pick(candidates: list[ActiveCandidate]) -> Run | None:
            matched = correlate(candidates, facts)
            if len(matched) != 1:
                return None
            run, attempt = matched[0].run, matched[0].attempt
            ok = run.owner == Owner.LEGACY.value and run.cancel_requested_at_ms is None and attempt is not None \
                and not attempt.is_terminal
            return run if ok else None

        if read_ahead is not None:  # a hint: a Run changed since is caught when the end is decided
            return pick(read_ahead)
        return self._runs.read(lambda tx: pick(tx.store.active_candidates(facts.cron_id, CANDIDATE_LIMIT)))

    def close_pending_end(self, end: PendingEnd, verdict: EndVerdict) -> ShadowResult:
        """Close a pending end's Run as decided. Deciding again is a no-op (the end's dedupe key), and a Run that
        ended meanwhile (a relayed stop) takes the end as late, once."""
        return self._once(lambda tx: _close_kept(tx, end, verdict), end.facts)

    def record_stop(self, cron_id: int, received_at_ms: int, ended: Sequence[PendingEnd] = (),
                    passed_over: Collection[str] = ()) -> list[ShadowResult]:
        """2.x's stop killed the cron's processes and closed its instances: cancel its active shadow Runs
        (cancelled_by_user), but those in ``passed_over`` (they had ended before the stop). The ends kept
        meanwhile (the killed shells' traps reached 2.x before its answer) close their Runs cancelled with the
        exit code they reported."""
        code = ErrorCode.CANCELLED_BY_USER
        verdict = EndVerdict(code, "relayed_stop", requested_at_ms=received_at_ms)

        def work(tx: RunTransaction) -> list[ShadowResult]:
            results = [_close_kept(tx, end, verdict) for end in ended]
            for candidate in tx.store.active_candidates(cron_id, CANDIDATE_LIMIT):
                if candidate.run.id not in passed_over:
                    results.append(_cancel(tx, candidate, f"legacy-stop:{received_at_ms}", SHELL, code,
                                           evidence="relayed_stop"))
            return [r for r in results if r.outcome is Outcome.CANCELLED]

        return self._runs.transaction(work)

    def record_instance_stop(self, execution_key: str, received_at_ms: int,
                             ended: Sequence[PendingEnd] = ()) -> list[ShadowResult]:
        """2.x's stopInstance stopped one execution (found by its Run key): cancel that Run
        (instance_stopped_by_user), with the exit code of its end if that was kept meanwhile."""
        code = ErrorCode.INSTANCE_STOPPED_BY_USER
        verdict = EndVerdict(code, "relayed_instance_stop", requested_at_ms=received_at_ms)

        def work(tx: RunTransaction) -> list[ShadowResult]:
            if ended:
                return [_close_kept(tx, end, verdict) for end in ended]
            run = tx.store.get_run_by_idempotency_key(PROJECT_ID, execution_key)
            if run is None or run.is_terminal:
                return []
            attempts = tx.store.get_attempts(run.id)
            candidate = ActiveCandidate(run, attempts[-1] if attempts else None)
            return [_cancel(tx, candidate, f"legacy-instance-stop:{received_at_ms}", SHELL, code,
                            evidence="relayed_instance_stop")]

        return self._runs.transaction(work)

    def cancel_run(self, run_id: str, *, actor: Actor, code: ErrorCode, evidence: str,
                   finished_at_ms: int | None = None) -> ShadowResult:
        """2.x shows the execution stopped (its instance row): cancel the Run with the stop's code, once."""
        def work(tx: RunTransaction) -> ShadowResult:
            run = tx.store.get_run(run_id)
            if run is None or run.is_terminal:
                return ShadowResult(Outcome.DUPLICATE, run_id, run.origin if run else None)
            attempts = tx.store.get_attempts(run_id)
            candidate = ActiveCandidate(run, attempts[-1] if attempts else None)
            return _cancel(tx, candidate, f"cancel:{code.value}", actor, code, evidence=evidence,
                           finished_at_ms=finished_at_ms)

        return self._once(work, None)

    def has_active_bridge_runs(self) -> bool:
        return self._runs.read(lambda tx: tx.store.has_active_runs_owned_by(Owner.BRIDGE.value))

    def owner_of_end(self, facts: CallbackFacts) -> str | None:
        """The owner of the one active Run an end callback would close, or None (read only, no guess)."""
        def work(tx: RunTransaction) -> str | None:
            matched = correlate(tx.store.active_candidates(facts.cron_id, CANDIDATE_LIMIT), facts)
            return matched[0].run.owner if len(matched) == 1 else None

        return self._runs.read(work)

    def _once(self, work: Callable[[RunTransaction], ShadowResult], facts: CallbackFacts | None) -> ShadowResult:
        try:
            return self._runs.transaction(work)
        except (IdempotencyKeyTakenError, DedupeKeyTakenError):
            # A twin callback committed the same execution or the same end first: this one is the duplicate.
            return ShadowResult(Outcome.DUPLICATE)


class _Unread(Exception):
    """An end that needs a back-fill found its context unread: the transaction is abandoned to read it."""


def correlate(candidates: list[ActiveCandidate], facts: CallbackFacts) -> list[ActiveCandidate]:
    """Every candidate at the first level that has any: (pid, log digest), then pid, then the Runs no pid
    contradicts (a Run whose known pid differs is another execution, never a guess). One is a match;
    several are ambiguous.

    An end without a pid (v2.17.0–v2.18.1 send ``''``, docs/legacy-2x.md#callback-bodies-before-v221) is placed by
    its log path, which names one execution (its start time to the millisecond), then by its begin second; a Run
    whose known log path differs is another execution, as a differing pid is. The rule holds on every release:
    from v2.18.2 every end carries its pid."""
    if facts.pid is None:
        return _by_log(candidates, facts)
    strong = [c for c in candidates if c.run.legacy_pid == facts.pid and c.run.log_ref == facts.log_ref]
    if strong:
        return strong
    by_pid = [c for c in candidates if c.run.legacy_pid == facts.pid]
    if by_pid:
        return by_pid
    return [c for c in candidates if c.run.legacy_pid is None]


def _by_log(candidates: list[ActiveCandidate], facts: CallbackFacts) -> list[ActiveCandidate]:
    """The candidates of a pid-less end: its log path's, narrowed by its begin second when that tells them apart;
    with no log path of its own, every Run (nothing contradicts it)."""
    if facts.log_ref is None:
        return list(candidates)
    same_log = [c for c in candidates if c.run.log_ref == facts.log_ref]
    if same_log:
        same_begin = [c for c in same_log if c.run.started_at_ms == facts.started_at_ms]
        return same_begin or same_log
    return [c for c in candidates if c.run.log_ref is None]


def _strong_match(candidates: list[ActiveCandidate], facts: CallbackFacts) -> ActiveCandidate | None:
    """The single open Run with this pid and log digest whose Attempt still runs, if that is what was read."""
    matched = correlate(candidates, facts)
    if len(matched) != 1 or facts.pid is None:
        return None
    candidate = matched[0]
    if (candidate.run.legacy_pid, candidate.run.log_ref) != (facts.pid, facts.log_ref):
        return None
    return candidate if candidate.attempt is not None and not candidate.attempt.is_terminal else None


def _run_of_row_pid(tx: RunTransaction, facts: CallbackFacts, ctx: ExecutionContext) -> Run | None:
    """The Run a pid-less end belongs to by the pid 2.x's row keeps beside its log path (its start's key)."""
    if facts.pid is not None or ctx.row_pid is None:
        return None
    return tx.store.get_run_by_idempotency_key(PROJECT_ID, replace(facts, pid=ctx.row_pid).execution_key)


def _open_run(tx: RunTransaction, facts: CallbackFacts, ctx: ExecutionContext, *, synthesized: bool) -> Run:
    started = facts.started_at_ms if facts.started_at_ms is not None else facts.received_at_ms
    run = new_legacy_run(
        run_id=tx.new_id(), cron_id=facts.cron_id, task_revision=ctx.task_revision, trigger_type=CALLBACK_TRIGGER,
        created_at_ms=tx.at_ms, idempotency_key=facts.execution_key, origin=ctx.origin, origin_evidence=ctx.evidence,
        mode=ctx.mode, owner=ctx.owner, legacy_pid=facts.pid, log_ref=facts.log_ref, synthesized=synthesized,
        received_at_ms=facts.received_at_ms,
    )
    mark = _SYNTH if synthesized else {}
    change = tx.create(run, actor=SHELL, payload={"origin": ctx.origin, "evidence": ctx.evidence, **mark})
    attempt = open_to_running(change, RunAttempt(
        id=tx.new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED, executor_type="legacy_shell",
        callback_sequence=0, created_at_ms=tx.at_ms, pid=facts.pid, log_artifact_id=facts.log_ref,
        executor_handle=None if synthesized else ctx.executor_handle, synthesized=synthesized,
        legacy_log_path=facts.log_path if ctx.owner == Owner.BRIDGE.value else None), started_at_ms=started)
    if ctx.snapshot is not None:
        tx.store.put_task_snapshot(ctx.snapshot)
    committed = tx.commit(change).run
    _project(tx, committed, attempt.id, "start")
    return committed


def _reload(tx: RunTransaction, run: Run) -> tuple[Run, RunAttempt | None]:
    attempts = tx.store.get_attempts(run.id)
    stored = tx.store.get_run(run.id)
    assert stored is not None
    return stored, attempts[-1] if attempts else None


def _close(tx: RunTransaction, candidate: ActiveCandidate, facts: CallbackFacts,
           verdict: EndVerdict | None = None) -> ShadowResult:
    """The end closes the Run: by its exit code, cancelled when the verdict names a stop, else ``ended``: an end
    without an exit code (before v2.21, and update.sh's on v2.21) says the execution finished, not how
    (docs/run-state.md#outcome-not-reported)."""
    run, attempt = candidate.run, candidate.attempt
    change = tx.begin(run, actor=verdict.actor if verdict else SHELL, dedupe_key=facts.end_key)
    if attempt is None or attempt.is_terminal:
        return _late(tx, change, attempt, "end")
    stop = verdict.stop if verdict else None
    failed = facts.exit_code not in (None, 0)
    error = {"error_code": (stop or ErrorCode.PROCESS_EXIT_ERROR).value} if stop or failed else {}
    payload = {**_exit(facts), **({"evidence": verdict.evidence} if verdict else {})}
    if stop is not None:
        payload["cancel_reason"] = stop.value
        _request_cancel(change, stop, (verdict.requested_at_ms if verdict else None) or facts.received_at_ms,
                        payload)
    attempt = bring_attempt_to_running(change, attempt, payload=_SYNTH)
    to_attempt, to_run = _ended_as(stop is not None, facts.exit_code)
    change.move_attempt(attempt, to_attempt, payload=payload, exit_code=facts.exit_code,
                        finished_at_ms=facts.received_at_ms, **error)
    bring_run_to_running(change, payload=_SYNTH)
    change.move_run(to_run, payload=payload, duration_ms=facts.duration_ms, finished_at_ms=facts.received_at_ms,
                    **error)
    tx.commit(change)
    _project(tx, run, attempt.id, "end")
    return ShadowResult(Outcome.CANCELLED if stop else Outcome.CLOSED, run.id, run.origin)


def _ended_as(stopped: bool, exit_code: int | float | None) -> tuple[AttemptStatus, RunStatus]:
    """Where an end takes the Attempt and the Run: a stop is cancelled; an exit code says succeeded (0) or failed;
    no exit code says only that it ended, never that it succeeded."""
    if stopped:
        return AttemptStatus.CANCELLED, RunStatus.CANCELLED
    if exit_code is None:
        return AttemptStatus.ENDED, RunStatus.ENDED
    if exit_code == 0:
        return AttemptStatus.SUCCEEDED, RunStatus.SUCCEEDED
    return AttemptStatus.FAILED, RunStatus.FAILED


def _close_kept(tx: RunTransaction, end: PendingEnd, verdict: EndVerdict) -> ShadowResult:
    run = tx.store.get_run(end.run_id)
    if run is None:
        return ShadowResult(Outcome.UNMATCHED)
    if run.is_terminal:
        return _late_or_duplicate(tx, run, f"late:{end.facts.end_key}", "end", end.facts.end_key)
    attempts = tx.store.get_attempts(run.id)
    return _close(tx, ActiveCandidate(run, attempts[-1] if attempts else None), end.facts, verdict)


def _request_cancel(change: RunChange, code: ErrorCode, at_ms: int, payload: dict[str, object]) -> None:
    """The durable cancel request (docs/run-state.md#durable-cancellation), unless one is on the Run already."""
    if change.run.cancel_requested_at_ms is None:
        change.set_run_fields(cancel_requested_at_ms=at_ms, cancel_reason=code.value)
        change.append(EventType.RUN_CANCEL_REQUESTED,
                      {k: v for k, v in payload.items() if k in ("cancel_reason", "evidence")})


def _cancel(tx: RunTransaction, candidate: ActiveCandidate, dedupe_key: str, actor: Actor, code: ErrorCode, *,
            evidence: str, finished_at_ms: int | None = None) -> ShadowResult:
    """Durable cancel first (docs/run-state.md#durable-cancellation), then the outcome 2.x already observed: stopped, by
    ``code``."""
    run, attempt = candidate.run, candidate.attempt
    change = tx.begin(run, actor=actor, dedupe_key=dedupe_key)
    reason: dict[str, object] = {"cancel_reason": code.value, "evidence": evidence}
    _request_cancel(change, code, finished_at_ms if finished_at_ms is not None else tx.at_ms, reason)
    fields: dict[str, object] = {"error_code": code.value}
    if finished_at_ms is not None:
        fields["finished_at_ms"] = finished_at_ms
    if attempt is not None and not attempt.is_terminal:
        change.move_attempt(attempt, AttemptStatus.CANCELLED, payload=reason, **fields)
    change.move_run(RunStatus.CANCELLED, payload=reason, **fields)
    tx.commit(change)
    _project(tx, run, attempt.id if attempt else None, "cancel")
    return ShadowResult(Outcome.CANCELLED, run.id, run.origin)


def _project(tx: RunTransaction, run: Run, attempt_id: str | None, event: str) -> None:
    """Primary mode: 2.x's columns follow the change, through an outbox row in the same transaction."""
    if run.owner == Owner.BRIDGE.value and run.legacy_cron_id is not None:
        tx.store.enqueue_projection(run.legacy_cron_id, run.id, attempt_id, event, tx.at_ms)


def _exit(facts: CallbackFacts) -> dict[str, object]:
    payload: dict[str, object] = {"received_at_ms": facts.received_at_ms}
    if facts.exit_code is not None:
        payload["exit_code"] = facts.exit_code
    if facts.duration_ms is not None:
        payload["duration_ms"] = facts.duration_ms
    return payload


def _late_or_duplicate(tx: RunTransaction, run: Run, late_key: str, kind: str,
                       own_key: str | None = None) -> ShadowResult:
    """A callback for an execution already recorded: a pure repeat appends nothing; a late one, one event."""
    if own_key is not None and tx.store.has_dedupe_key(run.id, own_key):
        return ShadowResult(Outcome.DUPLICATE, run.id, run.origin)
    attempts = tx.store.get_attempts(run.id)
    latest = attempts[-1] if attempts else None
    if latest is not None and not latest.is_terminal:
        return ShadowResult(Outcome.DUPLICATE, run.id, run.origin)
    if tx.store.has_dedupe_key(run.id, late_key):
        return ShadowResult(Outcome.DUPLICATE, run.id, run.origin)
    return _late(tx, tx.begin(run, actor=SHELL, dedupe_key=late_key), latest, kind)


def _late(tx: RunTransaction, change: RunChange, attempt: RunAttempt | None, kind: str) -> ShadowResult:
    payload = {"late_status": "running" if kind == "start" else "finished", "source": kind}
    if attempt is not None:
        payload["current"] = attempt.status.value
    change.append(EventType.ATTEMPT_LATE_CALLBACK_IGNORED, payload, attempt_id=attempt.id if attempt else None)
    run = tx.commit(change).run
    return ShadowResult(Outcome.LATE_IGNORED, run.id, run.origin)


def _unplaced(tx: RunTransaction, facts: CallbackFacts, outcome: Outcome, run_ids: list[str]) -> ShadowResult:
    kind = (MismatchKind.AMBIGUOUS_CALLBACK if outcome is Outcome.AMBIGUOUS else MismatchKind.UNMATCHED_CALLBACK).value
    tx.store.record_mismatch(MismatchRecord(
        kind=kind, dedupe_key=f"{kind}:{facts.cron_id}:{facts.end_key}", seen_at_ms=tx.at_ms,
        legacy_cron_id=facts.cron_id,
        diff={"candidates": len(run_ids), "run_ids": run_ids[:8], "pid": facts.pid, "log_ref": facts.log_ref}))
    return ShadowResult(outcome)
