"""The reconciler's rule for stopped executions: 2.x stopped, or 2.x error with a signal exit after a stop 2.x
accepted through the bridge, sits beside a shadow `cancelled` as agreement; a signal exit alone does not."""

from __future__ import annotations

import pytest

from bridge.domain.model import Origin, RunStatus
from bridge.service.reconcile import ComparedRun
from legacy_adapters.records import LegacyInstance
from projections.reconcile import compare_ended

STARTED_S, FINISHED_S = 1_796_216_400, 1_796_216_430


def instance(status: int, exit_code: int | None, finished_s: int | None = FINISHED_S) -> LegacyInstance:
    return LegacyInstance(id=1, cron_id=7, pid=41, log_path="a.log", started_at=STARTED_S, finished_at=finished_s,
                          status=status, exit_code=exit_code)


def run(status: str, error_code: str | None, exit_code: int | None = 143) -> ComparedRun:
    return ComparedRun(id="r1", idempotency_key="k1", status=RunStatus(status), created_at_ms=STARTED_S * 1000,
                       origin=Origin.MANUAL, error_code=error_code, exit_code=exit_code,
                       started_at_ms=STARTED_S * 1000, finished_at_ms=FINISHED_S * 1000)


@pytest.mark.parametrize(("legacy", "shadow"), [
    (instance(2, None), run("cancelled", "cancelled_by_user")),  # stop marked the row first
    (instance(3, 143), run("cancelled", "cancelled_by_user")),  # the trap's end reached 2.x first
    (instance(3, 143), run("cancelled", "cancelled_by_user", exit_code=None)),  # the end came after the cancel
    (instance(2, 143), run("cancelled", "instance_stopped_by_user")),
    (instance(2, None), run("cancelled", "replaced_by_next_run")),
    (instance(2, None, finished_s=None), run("cancelled", "legacy_boot_reset", exit_code=None)),
    (instance(3, 143), run("failed", "process_exit_error")),  # a kill with no stop: both say so
], ids=["stopped", "error-143-after-relayed-stop", "error-143-end-late", "stop-instance", "replacement",
        "boot-reset", "plain-kill"])
def test_what_agrees(legacy: LegacyInstance, shadow: ComparedRun) -> None:
    assert compare_ended(legacy, shadow, 2) == []


@pytest.mark.parametrize(("legacy", "shadow", "kinds"), [
    (instance(3, 143), run("cancelled", "stopped_in_legacy"), ["terminal_status"]),  # no relayed stop
    (instance(3, 1), run("cancelled", "cancelled_by_user"), ["exit_code", "terminal_status"]),  # not a signal
    (instance(2, None), run("failed", "process_exit_error"), ["terminal_status"]),
])
def test_what_does_not(legacy: LegacyInstance, shadow: ComparedRun, kinds: list[str]) -> None:
    assert sorted(f.kind for f in compare_ended(legacy, shadow, 2)) == kinds
