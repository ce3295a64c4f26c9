"""Exit codes on every store: whatever integer 2.x accepts closes the Run with that code, never leaves it open.

2.x's Joi schema takes any safe JS number for ``exit_code`` (``|n| <= 2**53 - 1``); the shell itself sends
``$?`` (0-255), 124 for a timeout, and 2.x writes 143 for a stopped instance.
"""

from __future__ import annotations

import pytest

from bridge.domain.model import AttemptStatus, RunStatus
from bridge.service.callback_facts import CallbackFacts, ExecutionContext, Outcome
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder

CTX = ExecutionContext(origin="scheduled_node", evidence="schedule_match:main:5_field:node", task_revision="rev")
BEGIN_MS = 1_796_216_497_000


def facts(exit_code: int | None = None, *, ended: bool = False) -> CallbackFacts:
    return CallbackFacts(cron_id=1, pid=10325, log_ref="log-a", started_at_ms=BEGIN_MS,
                         duration_ms=2000 if ended else None, exit_code=exit_code,
                         received_at_ms=BEGIN_MS + (2500 if ended else 500))


@pytest.mark.parametrize("exit_code", [2**40, 2**31, -(2**31) - 1, 2**53 - 1, -(2**53 - 1)])
def test_a_run_ending_with_an_exit_code_beyond_32_bits_is_closed_with_it(service: RunService,
                                                                         exit_code: int) -> None:
    recorder = ShadowRecorder(service)
    run_id = recorder.record_start(facts(), CTX).run_id
    assert run_id is not None

    result = recorder.record_end(facts(exit_code, ended=True), lambda: CTX)

    assert result.outcome is Outcome.CLOSED
    run = service.get_run(run_id)
    (attempt,) = service.get_attempts(run_id)
    assert (run.status, attempt.status, attempt.exit_code) == (RunStatus.FAILED, AttemptStatus.FAILED, exit_code)
    ends = [e for e in service.list_events(run_id, 0, 100).events if e.type.value in ("attempt.failed", "run.failed")]
    assert [e.payload["exit_code"] for e in ends] == [exit_code, exit_code]


def test_an_end_with_a_wide_exit_code_and_no_open_run_backfills_a_closed_one(service: RunService) -> None:
    result = ShadowRecorder(service).record_end(facts(2**40, ended=True), lambda: CTX)

    assert result.outcome is Outcome.BACKFILLED and result.run_id is not None
    (attempt,) = service.get_attempts(result.run_id)
    assert (service.get_run(result.run_id).status, attempt.exit_code) == (RunStatus.FAILED, 2**40)
