"""The transition tables as data, the command rules (bridge.domain.commands), and property tests: random
command sequences never break the rules."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.domain.aggregate import RunChange
from bridge.domain.commands import (
    CancelOutcome,
    CreateRun,
    RequestCancel,
    RetryRun,
    new_run,
    replayed,
    request_cancel,
    request_fingerprint,
    retry_of,
    run_target_after,
)
from bridge.domain.errors import (
    IdempotencyKeyConflictError,
    InvalidAttemptTransitionError,
    InvalidRunTransitionError,
    RetryNotAllowedError,
)
from bridge.domain.events import Actor, ActorType
from bridge.domain.model import (
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
    IMPORTED_MODE,
    RUN_OUTCOME_KNOWN,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    AttemptStatus,
    Run,
    RunAttempt,
    RunStatus,
)

ACTOR = Actor(ActorType.SYSTEM)
_ids = (f"id-{n}" for n in itertools.count())


def new_id() -> str:
    return next(_ids)


def a_run(status: RunStatus = RunStatus.CREATED) -> Run:
    return Run(id="r1", project_id="p", task_id="t", task_revision="v", trigger_type="manual", status=status,
               version=0, event_sequence=1, created_at_ms=1)


def test_the_tables_cover_every_status_and_match_adr_0001() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptStatus)
    assert RUN_TRANSITIONS[RunStatus.DISPATCHING] == {RunStatus.RUNNING, RunStatus.RETRY_WAIT, RunStatus.FAILED,
                                                      RunStatus.CANCELLED, RunStatus.LOST}
    assert RUN_TERMINAL == {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT,
                            RunStatus.ENDED}
    assert RunStatus.LOST not in RUN_TERMINAL  # lost needs reconciliation, it is not an end
    assert ATTEMPT_TERMINAL == {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED,
                                AttemptStatus.TIMED_OUT, AttemptStatus.LOST, AttemptStatus.ENDED}


def test_ended_is_reached_only_from_running_like_an_outcome_and_says_no_outcome() -> None:
    assert {s for s, targets in RUN_TRANSITIONS.items() if RunStatus.ENDED in targets} == {RunStatus.RUNNING}
    assert {s for s, targets in ATTEMPT_TRANSITIONS.items() if AttemptStatus.ENDED in targets} == {
        AttemptStatus.RUNNING}
    assert RUN_OUTCOME_KNOWN == RUN_TERMINAL - {RunStatus.ENDED}


def test_an_unreported_end_records_run_ended_and_attempt_ended_without_exit_code_or_error() -> None:
    run = a_run(RunStatus.RUNNING)
    attempt = RunAttempt(id="a1", run_id="r1", attempt=1, status=AttemptStatus.RUNNING, executor_type="x",
                         callback_sequence=2, created_at_ms=1)
    change = RunChange(run, actor=ACTOR, at_ms=9, new_id=new_id)
    moved = change.move_attempt(attempt, AttemptStatus.ENDED)
    assert change.move_run(RunStatus.ENDED) is RunStatus.ENDED
    result = change.result()
    assert [e.type.value for e in result.events] == ["attempt.ended", "run.ended"]
    assert (moved.status, moved.exit_code, moved.error_code, moved.finished_at_ms) == (
        AttemptStatus.ENDED, None, None, 9)
    assert (result.run.status, result.run.error_code, result.run.finished_at_ms) == (RunStatus.ENDED, None, 9)
    assert result.run.is_terminal and moved.is_terminal


def test_an_unreported_end_after_a_cancel_request_converges_to_cancelled() -> None:
    run = replace(a_run(RunStatus.RUNNING), cancel_requested_at_ms=3, cancel_reason="cancelled_by_user")
    attempt = RunAttempt(id="a1", run_id="r1", attempt=1, status=AttemptStatus.RUNNING, executor_type="x",
                         callback_sequence=0, created_at_ms=1)
    change = RunChange(run, actor=ACTOR, at_ms=9, new_id=new_id)
    assert change.move_attempt(attempt, AttemptStatus.ENDED).status is AttemptStatus.CANCELLED
    assert change.move_run(RunStatus.ENDED) is RunStatus.CANCELLED
    assert change.result().run.error_code == "cancelled_by_user"


@pytest.mark.parametrize("status", sorted(RUN_TERMINAL))
def test_a_terminal_run_refuses_every_target(status: RunStatus) -> None:
    for target in RunStatus:
        change = RunChange(a_run(status), actor=ACTOR, at_ms=2, new_id=new_id)
        with pytest.raises(InvalidRunTransitionError):
            change.move_run(target)


@given(st.lists(st.sampled_from(list(RunStatus)), max_size=25))
def test_random_run_moves_only_follow_the_table_and_keep_sequence_contiguous(targets: list[RunStatus]) -> None:
    run = a_run()
    for target in targets:
        change = RunChange(run, actor=ACTOR, at_ms=2, new_id=new_id)
        legal = target in RUN_TRANSITIONS[run.status]
        try:
            change.move_run(target)
        except InvalidRunTransitionError:
            assert not legal
            continue
        assert legal
        result = change.result()
        assert [e.sequence for e in result.events] == [run.event_sequence + 1]
        assert result.run.version == run.version + 1 and result.expected_version == run.version
        run = result.run
    assert run.status in RunStatus


@given(st.lists(st.sampled_from(list(AttemptStatus)), max_size=20))
def test_random_attempt_moves_never_leave_a_terminal_attempt(targets: list[AttemptStatus]) -> None:
    run = a_run(RunStatus.DISPATCHING)
    attempt = RunAttempt(id="a1", run_id="r1", attempt=1, status=AttemptStatus.CLAIMED, executor_type="x",
                         callback_sequence=0, created_at_ms=1)
    for target in targets:
        change = RunChange(run, actor=ACTOR, at_ms=2, new_id=new_id)
        before = attempt
        try:
            attempt = change.move_attempt(attempt, target)
        except InvalidAttemptTransitionError:
            assert target not in ATTEMPT_TRANSITIONS[before.status]
            continue
        assert before.status not in ATTEMPT_TERMINAL
        assert attempt.callback_sequence == before.callback_sequence + 1
        run = change.result().run


def test_a_multi_step_change_bumps_the_version_once_and_numbers_every_event() -> None:
    change = RunChange(a_run(), actor=ACTOR, at_ms=5, new_id=new_id, dedupe_key="cmd-1")
    for status in (RunStatus.QUEUED, RunStatus.DISPATCHING, RunStatus.RUNNING):
        change.move_run(status)
    result = change.result()
    assert result.run.version == 1 and result.run.event_sequence == 4
    assert [e.sequence for e in result.events] == [2, 3, 4]
    assert [e.dedupe_key for e in result.events] == ["cmd-1", "cmd-1#2", "cmd-1#3"]
    assert result.run.queued_at_ms == 5 and result.run.started_at_ms == 5


# The command rules, pure: what the Run commands decide before anything is written.
@pytest.mark.parametrize("status", list(RunStatus))
def test_a_manual_retry_is_allowed_only_from_failed_cancelled_or_timed_out(status: RunStatus) -> None:
    source = replace(a_run(status), legacy_cron_id=7, origin="manual", mode="shadow", owner="legacy", priority=2)
    if status not in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT):
        with pytest.raises(RetryNotAllowedError):
            retry_of(source, RetryRun(source.id, ACTOR))
        return
    create = retry_of(source, RetryRun(source.id, ACTOR, idempotency_key="again"))
    assert (create.trigger_type, create.retry_of_run_id, create.idempotency_key) == ("manual_retry", "r1", "again")
    assert (create.task_id, create.legacy_cron_id, create.origin, create.mode, create.owner, create.priority) == (
        "t", 7, "manual", "shadow", "legacy", 2)
    assert new_run(create, run_id="r2", at_ms=9).retry_of_run_id == "r1"


def test_imported_history_is_read_only_and_never_retried() -> None:
    with pytest.raises(RetryNotAllowedError):
        retry_of(replace(a_run(RunStatus.FAILED), mode=IMPORTED_MODE), RetryRun("r1", ACTOR))


@pytest.mark.parametrize("attempt_status, requested, expected", [
    (AttemptStatus.CANCELLED, RunStatus.SUCCEEDED, RunStatus.CANCELLED),
    (AttemptStatus.CANCELLED, RunStatus.FAILED, RunStatus.CANCELLED),
    (AttemptStatus.CANCELLED, RunStatus.ENDED, RunStatus.CANCELLED),
    (AttemptStatus.ENDED, RunStatus.ENDED, RunStatus.ENDED),
    (AttemptStatus.CANCELLED, RunStatus.RETRY_WAIT, RunStatus.RETRY_WAIT),
    (AttemptStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED),
    (AttemptStatus.FAILED, RunStatus.FAILED, RunStatus.FAILED),
])
def test_the_run_follows_an_attempt_a_cancel_converged_to_cancelled(
        attempt_status: AttemptStatus, requested: RunStatus, expected: RunStatus) -> None:
    assert run_target_after(attempt_status, requested) is expected


def test_a_cancel_request_is_recorded_once_and_never_on_a_terminal_run() -> None:
    change = RunChange(a_run(RunStatus.RUNNING), actor=ACTOR, at_ms=5, new_id=new_id)
    assert request_cancel(change, RequestCancel("r1", ACTOR, reason="x" * 300)) is CancelOutcome.REQUESTED
    requested = change.result()
    assert requested.run.cancel_requested_at_ms == 5 and requested.run.cancel_reason == "x" * 200
    assert [e.payload for e in requested.events] == [{"cancel_reason": "x" * 200}]
    again = RunChange(requested.run, actor=ACTOR, at_ms=6, new_id=new_id)
    assert request_cancel(again, RequestCancel("r1", ACTOR)) is CancelOutcome.ALREADY_REQUESTED
    ended = RunChange(a_run(RunStatus.SUCCEEDED), actor=ACTOR, at_ms=6, new_id=new_id)
    assert request_cancel(ended, RequestCancel("r1", ACTOR)) is CancelOutcome.ALREADY_TERMINAL
    assert not again.has_events and not ended.has_events


def test_the_request_fingerprint_is_stable_and_leaves_out_the_actor() -> None:
    cmd = CreateRun(project_id="default", task_id="legacy-cron:1", task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key="k", legacy_cron_id=1)
    assert request_fingerprint(cmd) == "b0ffb211173088fd925aeb37b91a6bde"  # stored in runs: it must never drift
    assert request_fingerprint(replace(cmd, actor=Actor(ActorType.USER, "u"), retry_of_run_id="r0")) == \
        request_fingerprint(cmd)
    assert request_fingerprint(replace(cmd, task_id="legacy-cron:2")) != request_fingerprint(cmd)
    stored = new_run(cmd, run_id="r1", at_ms=1)
    assert replayed(stored, cmd) is stored
    assert replayed(replace(stored, request_fingerprint=None), replace(cmd, priority=9)).id == "r1"
    with pytest.raises(IdempotencyKeyConflictError):
        replayed(stored, replace(cmd, priority=9))


# Service-level: random commands through RunService on a real store.
COMMANDS = st.lists(st.tuples(st.sampled_from(["run", "attempt", "new_attempt", "cancel"]),
                              st.sampled_from(list(RunStatus)), st.sampled_from(list(AttemptStatus))),
                    min_size=1, max_size=18)


def _apply_random(service, run_id: str, cmds) -> None:  # type: ignore[no-untyped-def]
    from bridge.domain.commands import CreateAttempt, RequestCancel, TransitionAttempt, TransitionRun
    from bridge.domain.errors import BridgeError
    from tests.support.run_commands import create_attempt, request_cancel, transition_attempt, transition_run

    seen: list[RunStatus] = [service.get_run(run_id).status]
    for kind, run_to, attempt_to in cmds:
        run = service.get_run(run_id)
        attempts = service.get_attempts(run_id)
        try:
            if kind == "run":
                transition_run(service, TransitionRun(run_id, run_to, run.version, ACTOR))
            elif kind == "new_attempt":
                create_attempt(service, CreateAttempt(run_id, run.version, ACTOR))
            elif kind == "cancel":
                request_cancel(service, RequestCancel(run_id, ACTOR))
            elif attempts:
                a = attempts[-1]
                transition_attempt(service, TransitionAttempt(run_id, a.id, attempt_to, run.version, a.status,
                                                              a.callback_sequence, ACTOR))
        except BridgeError:
            assert service.get_run(run_id) == run  # a refused command wrote nothing
            continue
        after = service.get_run(run_id)
        if after.status is not run.status:
            assert after.status in RUN_TRANSITIONS[run.status], (run.status, after.status)
        if run.is_terminal:
            assert after.status is run.status
        seen.append(after.status)
        for old, new in zip(attempts, service.get_attempts(run_id)):
            if old.is_terminal:
                assert new == old
    final = service.get_run(run_id)
    events = service.list_events(run_id, 0, 10_000).events
    assert [e.sequence for e in events] == list(range(1, final.event_sequence + 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cmds=COMMANDS)
def test_random_service_commands_keep_every_invariant_in_memory(cmds) -> None:  # type: ignore[no-untyped-def]
    from bridge.service.clock import SystemClock
    from bridge.service.run_service import RunService
    from bridge.storage.memory import InMemoryUnitOfWork
    from tests.contract.lifecycle import create

    service = RunService(InMemoryUnitOfWork(), clock=SystemClock())
    _apply_random(service, create(service).id, cmds)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cmds=COMMANDS)
def test_random_service_commands_keep_every_invariant_on_sql_stores(sql_service, cmds) -> None:  # type: ignore[no-untyped-def]
    from tests.contract.lifecycle import create

    _apply_random(sql_service, create(sql_service).id, cmds)
