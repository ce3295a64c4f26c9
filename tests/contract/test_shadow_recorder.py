"""ShadowRecorder on every store: one Run per execution, correlation without guessing, late and duplicate callbacks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import Engine, event, text

from bridge.domain.commands import RequestCancel
from bridge.domain.events import EventType
from bridge.domain.model import AttemptStatus, RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome
from bridge.service.clock import SystemClock
from bridge.service.ports import TaskSnapshot
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.runs import _ACTIVE_CANDIDATES
from tests.conftest import Backend
from tests.contract.lifecycle import ACTOR
from tests.support.run_commands import request_cancel

CTX = ExecutionContext(origin="scheduled_node", evidence="schedule_match:main:5_field:node", task_revision="rev")
BEGIN_MS = 1_796_216_497_000


def facts(pid: int | None = 10325, exit_code: int | None = None, *, cron: int = 1, log: str | None = "log-a",
          duration_ms: int | None = None, begin_ms: int = BEGIN_MS) -> CallbackFacts:
    return CallbackFacts(cron_id=cron, pid=pid, log_ref=log, started_at_ms=begin_ms, duration_ms=duration_ms,
                         exit_code=exit_code, received_at_ms=begin_ms + 2500)


def end(pid: int | None = 10325, exit_code: int | None = 0, **kw: object) -> CallbackFacts:
    return facts(pid, exit_code, duration_ms=2000, **kw)  # type: ignore[arg-type]


@pytest.fixture
def recorder(service: RunService) -> ShadowRecorder:
    return ShadowRecorder(service)


def types(service: RunService, run_id: str) -> list[str]:
    return [e.type.value for e in service.list_events(run_id, 0, 1000).events]


def test_a_start_opens_a_running_run_through_every_legal_step(recorder: ShadowRecorder, service: RunService) -> None:
    result = recorder.record_start(facts(), CTX)
    assert result.outcome is Outcome.STARTED and result.run_id
    run = service.get_run(result.run_id)
    (attempt,) = service.get_attempts(run.id)
    assert (run.status, attempt.status) == (RunStatus.RUNNING, AttemptStatus.RUNNING)
    assert (run.task_id, run.origin, run.mode, run.owner) == ("legacy-cron:1", "scheduled_node", "shadow", "legacy")
    assert run.started_at_ms == BEGIN_MS and attempt.started_at_ms == BEGIN_MS and attempt.pid == 10325
    assert types(service, run.id) == ["run.created", "run.queued", "run.dispatching", "attempt.claimed",
                                      "attempt.starting", "attempt.running", "run.running"]
    assert {e.actor_type.value for e in service.list_events(run.id).events} == {"legacy_shell"}


@pytest.mark.parametrize("exit_code, run_status, error_code", [
    (0, RunStatus.SUCCEEDED, None), (3, RunStatus.FAILED, "process_exit_error"),
    (None, RunStatus.ENDED, None),  # no exit code (every end before v2.21): it ended, how is not known
])
def test_an_end_closes_the_run_by_exit_code(recorder: ShadowRecorder, service: RunService, exit_code: int | None,
                                            run_status: RunStatus, error_code: str | None) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    result = recorder.record_end(end(exit_code=exit_code), lambda: CTX)
    assert result.outcome is Outcome.CLOSED and result.run_id == run_id
    run = service.get_run(run_id)
    (attempt,) = service.get_attempts(run_id)
    assert run.status is run_status and run.error_code == error_code
    assert attempt.status.value == run_status.value and attempt.error_code == error_code
    assert attempt.exit_code == exit_code and run.duration_ms == 2000
    assert len(types(service, run_id)) <= 10  # write budget of a normal execution


def test_an_end_without_exit_code_records_ended_with_its_times_and_a_later_end_is_ignored_late(
        recorder: ShadowRecorder, service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    assert recorder.record_end(end(exit_code=None), lambda: CTX).outcome is Outcome.CLOSED
    events = service.list_events(run_id).events
    closing = {e.type.value: e.payload for e in events[-2:]}
    assert set(closing) == {"attempt.ended", "run.ended"}
    assert all("exit_code" not in p and "error_code" not in p and p["duration_ms"] == 2000 and "received_at_ms" in p
               for p in closing.values())
    assert service.get_run(run_id).finished_at_ms is not None

    assert recorder.record_end(end(exit_code=3), lambda: CTX).outcome is Outcome.LATE_IGNORED
    run = service.get_run(run_id)
    (attempt,) = service.get_attempts(run_id)
    assert (run.status, attempt.status, attempt.exit_code) == (RunStatus.ENDED, AttemptStatus.ENDED, None)
    assert types(service, run_id)[-1] == "attempt.late_callback_ignored"


def test_duplicate_start_and_end_callbacks_append_nothing(recorder: ShadowRecorder, service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    assert recorder.record_start(facts(), CTX).outcome is Outcome.DUPLICATE
    recorder.record_end(end(), lambda: CTX)
    before = types(service, run_id)
    assert recorder.record_end(end(), lambda: CTX).outcome is Outcome.DUPLICATE
    assert types(service, run_id) == before


def test_a_different_callback_for_a_terminal_attempt_is_ignored_once(recorder: ShadowRecorder,
                                                                     service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    recorder.record_end(end(exit_code=0), lambda: CTX)
    assert recorder.record_end(end(exit_code=1), lambda: CTX).outcome is Outcome.LATE_IGNORED
    assert recorder.record_end(end(exit_code=1), lambda: CTX).outcome is Outcome.DUPLICATE
    assert types(service, run_id).count(EventType.ATTEMPT_LATE_CALLBACK_IGNORED.value) == 1
    assert service.get_run(run_id).status is RunStatus.SUCCEEDED


def test_a_finish_only_callback_backfills_a_synthesized_run(recorder: ShadowRecorder, service: RunService) -> None:
    result = recorder.record_end(end(exit_code=0), lambda: CTX)
    assert result.outcome is Outcome.BACKFILLED
    run = service.get_run(result.run_id)
    (attempt,) = service.get_attempts(run.id)
    assert run.synthesized and attempt.synthesized and run.status is RunStatus.SUCCEEDED
    synthesized = [e for e in service.list_events(run.id).events if e.payload.get("synthesized")]
    assert {e.type.value for e in synthesized} >= {"run.queued", "attempt.starting", "run.running"}
    late = recorder.record_start(facts(), CTX)  # the start arrives after its end
    assert late.outcome is Outcome.LATE_IGNORED and late.run_id == run.id
    assert recorder.record_start(facts(), CTX).outcome is Outcome.DUPLICATE
    assert types(service, run.id).count("attempt.late_callback_ignored") == 1


def test_an_end_for_an_unknown_cron_records_nothing(recorder: ShadowRecorder, service: RunService) -> None:
    assert recorder.record_end(end(cron=999), lambda: None).outcome is Outcome.UNMATCHED


def test_concurrent_executions_of_one_cron_never_cross(recorder: ShadowRecorder, service: RunService) -> None:
    a = recorder.record_start(facts(pid=100, log="log-a"), CTX).run_id
    b = recorder.record_start(facts(pid=200, log="log-b", begin_ms=BEGIN_MS + 1000), CTX).run_id
    assert recorder.record_end(end(pid=200, log="log-b", exit_code=5, begin_ms=BEGIN_MS + 1000),
                               lambda: CTX).run_id == b
    assert service.get_run(a).status is RunStatus.RUNNING
    assert recorder.record_end(end(pid=100, log="log-a", exit_code=0), lambda: CTX).run_id == a
    assert (service.get_run(a).status, service.get_run(b).status) == (RunStatus.SUCCEEDED, RunStatus.FAILED)


def test_several_uncontradicted_candidates_are_ambiguous_and_nothing_changes(recorder: ShadowRecorder,
                                                                            service: RunService) -> None:
    a = recorder.record_start(facts(pid=None, log="x"), CTX).run_id
    b = recorder.record_start(facts(pid=None, log="y", begin_ms=BEGIN_MS + 5000), CTX).run_id
    result = recorder.record_end(end(pid=777, log="z", begin_ms=BEGIN_MS + 9000), lambda: CTX)
    assert result.outcome is Outcome.AMBIGUOUS
    assert service.get_run(a).status is RunStatus.RUNNING and service.get_run(b).status is RunStatus.RUNNING


def test_an_end_after_a_cancel_request_converges_to_cancelled(recorder: ShadowRecorder, service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    request_cancel(service, RequestCancel(run_id, ACTOR))
    recorder.record_end(end(exit_code=0), lambda: CTX)
    assert service.get_run(run_id).status is RunStatus.CANCELLED


def test_a_2x_stop_cancels_the_active_runs_and_the_killed_shells_end_is_late(recorder: ShadowRecorder,
                                                                            service: RunService) -> None:
    a = recorder.record_start(facts(pid=100, log="a"), CTX).run_id
    b = recorder.record_start(facts(pid=200, log="b", begin_ms=BEGIN_MS + 1000), CTX).run_id
    results = recorder.record_stop(1, BEGIN_MS + 5000)
    assert {r.run_id for r in results} == {a, b} and {r.outcome for r in results} == {Outcome.CANCELLED}
    run = service.get_run(a)
    assert run.status is RunStatus.CANCELLED and run.cancel_requested_at_ms is not None
    assert service.get_attempts(a)[0].status is AttemptStatus.CANCELLED
    assert types(service, a)[-3:] == ["run.cancel_requested", "attempt.cancelled", "run.cancelled"]
    # The trap in the killed shell still sends its end callback (exit code >= 1): it changes nothing.
    assert recorder.record_end(end(pid=100, log="a", exit_code=143), lambda: CTX).outcome is Outcome.LATE_IGNORED
    assert service.get_run(a).status is RunStatus.CANCELLED
    assert recorder.record_stop(1, BEGIN_MS + 6000) == []


def test_an_end_read_ahead_closes_the_run_it_read(recorder: ShadowRecorder, service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    read_ahead = recorder.read_ahead_end(1)
    assert [c.run.id for c in read_ahead] == [run_id]
    assert recorder.record_end(end(), lambda: CTX, read_ahead).outcome is Outcome.CLOSED
    assert service.get_run(run_id).status is RunStatus.SUCCEEDED
    assert types(service, run_id)[-2:] == ["attempt.succeeded", "run.succeeded"]


def test_an_end_whose_run_changed_after_the_read_ahead_is_placed_on_what_the_store_holds_now(
        recorder: ShadowRecorder, service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    read_ahead = recorder.read_ahead_end(1)
    request_cancel(service, RequestCancel(run_id, ACTOR))  # lands while 2.x is still answering the end
    assert recorder.record_end(end(), lambda: CTX, read_ahead).outcome is Outcome.CLOSED
    run = service.get_run(run_id)
    assert run.status is RunStatus.CANCELLED and run.cancel_requested_at_ms is not None
    assert types(service, run_id).count("run.cancelled") == 1


def test_an_end_read_ahead_of_a_run_closed_since_is_late_and_appends_nothing_twice(recorder: ShadowRecorder,
                                                                                 service: RunService) -> None:
    run_id = recorder.record_start(facts(), CTX).run_id
    stale = recorder.read_ahead_end(1)
    assert recorder.record_end(end(), lambda: CTX).outcome is Outcome.CLOSED
    before = types(service, run_id)
    assert recorder.record_end(end(), lambda: CTX, stale).outcome is Outcome.DUPLICATE
    assert recorder.record_end(end(exit_code=9), lambda: CTX, stale).outcome is Outcome.LATE_IGNORED
    assert types(service, run_id) == [*before, "attempt.late_callback_ignored"]


def test_an_end_read_ahead_without_a_match_takes_the_reading_path(recorder: ShadowRecorder,
                                                                service: RunService) -> None:
    read_ahead = recorder.read_ahead_end(1)  # nothing open yet
    run_id = recorder.record_start(facts(), CTX).run_id
    assert read_ahead == []
    assert recorder.record_end(end(), lambda: CTX, read_ahead).outcome is Outcome.CLOSED
    assert service.get_run(run_id).status is RunStatus.SUCCEEDED


def _snapshot(revision: str, command: str) -> TaskSnapshot:
    return TaskSnapshot(task_revision=revision, task_id="legacy-cron:1", legacy_cron_id=1, name="demo",
                        command=command, schedule="*/5 * * * *", work_dir=None, log_name=None, created_at_ms=BEGIN_MS)


def _stored_snapshots(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT task_revision, command FROM task_snapshots")).all())


def test_each_task_revision_is_snapshotted_once_per_store(sql_backend: Backend) -> None:
    """The first start of a revision stores its snapshot; later starts, from this recorder (which then skips
    the insert) or another process's, keep that one; an edited cron is a new revision with its own snapshot."""
    service = RunService(sql_backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    first = replace(CTX, task_revision="rev-1", snapshot=_snapshot("rev-1", "task a.js"))
    edited = replace(CTX, task_revision="rev-2", snapshot=_snapshot("rev-2", "task b.js"))
    recorder, other_process = ShadowRecorder(service), ShadowRecorder(service)

    assert recorder.record_start(facts(pid=1), first).outcome is Outcome.STARTED
    assert recorder.record_start(facts(pid=2), replace(first, snapshot=_snapshot("rev-1", "changed?"))).outcome \
        is Outcome.STARTED
    assert other_process.record_start(facts(pid=3), replace(first, snapshot=_snapshot("rev-1", "again"))).outcome \
        is Outcome.STARTED
    assert _stored_snapshots(sql_backend.engine) == {"rev-1": "task a.js"}

    assert recorder.record_start(facts(pid=4), edited).outcome is Outcome.STARTED
    assert _stored_snapshots(sql_backend.engine) == {"rev-1": "task a.js", "rev-2": "task b.js"}


def test_a_duplicate_start_does_not_count_its_revision_as_stored(sql_backend: Backend) -> None:
    service = RunService(sql_backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    recorder = ShadowRecorder(service)
    recorder.record_start(facts(pid=1), CTX)  # no snapshot in this context
    duplicate = replace(CTX, snapshot=_snapshot(CTX.task_revision, "task a.js"))
    assert recorder.record_start(facts(pid=1), duplicate).outcome is Outcome.DUPLICATE
    assert recorder.record_start(facts(pid=2), duplicate).outcome is Outcome.STARTED
    assert _stored_snapshots(sql_backend.engine) == {CTX.task_revision: "task a.js"}


def test_correlation_reads_a_crons_open_runs_from_the_partial_index(sql_backend: Backend) -> None:
    """A cron's history grows forever; the candidates query must stay on the index of open Runs, on a store
    whose planner has statistics and on a SQLite store that never had any (which is every one the bridge
    runs: it never runs ANALYZE there, and without statistics SQLite took ix_runs_cron_created_id, which
    also gives the order, and walked the cron's whole history on every callback)."""
    service = RunService(sql_backend.uow, clock=SystemClock())  # type: ignore[arg-type]
    recorder = ShadowRecorder(service)
    for pid in range(2000, 2120):  # a long history of closed runs, and one open run
        recorder.record_start(facts(pid), CTX)
        recorder.record_end(end(pid), lambda: CTX)
    recorder.record_start(facts(4242), CTX)
    assert sql_backend.engine is not None
    sql, args = _ACTIVE_CANDIDATES.bind(sql_backend.engine.dialect, {"b_cron": 1, "b_limit": 64})  # as it runs
    for plan in sql_backend.plans_in_use(sql, args):
        assert "ix_runs_active_by_cron" in plan, plan
    assert recorder.owner_of_end(end(4242)) == "legacy"  # and the one open run is what it finds


def test_a_back_fill_reads_2x_with_no_transaction_of_the_store_open(sql_backend: Backend,
                                                                     sql_service: RunService) -> None:
    """docs/run-state.md#transaction-boundaries: no I/O outside the database inside a transaction. The context of a
    back-filled Run comes from 2.x's database, so it is read before the write transaction opens, not from inside it."""
    engine = sql_backend.engine
    assert engine is not None
    open_transactions = [0]
    event.listen(engine, "begin", lambda _conn: open_transactions.__setitem__(0, open_transactions[0] + 1))
    for ended in ("commit", "rollback"):
        event.listen(engine, ended, lambda _conn: open_transactions.__setitem__(0, open_transactions[0] - 1))
    seen_open: list[int] = []

    def read_2x() -> ExecutionContext:
        seen_open.append(open_transactions[0])
        return CTX

    result = ShadowRecorder(sql_service).record_end(end(exit_code=0), read_2x)

    assert result.outcome is Outcome.BACKFILLED and seen_open == [0]
    assert sql_service.get_run(result.run_id).status is RunStatus.SUCCEEDED  # type: ignore[arg-type]
