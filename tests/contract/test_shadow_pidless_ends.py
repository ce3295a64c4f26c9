"""Ends without a pid (v2.17.0–v2.18.1 send ``''``, docs/legacy-2x.md#callback-bodies-before-v221): each is
placed by its own log path and begin second, on every store; only a genuinely ambiguous one stays ambiguous."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.domain.model import RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder

CTX = ExecutionContext(origin="scheduled_system", evidence="schedule_match", task_revision="rev")
BEGIN_MS = 1_796_216_401_000


def start(pid: int, log: str | None, begin_ms: int = BEGIN_MS, cron: int = 7) -> CallbackFacts:
    return CallbackFacts(cron_id=cron, pid=pid, log_ref=log, started_at_ms=begin_ms, duration_ms=None,
                         exit_code=None, received_at_ms=begin_ms + 100)


def pidless_end(log: str | None, begin_ms: int = BEGIN_MS, exit_code: int | None = 0) -> CallbackFacts:
    return replace(start(0, log, begin_ms), pid=None, duration_ms=3000, exit_code=exit_code,
                   received_at_ms=begin_ms + 3000)


@pytest.fixture
def recorder(service: RunService) -> ShadowRecorder:
    return ShadowRecorder(service)


def test_overlapping_runs_of_one_cron_are_each_closed_by_their_own_pidless_end(recorder: ShadowRecorder,
                                                                              service: RunService) -> None:
    first = recorder.record_start(start(100, "log-a"), CTX).run_id
    second = recorder.record_start(start(200, "log-b", BEGIN_MS + 60_000), CTX).run_id
    closed = recorder.record_end(pidless_end("log-b", BEGIN_MS + 60_000, exit_code=3), lambda: CTX)
    assert (closed.outcome, closed.run_id) == (Outcome.CLOSED, second)
    assert service.get_run(first).status is RunStatus.RUNNING
    assert recorder.record_end(pidless_end("log-a"), lambda: CTX).run_id == first
    assert (service.get_run(first).status, service.get_run(second).status) == (RunStatus.SUCCEEDED,
                                                                               RunStatus.FAILED)


def test_a_pidless_end_is_told_apart_by_its_begin_second_when_two_runs_share_a_log_path(
        recorder: ShadowRecorder, service: RunService) -> None:
    early = recorder.record_start(start(100, "shared"), CTX).run_id
    late = recorder.record_start(start(200, "shared", BEGIN_MS + 2000), CTX).run_id
    assert recorder.record_end(pidless_end("shared", BEGIN_MS + 2000), lambda: CTX).run_id == late
    assert service.get_run(early).status is RunStatus.RUNNING


def test_a_pidless_end_never_closes_a_run_of_another_log_path(recorder: ShadowRecorder,
                                                              service: RunService) -> None:
    other = recorder.record_start(start(100, "log-a"), CTX).run_id
    assert recorder.record_end(pidless_end("log-z"), lambda: None).outcome is Outcome.UNMATCHED
    assert service.get_run(other).status is RunStatus.RUNNING


def test_a_genuinely_ambiguous_pidless_end_stays_ambiguous(recorder: ShadowRecorder, service: RunService) -> None:
    a = recorder.record_start(start(100, "shared"), CTX).run_id
    b = recorder.record_start(start(200, "shared"), CTX).run_id
    assert recorder.record_end(pidless_end("shared"), lambda: CTX).outcome is Outcome.AMBIGUOUS
    assert service.get_run(a).status is service.get_run(b).status is RunStatus.RUNNING


def test_a_replayed_pidless_end_is_a_duplicate_when_2xs_row_keeps_its_starts_pid(recorder: ShadowRecorder,
                                                                                 service: RunService) -> None:
    run_id = recorder.record_start(start(100, "log-a"), CTX).run_id
    assert recorder.record_end(pidless_end("log-a"), lambda: CTX).outcome is Outcome.CLOSED
    replayed = recorder.record_end(pidless_end("log-a"), lambda: replace(CTX, row_pid=100))
    assert (replayed.outcome, replayed.run_id) == (Outcome.DUPLICATE, run_id)
    assert service.get_run(run_id).status is RunStatus.SUCCEEDED


def test_a_pidless_end_without_its_start_back_fills_under_the_pid_2xs_row_keeps(recorder: ShadowRecorder,
                                                                               service: RunService) -> None:
    result = recorder.record_end(pidless_end("log-a"), lambda: replace(CTX, row_pid=100))
    assert result.outcome is Outcome.BACKFILLED
    assert service.get_run(result.run_id).legacy_pid == 100
    late_start = recorder.record_start(start(100, "log-a"), CTX)  # the start it missed finds that Run
    assert (late_start.outcome, late_start.run_id) == (Outcome.LATE_IGNORED, result.run_id)
