"""Report figures over a real 2.x data dir and shadow Runs recorded by ShadowRecorder, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from legacy_adapters.callbacks import log_path_digest
from projections.report import to_json
from projections.report_html import render_html
from projections.report_schema import check_report
from tests.conftest import Backend
from tests.reports.conftest import (
    NOW_MS,
    NOW_S,
    SECRET_COMMAND,
    SECRETS,
    SINCE_MS,
    Scenario,
    entry,
    gate,
    make_scenario,
)

HOUR = 3600


def three_am(days_ago: int) -> int:
    """03:00:01 UTC ``days_ago`` days before NOW: a fire of "0 3 * * *" plus the shell's start delay."""
    day = datetime.fromtimestamp(NOW_S - days_ago * 86_400, tz=UTC).replace(hour=3, minute=0, second=1)
    return int(day.timestamp())


def matching_set(s: Scenario, cron: int, n: int = 20) -> None:
    """n ended executions that agree: mostly success, some errors, some stops (143 with a cancelled Run)."""
    for i in range(n):
        started = NOW_S - (i + 1) * HOUR
        if i % 10 == 3:
            s.execution(cron, started, status=3, exit_code=2)
        elif i % 10 == 7:
            s.execution(cron, started, status=2, exit_code=143, shadow="stop")
        else:
            s.execution(cron, started, status=1, exit_code=0)


def test_a_complete_matching_set_passes_every_gate(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron)
    scenario.execution(cron, NOW_S - 60, status=0, exit_code=None, shadow="open")  # still running: not a pair
    report = scenario.report()
    manual = entry(report, "manual")
    f = manual["figures"]
    assert (f["executions_observed"], f["with_shadow_run"], f["runs_created"]) == (21, 21, 21)
    assert (f["terminal_pairs"], f["terminal_status_agree"], f["exit_code_pairs"], f["exit_code_agree"]) == (20, 20,
                                                                                                             20, 20)
    assert manual["ratios"] == {"completeness": 1.0, "terminal_status_agreement": 1.0, "exit_code_agreement": 1.0}
    assert all(g["passed"] for g in manual["gates"]) and manual["ready_for_primary"] is True
    assert check_report(report) == []
    assert [o["origin"] for o in report["origins"]] == ["manual", "boot", "scheduled_node", "scheduled_system",
                                                        "script", "subscription", "system"]


def test_an_instance_without_a_shadow_run_counts_as_missing_under_the_origin_its_schedule_implies(
        scenario: Scenario) -> None:
    cron = scenario.cron("0 3 * * *")
    for days_ago in (1, 2, 3):
        scenario.execution(cron, three_am(days_ago), origin="scheduled_node")
    scenario.execution(cron, three_am(4), shadow="none")
    scenario.execution(cron, three_am(5) + 1800, shadow="none")  # 03:30: no fire time, so an ad-hoc `task` run
    scenario.execution(9999, NOW_S - HOUR, shadow="none")  # its cron was deleted
    report = scenario.report(min_executions=1)
    node = entry(report, "scheduled_node")
    assert (node["figures"]["executions_observed"], node["figures"]["with_shadow_run"]) == (4, 3)
    assert gate(report, "scheduled_node", "completeness") | {"detail": ""} == {
        "gate": "completeness", "passed": False, "value": 0.75, "threshold": 0.99, "reason": "below_threshold",
        "detail": ""}
    assert entry(report, "script")["figures"]["executions_observed"] == 1
    unknown = entry(report, "unknown")
    assert unknown["figures"]["executions_observed"] == 1 and unknown["ready_for_primary"] is False


