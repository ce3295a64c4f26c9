"""The transition tables as data, and property tests: random command sequences never break the rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.domain.aggregate import RunChange
from bridge.domain.errors import InvalidAttemptTransitionError, InvalidRunTransitionError
from bridge.domain.events import Actor, ActorType
from bridge.domain.model import (
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
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
    assert RUN_TERMINAL == {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
    assert RunStatus.LOST not in RUN_TERMINAL  # lost needs reconciliation, it is not an end
    assert ATTEMPT_TERMINAL == {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED,
                                AttemptStatus.TIMED_OUT, AttemptStatus.LOST}


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


# Service-level: random commands through RunService on a real store.
COMMANDS = st.lists(st.tuples(st.sampled_from(["run", "attempt", "new_attempt", "cancel"]),
                              st.sampled_from(list(RunStatus)), st.sampled_from(list(AttemptStatus))),
                    min_size=1, max_size=18)


def _apply_random(service, run_id: str, cmds) -> None:  # type: ignore[no-untyped-def]
    from bridge.domain.commands import CreateAttempt, RequestCancel, TransitionAttempt, TransitionRun
    from bridge.domain.errors import BridgeError

    seen: list[RunStatus] = [service.get_run(run_id).status]
    for kind, run_to, attempt_to in cmds:
        run = service.get_run(run_id)
        attempts = service.get_attempts(run_id)
        try:
            if kind == "run":
                service.transition_run(TransitionRun(run_id, run_to, run.version, ACTOR))
            elif kind == "new_attempt":
                service.create_attempt(CreateAttempt(run_id, run.version, ACTOR))
            elif kind == "cancel":
                service.request_cancel(RequestCancel(run_id, ACTOR))
            elif attempts:
                a = attempts[-1]
                service.transition_attempt(TransitionAttempt(run_id, a.id, attempt_to, run.version, a.status,
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
