"""The pure reconcile rules (projections/reconcile.py) on their own: a 2.x row and a shadow Run in, findings out."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import Origin, RunStatus
from bridge.service.reconcile import ActiveRun, ComparedRun
from legacy_adapters.records import LegacyCron, LegacyInstance
from legacy_adapters.schema import InstanceStatus
from projections.reconcile import (
    RecordedAgain,
    compare_cron,
    compare_ended,
    compare_running,
    cron_defects,
    instance_defects,
    invalid_value,
    judged_subject,
    stopped_by_relayed_stop,
    structured_diff,
)

BEGIN_S = 1_700_000_000
LATEST_S = BEGIN_S + 86_400


def instance(status: int | None = InstanceStatus.FINISHED, exit_code: int | float | None = 0,
             **changes: Any) -> LegacyInstance:
    row = LegacyInstance(id=7, cron_id=3, pid=4242, log_path="/ql/log/a.log", started_at=BEGIN_S,
                         finished_at=BEGIN_S + 10, status=status, exit_code=exit_code)
    return dataclasses.replace(row, **changes)


def run(status: str = "succeeded", exit_code: int | float | None = 0, **fields: Any) -> ComparedRun:
    values: dict[str, Any] = {"id": "r1", "origin": "scheduled_node", "status": status, "exit_code": exit_code,
                              "started_at_ms": BEGIN_S * 1000, "finished_at_ms": (BEGIN_S + 10) * 1000, **fields}
    return ComparedRun(idempotency_key="k1", created_at_ms=BEGIN_S * 1000, **{
        **values, "status": RunStatus(values["status"]), "origin": Origin(values["origin"])})


def active(id: str, status: str, pid: int | None, origin: str) -> ActiveRun:
    return ActiveRun(id, RunStatus(status), BEGIN_S * 1000, 3, Origin(origin), pid)


def kinds(findings: list[Any]) -> list[MismatchKind]:
    return [f.kind for f in findings]


def test_an_ended_row_that_agrees_with_its_run_finds_nothing() -> None:
    assert compare_ended(instance(), run(), tolerance_s=2) == []


@pytest.mark.parametrize(("status", "expected"), [(InstanceStatus.FINISHED, "succeeded"),
                                                  (InstanceStatus.ERROR, "failed"),
                                                  (InstanceStatus.STOPPED, "cancelled")])
def test_each_ended_2x_status_expects_its_run_status(status: InstanceStatus, expected: str) -> None:
    found = compare_ended(instance(status, exit_code=1), run("timed_out", exit_code=1), tolerance_s=2)
    assert kinds(found)[0] is MismatchKind.TERMINAL_STATUS
    assert found[0].diff["values_changed"]["root['status']"] == {"old_value": expected, "new_value": "timed_out"}
    assert (found[0].cron_id, found[0].run_id, found[0].instance_id, found[0].origin) == (3, "r1", 7,
                                                                                          "scheduled_node")


@pytest.mark.parametrize("status", [InstanceStatus.FINISHED, InstanceStatus.ERROR, InstanceStatus.STOPPED])
def test_a_run_ended_without_a_reported_outcome_neither_agrees_nor_disagrees_on_status_or_exit_code(
        status: InstanceStatus) -> None:
    assert compare_ended(instance(status, exit_code=3), run("ended", exit_code=None), tolerance_s=2) == []
    late = run("ended", exit_code=None, finished_at_ms=(BEGIN_S + 30) * 1000)  # its times are still facts
    assert kinds(compare_ended(instance(status, exit_code=3), late, tolerance_s=2)) == [MismatchKind.FINISH_TIME]


def test_times_agree_within_the_tolerance_and_differ_past_it() -> None:
    late = run(started_at_ms=(BEGIN_S + 2) * 1000, finished_at_ms=(BEGIN_S + 13) * 1000)
    assert kinds(compare_ended(instance(), late, tolerance_s=2)) == [MismatchKind.FINISH_TIME]
    assert compare_ended(instance(), late, tolerance_s=3) == []


def test_a_fractional_exit_code_is_compared_as_2x_keeps_it() -> None:
    found = compare_ended(instance(InstanceStatus.ERROR, exit_code=0.5), run("failed", exit_code=0), tolerance_s=2)
    assert kinds(found) == [MismatchKind.EXIT_CODE]
    assert compare_ended(instance(InstanceStatus.ERROR, exit_code=1.0), run("failed", exit_code=1),
                         tolerance_s=2) == []


def test_a_stopped_row_pairs_with_cancelled_whatever_its_exit_code() -> None:
    assert compare_ended(instance(InstanceStatus.STOPPED, exit_code=143), run("cancelled", exit_code=None),
                         tolerance_s=2) == []


def test_a_signal_error_after_a_stop_relayed_through_the_bridge_tells_the_same_story_as_cancelled() -> None:
    relayed = run("cancelled", exit_code=None, error_code="cancelled_by_user")
    killed = instance(InstanceStatus.ERROR, exit_code=143)
    assert stopped_by_relayed_stop(killed, relayed)
    assert compare_ended(killed, relayed, tolerance_s=2) == []
    # Without the bridge's stop the same row is a failure the Run does not show.
    assert not stopped_by_relayed_stop(killed, run("cancelled", exit_code=None, error_code="stopped_in_legacy"))
    assert not stopped_by_relayed_stop(instance(InstanceStatus.ERROR, exit_code=1), relayed)


def test_an_active_run_has_no_finish_time_to_compare() -> None:
    assert kinds(compare_ended(instance(), run("running", finished_at_ms=None), tolerance_s=2)) == [
        MismatchKind.TERMINAL_STATUS]


def test_a_running_row_is_stuck_only_when_its_process_is_provably_gone() -> None:
    row = instance(InstanceStatus.RUNNING, exit_code=None, finished_at=None)
    assert kinds(compare_running(row, run("running"), process_alive=False)) == [MismatchKind.STUCK]
    assert compare_running(row, run("running"), process_alive=None) == []
    assert compare_running(row, run("running"), process_alive=True) == []
    assert kinds(compare_running(row, run("succeeded"), process_alive=True)) == [MismatchKind.TERMINAL_STATUS]


def test_a_cron_state_is_running_over_queued_over_idle() -> None:
    running = active("a", "running", 10, "manual")
    queued = active("b", "queued", None, "manual")
    assert compare_cron(3, 0, 10, [queued, running]) == []
    assert compare_cron(3, 3, None, [queued]) == []
    assert compare_cron(3, 1, None, []) == []
    found = compare_cron(3, 1, None, [running])
    assert kinds(found) == [MismatchKind.ACTIVE_STATE] and found[0].run_id == "a"
    assert compare_cron(3, None, None, []) == []  # no status is idle


def test_a_running_cron_whose_pid_differs_names_the_running_run() -> None:
    running = active("a", "running", 10, "manual")
    found = compare_cron(3, 0, 11, [running])
    assert kinds(found) == [MismatchKind.PID]
    assert found[0].diff["values_changed"]["root['pid']"] == {"old_value": 11, "new_value": 10}
    assert compare_cron(3, 0, None, [running]) == []  # 2.x without a pid: nothing to compare


def test_a_readable_row_has_no_defects_and_each_unreadable_column_says_why() -> None:
    assert instance_defects(instance(), LATEST_S) == {}
    odd = instance(status=9, exit_code=math.nan, cron_id=None, started_at=0, finished_at=-5)
    assert set(instance_defects(odd, LATEST_S)) == {"cron_id", "started_at", "finished_at", "status", "exit_code"}
    assert instance_defects(odd, LATEST_S)["cron_id"] == "no value"
    assert instance_defects(instance(cron_id=2**63), LATEST_S) == {"cron_id": "out of range"}
    assert instance_defects(instance(started_at=LATEST_S + 1), LATEST_S) == {"started_at": "in the future"}


def test_a_cron_that_never_ran_has_no_defect() -> None:
    cron = LegacyCron(*([None] * len(dataclasses.fields(LegacyCron))))  # type: ignore[arg-type]
    assert cron_defects(cron, LATEST_S) == {}
    assert cron_defects(dataclasses.replace(cron, last_execution_time=0), LATEST_S) == {}
    assert cron_defects(dataclasses.replace(cron, last_execution_time=BEGIN_S), LATEST_S) == {}
    assert cron_defects(dataclasses.replace(cron, last_execution_time=LATEST_S + 1), LATEST_S) == {
        "last_execution_time": "in the future"}


def test_an_invalid_value_names_the_column_and_why_never_the_value_and_drops_an_id_out_of_range() -> None:
    finding = invalid_value("RunningInstances", {"status": "unknown", "cron_id": "out of range"}, 2**64,
                            instance_id=7)
    assert finding.kind is MismatchKind.INVALID_LEGACY_VALUE
    assert finding.diff == {"RunningInstances.cron_id": "out of range", "RunningInstances.status": "unknown"}
    assert finding.cron_id is None and finding.dedupe_key == "invalid_legacy_value:None:i7"


def test_rows_recorded_again_are_all_counted_and_the_first_ones_listed_in_order() -> None:
    again = RecordedAgain("r1", 3, "manual")
    again.add([instance(status=InstanceStatus.ERROR, id=30 - n) for n in range(25)])
    finding = again.finding()
    assert finding.kind is MismatchKind.LEGACY_DUPLICATE_INSTANCE and finding.diff["rows"] == 25
    assert [i["id"] for i in finding.diff["instances"]] == list(range(6, 26))
    assert {i["status"] for i in finding.diff["instances"]} == {"error"}


def test_cron_kinds_and_a_crons_invalid_values_are_judged_by_their_cron_the_rest_by_their_subject() -> None:
    assert judged_subject(MismatchKind.PID, 3, "pid:3:rX") == "c3"
    assert judged_subject(MismatchKind.INVALID_LEGACY_VALUE, 3, "invalid_legacy_value:3:rNone") == "c3"
    assert judged_subject(MismatchKind.INVALID_LEGACY_VALUE, 3, "invalid_legacy_value:3:i9") == "i9"
    assert judged_subject(MismatchKind.ORPHAN, 3, "orphan:3:rX") == "rX"


def test_a_structured_diff_is_empty_when_the_views_agree_and_ignores_volatile_fields() -> None:
    assert structured_diff({"a": 1, "updated_at": 1}, {"a": 1, "updated_at": 2}) == {}
    assert structured_diff({"t": 10}, {"t": 11.5}, epsilon=2) == {}
    assert structured_diff({"t": 10}, {"t": 13}, epsilon=2) != {}