def test_a_status_disagreement_fails_terminal_status_agreement_only(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    # 2.x marked it error (no exit code recorded) while the shadow closed it as succeeded.
    scenario.execution(cron, NOW_S - 30 * HOUR, status=3, exit_code=None, shadow_exit=0)
    report = scenario.report()
    f = entry(report, "manual")["figures"]
    assert (f["terminal_pairs"], f["terminal_status_agree"], f["exit_code_pairs"], f["exit_code_agree"]) == (21, 20,
                                                                                                             20, 20)
    assert gate(report, "manual", "terminal_status_agreement")["value"] == round(20 / 21, 6)
    assert [g["gate"] for g in entry(report, "manual")["gates"] if not g["passed"]] == ["terminal_status_agreement"]


def test_an_exit_code_disagreement_fails_exit_code_agreement_only(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 19)
    scenario.execution(cron, NOW_S - 30 * HOUR, status=3, exit_code=2, shadow_exit=1)  # both failed, codes differ
    report = scenario.report()
    f = entry(report, "manual")["figures"]
    assert (f["terminal_status_agree"], f["exit_code_pairs"], f["exit_code_agree"]) == (20, 20, 19)
    assert [g["gate"] for g in entry(report, "manual")["gates"] if not g["passed"]] == ["exit_code_agreement"]
    assert entry(report, "manual")["ratios"]["exit_code_agreement"] == 0.95


def test_runs_ended_without_a_reported_outcome_are_counted_apart_and_weigh_on_no_agreement(
        scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    # Before v2.21 no end carries an exit code: the shadow Runs ended, while 2.x's rows say error and exit 3.
    ended = [scenario.execution(cron, NOW_S - hours * HOUR, status=3, exit_code=3, shadow="unreported")
             for hours in (31, 32, 33)]
    ended.append(scenario.execution(cron, NOW_S - 34 * HOUR, status=1, exit_code=None, shadow="unreported"))
    assert {scenario.run_status(e["run_id"]) for e in ended} == {"ended"}
    report = scenario.report()
    manual = entry(report, "manual")
    f = manual["figures"]
    assert (f["executions_observed"], f["with_shadow_run"], f["ended_without_outcome"]) == (24, 24, 4)
    assert (f["terminal_pairs"], f["terminal_status_agree"], f["exit_code_pairs"], f["exit_code_agree"]) == (20, 20,
                                                                                                             20, 20)
    assert manual["ratios"] == {"completeness": 1.0, "terminal_status_agreement": 1.0, "exit_code_agreement": 1.0}
    assert gate(report, "manual", "terminal_status_agreement")["detail"] == (
        "20 of 20 terminal pairs; 4 ended without a reported outcome, not counted")
    assert "(4 ended without a reported outcome)" in manual["verdict"]["sentence"]
    assert check_report(report) == []
    html = render_html(report)
    assert '<td data-label="No outcome" class="num"><div>4</div></td>' in html


def test_too_few_executions_give_insufficient_data_and_no_ratios(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 3)
    manual = entry(scenario.report(), "manual")
    assert manual["figures"]["executions_observed"] == 3
    assert manual["ratios"] == {"completeness": None, "terminal_status_agreement": None, "exit_code_agreement": None}
    assert {g["reason"] for g in manual["gates"][:3]} == {"insufficient_data"}
    assert manual["ready_for_primary"] is False


def test_instances_outside_the_window_are_skipped_and_batches_cover_every_row(scenario: Scenario) -> None:
    cron = scenario.cron()
    for i in range(12):
        scenario.execution(cron, NOW_S - (30 + i) * 86_400)  # a month ago: before the window
    matching_set(scenario, cron, 20)
    report = scenario.report()
    assert entry(report, "manual")["figures"]["executions_observed"] == 20
    assert any(n.startswith("RunningInstances were scanned after id 12") for n in report["notes"])


def test_runs_imported_from_2x_history_are_left_out(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    imported = scenario.execution(cron, NOW_S - 40 * HOUR, status=1, exit_code=0)
    scenario.mark_imported(imported["run_id"])
    report = scenario.report()
    f = entry(report, "manual")["figures"]
    assert (f["executions_observed"], f["legacy_import_excluded"]) == (20, 1)
    assert any("legacy_import" in n for n in report["notes"])


def test_open_missing_findings_about_executions_an_import_has_given_runs_are_said_not_to_count(
        scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    found_missing_ms = NOW_MS - 3 * 86_400_000  # a pass found these missing; the import came afterwards
    for hours_ago in (30, 31, 32):
        imported = scenario.execution(cron, NOW_S - hours_ago * HOUR, status=1, exit_code=0)
        scenario.mark_imported(imported["run_id"])
        scenario.mismatch("missing", first_seen_ms=found_missing_ms, cron_id=cron,
                          diff=json.dumps({"legacy": {"status": 1, "pid": imported["pid"]}, "shadow": None}))
    manual = entry(scenario.report(), "manual")
    assert manual["figures"]["open_mismatches_by_kind"] == {"missing": 3}
    assert manual["verdict"] == {
        "state": "ready",
        "sentence": "manual: ready for primary — 20 executions over 7 days, 3 open mismatches, none counting "
                    "against the gates (3 missing, which the gates judge afresh per execution: no execution in "
                    "the window lacks a Run now, 3 of them imported from 2.x history)"}


def test_open_mismatches_drive_the_duplicate_and_stale_gates_examples_and_timeline(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    in_window = NOW_S * 1000 - 86_400_000
    scenario.mismatch("duplicate", first_seen_ms=in_window, cron_id=cron, diff='{"runs": 2}')
    scenario.mismatch("stuck", first_seen_ms=SINCE_MS - 86_400_000, cron_id=cron)  # open since before the window
    scenario.mismatch("stuck", first_seen_ms=SINCE_MS - 86_400_000, resolved=True)  # explained: not counted
    scenario.mismatch("terminal_status", first_seen_ms=in_window, origin=None)
    report = scenario.report()
    manual = entry(report, "manual")
    f = manual["figures"]
    assert f["open_mismatches_by_kind"] == {"duplicate": 1, "stuck": 1}
    assert (f["duplicates"], f["stuck_runs"], f["stale_mismatches"]) == (1, 1, 1)
    assert [g["gate"] for g in manual["gates"] if not g["passed"]] == ["no_unexplained_duplicates",
                                                                       "no_stale_mismatches"]
    assert {e["kind"] for e in f["examples"]} == {"duplicate", "stuck"}
    assert next(e for e in f["examples"] if e["kind"] == "duplicate")["diff"] == {"runs": 2}
    assert entry(report, "unknown")["figures"]["open_mismatches_by_kind"] == {"terminal_status": 1}
    day = datetime.fromtimestamp(in_window / 1000, tz=UTC).strftime("%Y-%m-%d")
    assert report["mismatch_timeline"] == [{"day": day, "kind": "duplicate", "opened": 1},
                                           {"day": day, "kind": "terminal_status", "opened": 1}]


def test_callback_mismatches_without_an_origin_are_attributed_through_the_2x_instance(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    ran = scenario.execution(cron, NOW_S - 50 * HOUR)
    seen = NOW_S * 1000 - HOUR * 1000
    diff = json.dumps({"candidates": 2, "pid": ran["pid"], "log_ref": log_path_digest(ran["log_path"])})
    scenario.mismatch("compat.ambiguous_callback", first_seen_ms=seen, origin=None, cron_id=cron, diff=diff)
    scenario.mismatch("compat.unmatched_callback", first_seen_ms=seen, origin=None, cron_id=cron,
                      diff='{"pid": 1, "log_ref": null}')  # no such instance: the cron ran only as manual
    scenario.mismatch("compat.unmatched_callback", first_seen_ms=seen, origin=None, cron_id=777)
    report = scenario.report()
    f = entry(report, "manual")["figures"]
    assert (f["ambiguous_callbacks"], f["unmatched_callbacks"]) == (1, 1)
    assert entry(report, "unknown")["figures"]["unmatched_callbacks"] == 1


def test_one_origin_can_be_reported_alone(scenario: Scenario) -> None:
    matching_set(scenario, scenario.cron(), 20)
    report = scenario.report(origins=["manual"])
    assert [o["origin"] for o in report["origins"]] == ["manual"]
    assert entry(report, "manual")["ready_for_primary"] is True


def test_subscription_and_system_are_reported_as_not_observable(scenario: Scenario) -> None:
    report = scenario.report()
    for origin in ("subscription", "system"):
        row = entry(report, origin)
        assert (row["observable"], row["note"], row["gates"], row["ready_for_primary"]) == (
            False, "not observable through callbacks", [], False)


def test_no_command_token_or_log_path_reaches_the_json_or_the_html(scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    scenario.execution(cron, NOW_S - 45 * HOUR, shadow="none")
    leaky = json.dumps({"command": SECRET_COMMAND, "log_path": "/ql/data/log/LOGPATH-SECRET-a9b8/1.log",
                        "status": {"old": "failed", "new": "succeeded"}, "note": "hunter2-SECRET in the log",
                        "value": scenario.legacy.system_token, "nested": [{"cmd": "x"}, "TOKEN-c0ffee-SECRET-7731"]})
    scenario.mismatch("exit_code", first_seen_ms=NOW_S * 1000 - 1000, cron_id=cron, diff=leaky)
    report = scenario.report()
    text, page = to_json(report), render_html(report)
    for secret in (*SECRETS, scenario.legacy.system_token):
        assert secret not in text and secret not in page
    example = entry(report, "manual")["figures"]["examples"][0]
    assert example["diff"]["status"] == {"new": "succeeded", "old": "failed"}
    assert example["diff"]["note"] == "[redacted]" and "command" not in example["diff"]


def test_an_origin_whose_executions_mostly_bypass_the_bridge_is_named_first_not_just_counted(
        scenario: Scenario) -> None:
    cron = scenario.cron()
    scenario.execution(cron, NOW_S - 2 * HOUR)  # one manual execution reached the bridge
    for hours in range(3, 8):
        scenario.execution(cron, NOW_S - hours * HOUR, shadow="none")
        scenario.mismatch("missing", first_seen_ms=NOW_MS - 60_000, cron_id=cron)

    report = scenario.report(min_executions=1)

    manual = entry(report, "manual")
    assert manual["seam"] is not None and "callbacks are bypassing the bridge" in manual["seam"]
    assert manual["verdict"]["state"] == "bypassed" and manual["ready_for_primary"] is False
    assert manual["verdict"]["sentence"].startswith("manual: callbacks are bypassing the bridge (5 of 6 recent "
                                                    "executions never reached it) — not ready for primary")
    assert "callbacks are bypassing the bridge" in report["notes"][0]
    assert "callbacks are bypassing the bridge" in render_html(report)
    assert entry(report, "scheduled_node")["seam"] is None
    assert check_report(report) == []


def test_times_are_also_given_in_2x_zone_from_the_settings_else_the_hosts(
        sql_backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shanghai = make_scenario(sql_backend, tmp_path / "a", legacy_tz="Asia/Shanghai")
    cron = shanghai.cron()
    shanghai.execution(cron, NOW_S - HOUR)
    shanghai.mismatch("exit_code", first_seen_ms=NOW_MS - 3_600_000, cron_id=cron)
    report = shanghai.report(min_executions=1)
    assert (report["time_zone"], report["window"]["end"]) == ("Asia/Shanghai", "2026-12-02T13:00:00.000Z")
    assert report["window"]["end_local"] == "2026-12-02T21:00:00.000+08:00"
    assert entry(report, "manual")["figures"]["examples"][0]["first_seen_local"] == "2026-12-02T20:00:00.000+08:00"
    assert "2026-12-02 21:00:00 +08:00" in render_html(report)

    monkeypatch.setenv("TZ", "America/Sao_Paulo")  # bridge/config.py local_zone_name reads TZ first
    host = make_scenario(sql_backend, tmp_path / "b", legacy_tz=None).report()
    assert (host["time_zone"], host["window"]["end_local"]) == ("America/Sao_Paulo", "2026-12-02T10:00:00.000-03:00")


def test_open_resolved_and_expired_mismatches_are_shown_apart_and_only_open_ones_reach_the_gates(
        scenario: Scenario) -> None:
    cron = scenario.cron()
    matching_set(scenario, cron, 20)
    before = SINCE_MS - 86_400_000
    scenario.mismatch("stuck", first_seen_ms=before, cron_id=cron)  # open: the stale gate counts it
    scenario.mismatch("duplicate", first_seen_ms=before, cron_id=cron, expired="past_lookback")
    scenario.mismatch("stuck", first_seen_ms=before, cron_id=cron, expired="past_lookback")
    scenario.mismatch("active_state", first_seen_ms=before, cron_id=cron, expired="cron_deleted")
    scenario.mismatch("exit_code", first_seen_ms=before, cron_id=cron, resolved=True)
    scenario.mismatch("exit_code", first_seen_ms=before, cron_id=cron, resolved=True, closed_ms=before)  # earlier
    report = scenario.report()
    manual = entry(report, "manual")
    f = manual["figures"]

    assert f["open_mismatches_by_kind"] == {"stuck": 1}
    assert f["resolved_mismatches_by_kind"] == {"exit_code": 1}  # closed inside the window
    assert f["expired_mismatches_by_kind"] == {"active_state": 1, "duplicate": 1, "stuck": 1}
    assert f["expired_mismatches_by_reason"] == {"cron_deleted": 1, "past_lookback": 2}
    assert (f["duplicates"], f["stuck_runs"], f["stale_mismatches"]) == (0, 1, 1)
    assert [g["gate"] for g in manual["gates"] if not g["passed"]] == ["no_stale_mismatches"]
    assert check_report(report) == []
    html = render_html(report)
    lifecycle = html[html.index('id="mismatch-lifecycle"'):]
    assert '<td data-label="Open" class="num"><div>1</div>' in lifecycle
    assert '<td data-label="Expired in window" class="num"><div>3 (cron_deleted 1, past_lookback 2)</div>' in lifecycle
