"""The StepRun table as data, the v1 record's contract (what it may never hold), and the pure mutation decision."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.domain.events import Actor, ActorType, EventType
from bridge.domain.model import RUN_TERMINAL, RunStatus
from bridge.domain.step_run import (
    RECORD_KEYS,
    SCHEMA_ID,
    STEP_ATTEMPT_LIMIT,
    STEP_RUN_LIMIT,
    STEP_RUN_MOVES,
    STEP_RUN_TERMINAL,
    STEP_RUN_TRANSITIONS,
    StepRun,
    StepRunKind,
    StepRunStatus,
)
from bridge.domain.step_run_errors import (
    InvalidStepRunTransitionError,
    RunFenceConflictError,
    RunTerminalError,
    StepAttemptLimitError,
    StepMutationConflictError,
    StepRunIntegrityError,
    StepRunLimitError,
    StepRunNotFoundError,
    StepRunValidationError,
    StepRunVersionConflictError,
)
from bridge.domain.step_run_mutation import (
    CreateStepRun,
    RunFence,
    TransitionStepRun,
    check_fence,
    decide,
    request_digest,
    step_event_payload,
    validate,
)

S = StepRunStatus
ACTOR = Actor(ActorType.SYSTEM, "unit")
RUN_ID = "0190a000-0000-7000-8000-000000000001"
_seq = itertools.count(1)


def new_id() -> str:
    return f"0190a000-0000-7000-8000-{next(_seq):012d}"


def fence(version: int = 0, sequence: int = 1, status: RunStatus = RunStatus.RUNNING) -> RunFence:
    return RunFence(RUN_ID, status, version, sequence)


def created(kind: StepRunKind = StepRunKind.TOOL) -> StepRun:
    cmd = CreateStepRun("m-create", RUN_ID, "fetch/one", kind, 0, 1, ACTOR)
    return decide(cmd, fence(), None, 0, at_ms=1_000, new_id=new_id).step_run


def move(step: StepRun, to: StepRunStatus, *, at_ms: int = 2_000, **kw: object) -> StepRun:
    cmd = TransitionStepRun(f"m-{next(_seq)}", RUN_ID, step.id, to, 0, 1, step.version, step.digest, step.status,
                            ACTOR, **kw)  # type: ignore[arg-type]
    return decide(cmd, fence(), step, 1, at_ms=at_ms, new_id=new_id).step_run


# --- The table ---------------------------------------------------------------------------------------------


def test_the_table_covers_every_status_and_follows_adr_0156() -> None:
    assert set(STEP_RUN_TRANSITIONS) == set(StepRunStatus)
    assert STEP_RUN_TRANSITIONS == {
        S.PENDING: {S.READY, S.SKIPPED, S.CANCELLED},
        S.READY: {S.RUNNING, S.WAITING_APPROVAL, S.SKIPPED, S.CANCELLED},
        S.WAITING_APPROVAL: {S.READY, S.FAILED, S.CANCELLED, S.TIMED_OUT},
        S.RUNNING: {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.LOST},
        S.LOST: {S.READY, S.FAILED, S.CANCELLED},
        S.SUCCEEDED: set(), S.FAILED: set(), S.CANCELLED: set(), S.TIMED_OUT: set(), S.SKIPPED: set(),
    }
    assert STEP_RUN_TERMINAL == {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED}
    assert S.LOST not in STEP_RUN_TERMINAL  # lost needs reconciling, it is not an end


def test_every_move_of_the_table_states_its_reason() -> None:
    for from_status, targets in STEP_RUN_MOVES.items():
        for to_status, reason in targets.items():
            assert isinstance(reason, str) and len(reason) > 15, (from_status, to_status)


def test_the_shape_of_adr_0156_holds_pending_then_ready_then_approval_or_running_then_lost_or_an_end() -> None:
    entered_from = {to: {f for f, ts in STEP_RUN_TRANSITIONS.items() if to in ts} for to in StepRunStatus}
    assert entered_from[S.PENDING] == set()  # only a create makes a pending StepRun
    assert entered_from[S.RUNNING] == {S.READY}  # every run is a dispatch from ready, counted as an Attempt
    assert entered_from[S.WAITING_APPROVAL] == {S.READY}
    assert S.READY in STEP_RUN_TRANSITIONS[S.WAITING_APPROVAL]  # approval leads back to ready
    assert entered_from[S.LOST] == {S.RUNNING}
    assert S.RUNNING not in STEP_RUN_TRANSITIONS[S.LOST]  # a lost step never silently resumes


@pytest.mark.parametrize("status", sorted(STEP_RUN_TERMINAL))
def test_a_terminal_step_run_refuses_every_target(status: StepRunStatus) -> None:
    path = {S.SUCCEEDED: [S.READY, S.RUNNING, S.SUCCEEDED], S.FAILED: [S.READY, S.RUNNING, S.FAILED],
            S.CANCELLED: [S.CANCELLED], S.TIMED_OUT: [S.READY, S.RUNNING, S.TIMED_OUT], S.SKIPPED: [S.SKIPPED]}
    step = created()
    for to in path[status]:
        step = move(step, to)
    for target in StepRunStatus:
        with pytest.raises(InvalidStepRunTransitionError):
            move(step, target)


@given(st.lists(st.sampled_from(list(StepRunStatus)), max_size=40))
def test_random_moves_follow_the_table_and_keep_the_record_consistent(targets: list[StepRunStatus]) -> None:
    step = created()
    for target in targets:
        before = step
        try:
            step = move(step, target)
        except InvalidStepRunTransitionError:
            assert target not in STEP_RUN_TRANSITIONS[before.status]
            continue
        assert target in STEP_RUN_TRANSITIONS[before.status]
        assert step.version == before.version + 1
        assert step.attempt_count == before.attempt_count + (target is S.RUNNING)
        assert (step.finished_at_ms is not None) == step.is_terminal
        assert StepRun.from_json(step.to_json()) == step


def test_the_sixty_fifth_dispatch_is_refused() -> None:
    step = move(created(), S.READY)
    for _ in range(STEP_ATTEMPT_LIMIT):
        step = move(move(step, S.RUNNING), S.LOST, error_code="worker_lost")
        step = move(step, S.READY)
    assert step.attempt_count == STEP_ATTEMPT_LIMIT == 64
    with pytest.raises(StepAttemptLimitError) as refused:
        move(step, S.RUNNING)
    assert refused.value.code == "STEP_ATTEMPT_LIMIT_REACHED"
    assert move(step, S.CANCELLED).status is S.CANCELLED


def test_the_hundred_and_twenty_ninth_step_run_of_a_run_is_refused() -> None:
    cmd = CreateStepRun("m-129", RUN_ID, "one more", StepRunKind.TASK, 0, 1, ACTOR)
    assert decide(cmd, fence(), None, STEP_RUN_LIMIT - 1, at_ms=1, new_id=new_id).step_run.status is S.PENDING
    with pytest.raises(StepRunLimitError) as refused:
        decide(cmd, fence(), None, STEP_RUN_LIMIT, at_ms=1, new_id=new_id)
    assert STEP_RUN_LIMIT == 128 and refused.value.details["limit"] == 128


# --- The record ---------------------------------------------------------------------------------------------


def test_the_digest_is_the_sha256_of_the_canonical_json_without_the_digest() -> None:
    step = move(created(), S.READY, input_ref=f"artifact:{uuid.uuid4()}")
    stored = json.loads(step.to_json())
    assert set(stored) == RECORD_KEYS and stored["schema"] == SCHEMA_ID
    body = {k: v for k, v in stored.items() if k != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert stored["digest"] == step.digest == hashlib.sha256(canonical).hexdigest()
    assert step.to_json() == json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert " " not in step.to_json().replace("fetch/one", "")


def test_the_identity_is_a_uuid7_and_the_step_key_may_change_without_changing_it() -> None:
    step = created()
    assert uuid.UUID(step.id).version == 7
    renamed = step.evolve(step_key="fetch/renamed")
    assert renamed.id == step.id and renamed.digest != step.digest


@pytest.mark.parametrize("field, value", [
    ("input_ref", "echo $SECRET | curl"),  # input text, not a reference
    ("input_ref", "s3://bucket/key"),  # another scheme
    ("output_ref", "artifact:not-a-uuid"),
    ("step_key", "python3 main.py --token=abc"),  # a command line
    ("step_key", "Traceback (most recent call last)"),
    ("step_key", "ValueError: invalid literal"),
    ("step_key", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"),  # a credential
    ("step_key", "line one\nline two"),
    ("step_key", ""),
    ("step_key", "x" * 129),
    ("error_code", "Connection refused by 10.0.0.1"),  # exception text, not a code
    ("id", "0190a000-0000-4000-8000-000000000001"),  # a UUIDv4
])
def test_a_record_refuses_content_secrets_and_exception_text(field: str, value: str) -> None:
    base = created().evolve(status=S.FAILED, finished_at_ms=1_000)
    with pytest.raises(StepRunValidationError) as refused:
        base.evolve(**{field: value})
    assert refused.value.details["field"] == field
    assert not value or value not in refused.value.message  # the refusal never echoes what it refused


def test_display_names_in_any_script_are_accepted() -> None:
    assert created().evolve(step_key="拉取 京东/签到 (step-2)").step_key == "拉取 京东/签到 (step-2)"


@pytest.mark.parametrize("tamper", [
    lambda r: {**r, "handler": "def run(): ..."},  # a field v1 does not have
    lambda r: {**r, "status": "succeeded"},  # content changed, digest kept
    lambda r: {**r, "schema": "qinglong/step-run@v2"},
    lambda r: {k: v for k, v in r.items() if k != "input_ref"},
])
def test_a_stored_record_that_is_not_an_intact_v1_record_is_an_integrity_error(tamper) -> None:  # type: ignore[no-untyped-def]
    record = json.loads(created().to_json())
    text = json.dumps(tamper(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(StepRunIntegrityError):
        StepRun.from_json(text)


def test_a_record_in_another_form_than_the_canonical_one_is_refused() -> None:
    text = created().to_json()
    with pytest.raises(StepRunIntegrityError):
        StepRun.from_json(json.dumps(json.loads(text), indent=1))


# --- The decision ---------------------------------------------------------------------------------------------


def test_a_stale_fence_names_the_expected_and_the_current_version_and_sequence() -> None:
    cmd = CreateStepRun("m-stale", RUN_ID, "a", StepRunKind.TASK, 3, 7, ACTOR)
    with pytest.raises(RunFenceConflictError) as refused:
        check_fence(cmd, fence(4, 9))
    assert refused.value.code == "RUN_VERSION_CONFLICT"
    assert refused.value.details == {"run_id": RUN_ID, "expected_version": 3, "current_version": 4,
                                     "expected_event_sequence": 7, "current_event_sequence": 9}


@pytest.mark.parametrize("status", sorted(RUN_TERMINAL))
def test_a_terminal_run_takes_no_mutation(status: RunStatus) -> None:
    with pytest.raises(RunTerminalError):
        check_fence(CreateStepRun("m", RUN_ID, "a", StepRunKind.TASK, 0, 1, ACTOR), fence(status=status))


def test_a_transition_compares_and_sets_on_version_digest_and_status() -> None:
    step = created()
    later = move(step, S.READY)
    stale = TransitionStepRun("m-x", RUN_ID, step.id, S.CANCELLED, 0, 1, step.version, step.digest, step.status,
                              ACTOR)
    with pytest.raises(StepRunVersionConflictError) as refused:
        decide(stale, fence(), later, 1, at_ms=3_000, new_id=new_id)
    assert refused.value.details["expected"] == {"version": 0, "digest": step.digest, "status": "pending"}
    assert refused.value.details["current"] == {"version": 1, "digest": later.digest, "status": "ready"}
    with pytest.raises(StepRunNotFoundError):
        decide(stale, fence(), None, 1, at_ms=3_000, new_id=new_id)


def test_a_decision_advances_the_run_once_with_one_canonical_event_and_its_ledger_row() -> None:
    step = created()
    cmd = TransitionStepRun("m-ready", RUN_ID, step.id, S.READY, 5, 9, 0, step.digest, S.PENDING, ACTOR)
    decision = decide(cmd, fence(5, 9), step, 1, at_ms=4_000, new_id=new_id)
    assert (decision.run_version, decision.event_sequence) == (6, 10)
    event = decision.event
    assert (event.type, event.sequence, event.step_run_id) == (EventType.STEP_RUN_TRANSITIONED, 10, step.id)
    assert event.dedupe_key == "step-mutation:m-ready"
    assert event.payload == {"mutation_id": "m-ready", "from": "pending", "to": "ready", "version": 1,
                             "attempt_count": 0, "digest": decision.step_run.digest}
    ledger = decision.ledger
    assert (ledger.run_version, ledger.event_sequence, ledger.event_id) == (6, 10, event.id)
    assert ledger.request_digest == request_digest(cmd) and ledger.step_run == decision.step_run


def test_the_request_digest_binds_every_field_but_the_actor() -> None:
    cmd = CreateStepRun("m-1", RUN_ID, "a", StepRunKind.TASK, 0, 1, ACTOR)
    same = CreateStepRun("m-1", RUN_ID, "a", StepRunKind.TASK, 0, 1, Actor(ActorType.WORKER, "w-2"))
    assert request_digest(cmd) == request_digest(same)
    for other in (CreateStepRun("m-2", RUN_ID, "a", StepRunKind.TASK, 0, 1, ACTOR),
                  CreateStepRun("m-1", RUN_ID, "b", StepRunKind.TASK, 0, 1, ACTOR),
                  CreateStepRun("m-1", RUN_ID, "a", StepRunKind.TOOL, 0, 1, ACTOR),
                  CreateStepRun("m-1", RUN_ID, "a", StepRunKind.TASK, 1, 1, ACTOR)):
        assert request_digest(other) != request_digest(cmd)


def test_a_ledger_row_replays_its_own_request_and_refuses_another() -> None:
    cmd = CreateStepRun("m-1", RUN_ID, "a", StepRunKind.TASK, 0, 1, ACTOR)
    ledger = decide(cmd, fence(), None, 0, at_ms=1, new_id=new_id).ledger
    replayed = ledger.replay(cmd)
    assert replayed.applied is False and replayed.step_run == ledger.step_run
    assert (replayed.run_version, replayed.event_sequence) == (1, 2)
    with pytest.raises(StepMutationConflictError):
        ledger.replay(CreateStepRun("m-1", RUN_ID, "b", StepRunKind.TASK, 0, 1, ACTOR))


def test_refs_are_write_once_and_error_codes_go_only_with_an_unsuccessful_status() -> None:
    ref = f"artifact:{uuid.uuid4()}"
    step = move(created(), S.READY, input_ref=ref)
    assert step.input_ref == ref and move(step, S.RUNNING, input_ref=ref).input_ref == ref
    with pytest.raises(StepRunValidationError, match="write-once"):
        move(step, S.RUNNING, input_ref=f"artifact:{uuid.uuid4()}")
    with pytest.raises(StepRunValidationError):
        validate(TransitionStepRun("m", RUN_ID, step.id, S.RUNNING, 0, 1, 1, step.digest, S.READY, ACTOR,
                                   error_code="internal_error"))
    lost = move(move(step, S.RUNNING), S.LOST, error_code="worker_lost")
    assert lost.error_code == "worker_lost" and move(lost, S.READY).error_code is None


def test_an_event_payload_outside_its_allowlist_is_refused() -> None:
    with pytest.raises(StepRunValidationError):
        step_event_payload({"to": "ready", "input": "the text"})
    with pytest.raises(StepRunValidationError):
        step_event_payload({"to": "x" * 3000})


@pytest.mark.parametrize("mutation_id", ["", "has space", "x" * 129, "new\nline", "-leading"])
def test_a_malformed_mutation_id_is_refused_before_any_transaction(mutation_id: str) -> None:
    with pytest.raises(StepRunValidationError):
        validate(CreateStepRun(mutation_id, RUN_ID, "a", StepRunKind.TASK, 0, 1, ACTOR))
