"""RunService contract, run on every store (sqlite, postgres, memory): docs/run-state.md#verification-scenarios,
#durable-cancellation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from bridge.domain.commands import (
    CancelOutcome,
    CreateAttempt,
    CreateRun,
    RequestCancel,
    RetryRun,
    TransitionAttempt,
    TransitionRun,
)
from bridge.domain.errors import (
    IdempotencyKeyConflictError,
    InvalidRunTransitionError,
    PayloadValidationError,
    RetryNotAllowedError,
    RunNotFoundError,
    RunVersionConflictError,
)
from bridge.domain.events import EventType
from bridge.domain.model import AttemptStatus, RunStatus
from bridge.service.run_service import RunService
from tests.contract.lifecycle import ACTOR, attempt_to, create, dispatching, move, running, sequences
from tests.support.run_commands import (
    create_attempt,
    create_run,
    request_cancel,
    retry_run,
    transition_attempt,
    transition_run,
)


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls on threads released together; return each result or the exception it raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each racer got
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


# Scenario 1: the same trigger delivered twice creates one Run.
def test_a_repeated_idempotency_key_returns_the_existing_run(service: RunService) -> None:
    first = create(service, key="trigger-7:1700000000000")
    cmd = CreateRun(project_id="default", task_id="legacy-cron:1", task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key="trigger-7:1700000000000", legacy_cron_id=1)
    again = create_run(service, cmd)
    assert again.created is False
    assert again.run.id == first.id
    assert sequences(service, first.id) == [1]


def test_racing_creates_with_one_idempotency_key_make_exactly_one_run(service: RunService) -> None:
    cmd = CreateRun(project_id="default", task_id="legacy-cron:1", task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key="race-key", legacy_cron_id=1)
    results = race(*[lambda: create_run(service, cmd)] * 4)
    assert all(not isinstance(r, Exception) for r in results), results
    assert len({r.run.id for r in results}) == 1
    assert sum(r.created for r in results) == 1


def test_an_idempotency_key_reused_for_a_different_request_is_refused(service: RunService) -> None:
    create(service, key="k1", task="legacy-cron:1")
    with pytest.raises(IdempotencyKeyConflictError) as err:
        create(service, key="k1", task="legacy-cron:2")
    assert err.value.code == "IDEMPOTENCY_KEY_CONFLICT"


# Scenario 2: two concurrent transitions of one version: one wins, one conflicts, no sequence gap.
def test_two_racing_transitions_of_one_version_let_exactly_one_win(service: RunService) -> None:
    for _ in range(5):
        run = move(service, create(service), RunStatus.QUEUED)
        results = race(
            lambda: transition_run(service, TransitionRun(run.id, RunStatus.DISPATCHING, run.version, ACTOR)),
            lambda: transition_run(service, TransitionRun(run.id, RunStatus.CANCELLED, run.version, ACTOR)),
        )
        winners = [r for r in results if not isinstance(r, Exception)]
        losers = [r for r in results if isinstance(r, Exception)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], RunVersionConflictError)
        assert losers[0].code == "RUN_VERSION_CONFLICT"
        current = service.get_run(run.id)
        assert current.version == run.version + 1
        assert current.status is winners[0].run.status
        assert sequences(service, run.id) == list(range(1, current.event_sequence + 1))


def test_a_stale_version_is_refused_with_expected_and_current(service: RunService) -> None:
    run = create(service)
    move(service, run, RunStatus.QUEUED)
    with pytest.raises(RunVersionConflictError) as err:
        transition_run(service, TransitionRun(run.id, RunStatus.CANCELLED, run.version, ACTOR))
    assert err.value.details["expected_version"] == run.version
    assert err.value.details["current_version"] == run.version + 1
    assert sequences(service, run.id) == [1, 2]


def test_an_illegal_transition_names_from_and_to_and_writes_nothing(service: RunService) -> None:
    run = create(service)
    with pytest.raises(InvalidRunTransitionError) as err:
        transition_run(service, TransitionRun(run.id, RunStatus.SUCCEEDED, run.version, ACTOR))
    assert err.value.details["from"] == "created" and err.value.details["to"] == "succeeded"
    assert service.get_run(run.id) == run


def test_an_unknown_run_is_reported_as_not_found(service: RunService) -> None:
    with pytest.raises(RunNotFoundError) as err:
        transition_run(service, TransitionRun("0190-missing", RunStatus.QUEUED, 0, ACTOR))
    assert err.value.code == "RUN_NOT_FOUND"


# Scenario 5: an Attempt success reported twice produces one terminal state.
def test_a_repeated_success_callback_appends_nothing(service: RunService) -> None:
    run, attempt = running(service)
    done, _ = attempt_to(service, run, attempt, AttemptStatus.SUCCEEDED, run_to=RunStatus.SUCCEEDED,
                         exit_code=0, dedupe_key="shell:end:4321")
    again = transition_attempt(service, TransitionAttempt(
        run.id, attempt.id, AttemptStatus.SUCCEEDED, run.version, attempt.status, attempt.callback_sequence,
        ACTOR, run_to=RunStatus.SUCCEEDED, exit_code=0, dedupe_key="shell:end:4321"))
    assert again.applied is False
    assert again.run == done
    types = [e.type for e in service.list_events(run.id).events]
    assert types.count(EventType.ATTEMPT_SUCCEEDED) == 1 and types.count(EventType.RUN_SUCCEEDED) == 1


def test_terminal_runs_and_attempts_never_change(service: RunService) -> None:
    run, attempt = running(service)
    run, attempt = attempt_to(service, run, attempt, AttemptStatus.FAILED, run_to=RunStatus.FAILED, exit_code=3,
                              error_code="process_exit_error")
    assert (run.status, attempt.status, attempt.exit_code) == (RunStatus.FAILED, AttemptStatus.FAILED, 3)
    for target in RunStatus:
        with pytest.raises(InvalidRunTransitionError):
            transition_run(service, TransitionRun(run.id, target, run.version, ACTOR))
    assert service.get_run(run.id) == run


# Scenario 6: durable cancellation (docs/run-state.md#durable-cancellation).
def test_the_first_cancel_request_bumps_the_version_and_appends_one_event(service: RunService) -> None:
    run, _ = running(service)
    first = request_cancel(service, RequestCancel(run.id, ACTOR))
    assert first.outcome is CancelOutcome.REQUESTED
    assert first.run.version == run.version + 1
    assert first.run.cancel_requested_at_ms is not None
    assert first.run.status is RunStatus.RUNNING  # still what was observed; the stop comes after commit
    repeat = request_cancel(service, RequestCancel(run.id, ACTOR))
    assert repeat.outcome is CancelOutcome.ALREADY_REQUESTED
    assert repeat.run.version == first.run.version
    types = [e.type for e in service.list_events(run.id).events]
    assert types.count(EventType.RUN_CANCEL_REQUESTED) == 1


def test_a_cancel_of_a_terminal_run_is_already_terminal_and_appends_nothing(service: RunService) -> None:
    run, attempt = running(service)
    run, _ = attempt_to(service, run, attempt, AttemptStatus.SUCCEEDED, run_to=RunStatus.SUCCEEDED, exit_code=0)
    result = request_cancel(service, RequestCancel(run.id, ACTOR))
    assert result.outcome is CancelOutcome.ALREADY_TERMINAL
    assert result.run == run


def test_a_success_after_a_cancel_request_converges_to_cancelled(service: RunService) -> None:
    run, attempt = running(service)
    run = request_cancel(service, RequestCancel(run.id, ACTOR)).run
    run, attempt = attempt_to(service, run, attempt, AttemptStatus.SUCCEEDED, run_to=RunStatus.SUCCEEDED, exit_code=0)
    assert run.status is RunStatus.CANCELLED and attempt.status is AttemptStatus.CANCELLED
    assert attempt.exit_code == 0  # the fact is kept; the outcome follows the committed cancel


def test_a_cancel_racing_an_exit_follows_whichever_committed_first(service: RunService) -> None:
    for _ in range(4):
        run, attempt = running(service)
        finish = TransitionAttempt(run.id, attempt.id, AttemptStatus.SUCCEEDED, run.version, attempt.status,
                                   attempt.callback_sequence, ACTOR, run_to=RunStatus.SUCCEEDED, exit_code=0)
        results = race(lambda: transition_attempt(service, finish),
                       lambda: request_cancel(service, RequestCancel(run.id, ACTOR)))
        final = service.get_run(run.id)
        cancel = results[1]
        if isinstance(results[0], Exception):  # cancel committed first: the exit lost its version
            assert isinstance(results[0], RunVersionConflictError)
            assert cancel.outcome is CancelOutcome.REQUESTED and final.status is RunStatus.RUNNING
        elif isinstance(cancel, Exception) or cancel.outcome is CancelOutcome.ALREADY_TERMINAL:
            assert final.status is RunStatus.SUCCEEDED
        else:  # both committed: cancel first, then... impossible, the exit carried the pre-cancel version
            pytest.fail(f"both commands applied: {results}")
        assert sequences(service, run.id) == list(range(1, final.event_sequence + 1))


# Scenario 7: automatic retry keeps the Run and adds an Attempt.
def test_an_automatic_retry_adds_attempt_two_under_the_same_run(service: RunService) -> None:
    run, attempt = running(service)
    run, failed = attempt_to(service, run, attempt, AttemptStatus.FAILED, run_to=RunStatus.RETRY_WAIT, exit_code=1)
    assert run.status is RunStatus.RETRY_WAIT and failed.status is AttemptStatus.FAILED
    run = move(service, run, RunStatus.QUEUED)
    run = move(service, run, RunStatus.DISPATCHING)
    second = create_attempt(service, CreateAttempt(run.id, run.version, ACTOR))
    assert second.attempt is not None and second.attempt.attempt == 2
    assert [a.attempt for a in service.get_attempts(run.id)] == [1, 2]
    assert service.get_attempts(run.id)[0].status is AttemptStatus.FAILED


def test_a_new_attempt_waits_for_the_previous_one_to_end(service: RunService) -> None:
    run = dispatching(service)
    first = create_attempt(service, CreateAttempt(run.id, run.version, ACTOR))
    with pytest.raises(Exception) as err:
        create_attempt(service, CreateAttempt(run.id, first.run.version, ACTOR))
    assert getattr(err.value, "code", None) == "ATTEMPT_CONFLICT"


# Scenario 8: manual retry makes a new Run that points at the original.
def test_a_manual_retry_creates_a_new_run_pointing_at_the_original(service: RunService) -> None:
    run, attempt = running(service)
    run, _ = attempt_to(service, run, attempt, AttemptStatus.FAILED, run_to=RunStatus.FAILED, exit_code=2)
    retry = retry_run(service, RetryRun(run.id, ACTOR))
    assert retry.created and retry.run.id != run.id
    assert retry.run.retry_of_run_id == run.id and retry.run.status is RunStatus.CREATED
    assert service.get_run(run.id) == run


def test_a_manual_retry_of_a_running_run_is_refused(service: RunService) -> None:
    run, _ = running(service)
    with pytest.raises(RetryNotAllowedError):
        retry_run(service, RetryRun(run.id, ACTOR))


# Scenario 12: payloads are allowlisted and capped before anything is written.
@pytest.mark.parametrize("payload, field", [
    ({"command": "task secret.sh"}, "command"),
    ({"token": "a-token"}, "token"),
    ({"reason": "x" * 3000}, "reason"),
])
def test_a_payload_with_a_forbidden_or_oversized_field_is_refused(service: RunService, payload: dict[str, str],
                                                                   field: str) -> None:
    run = create(service)
    with pytest.raises(PayloadValidationError) as err:
        transition_run(service, TransitionRun(run.id, RunStatus.QUEUED, run.version, ACTOR, payload=payload))
    assert err.value.details["field"] == field
    assert service.get_run(run.id) == run and sequences(service, run.id) == [1]


def test_events_page_by_sequence(service: RunService) -> None:
    run, attempt = running(service)
    attempt_to(service, run, attempt, AttemptStatus.SUCCEEDED, run_to=RunStatus.SUCCEEDED, exit_code=0)
    seen, after = [], 0
    while True:
        page = service.list_events(run.id, after_sequence=after, limit=3)
        seen.extend(e.sequence for e in page.events)
        if page.next_after_sequence is None:
            break
        after = page.next_after_sequence
    assert seen == list(range(1, service.get_run(run.id).event_sequence + 1))
    assert len(seen) > 3
