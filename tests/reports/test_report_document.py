"""The JSON document (schema ql-bridge/cutover-report@1) and the HTML page built from it, without any store."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from projections.gates import GateThresholds, OriginFigures, Window
from projections.report import assemble, example, origin_entry, timeline, to_json, unobservable_entry
from projections.report_html import render_html
from projections.report_redaction import summarize_diff
from projections.report_schema import SCHEMA, check_report

WINDOW = Window(1_795_611_600_000, 1_796_216_400_000)
TOP_KEYS = ["schema", "generated_at", "generated_at_local", "time_zone", "legacy_release", "window", "thresholds",
            "origins", "mismatch_timeline", "notes"]
ORIGIN_KEYS = ["origin", "verdict", "mode", "observable", "note", "figures", "ratios", "gates", "ready_for_primary",
               "seam"]
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def sample_report(origin_name: str = "manual") -> dict[str, Any]:
    figures = OriginFigures(origin_name, executions_observed=40, with_shadow_run=39, terminal_pairs=38,
                            terminal_status_agree=38, exit_code_pairs=30, exit_code_agree=29, unmatched_callbacks=1,
                            open_mismatches_by_kind={"stuck": 1, "exit_code": 2}, stuck_runs=1)
    figures.examples = [example({"kind": "exit_code", "legacy_cron_id": 4, "run_id": None,
                                 "first_seen_ms": WINDOW.end_ms - 5000, "diff": '{"exit_code": {"old": 2, "new": 1}}'})]
    few = OriginFigures("scheduled_node", executions_observed=2, with_shadow_run=2)
    entries = [origin_entry(figures, GateThresholds(), WINDOW, mode="shadow"),
               origin_entry(few, GateThresholds(), WINDOW, mode=None),
               unobservable_entry("subscription", mode="off")]
    rows = timeline([(WINDOW.end_ms // 86_400_000, "stuck", 1), (WINDOW.end_ms // 86_400_000 - 2, "exit_code", 2)])
    return assemble(generated_at_ms=WINDOW.end_ms, window=WINDOW, thresholds=GateThresholds(), origins=entries,
                    mismatch_timeline=rows, notes=["a note"])


def test_the_document_has_every_required_key_in_the_documented_order_with_the_right_types() -> None:
    report = sample_report()
    assert list(report) == TOP_KEYS
    assert report["schema"] == SCHEMA == "ql-bridge/cutover-report@1"
    assert RFC3339.match(report["generated_at"]) and RFC3339.match(report["window"]["start"])
    assert report["window"] == {"start": "2026-11-25T13:00:00.000Z", "end": "2026-12-02T13:00:00.000Z",
                                "start_ms": WINDOW.start_ms, "end_ms": WINDOW.end_ms,
                                "start_local": "2026-11-25T13:00:00.000+00:00",
                                "end_local": "2026-12-02T13:00:00.000+00:00"}  # WINDOW's zone is UTC
    assert all(list(o) == ORIGIN_KEYS for o in report["origins"])
    assert report["mismatch_timeline"] == [{"day": "2026-11-30", "kind": "exit_code", "opened": 2},
                                           {"day": "2026-12-02", "kind": "stuck", "opened": 1}]
    assert check_report(report) == []
    assert check_report(json.loads(to_json(report))) == []


def test_ratios_equal_the_gate_values_and_are_null_below_the_minimum() -> None:
    manual, few, _ = sample_report()["origins"]
    assert manual["ratios"] == {"completeness": 0.975, "terminal_status_agreement": 1.0,
                                "exit_code_agreement": round(29 / 30, 6)}
    assert [g["value"] for g in manual["gates"][:3]] == list(manual["ratios"].values())
    assert few["ratios"] == {"completeness": None, "terminal_status_agreement": None, "exit_code_agreement": None}


def test_serialisation_is_deterministic() -> None:
    assert to_json(sample_report()) == to_json(sample_report())
    assert list(sample_report()["origins"][0]["figures"]["open_mismatches_by_kind"]) == ["exit_code", "stuck"]


@pytest.mark.parametrize("breakage, problem", [
    (lambda d: d.pop("notes"), "$.notes: missing"),
    (lambda d: d.update(schema="ql-bridge/cutover-report@2"), "$.schema: expected"),
    (lambda d: d["window"].update(start_ms="yesterday"), "$.window.start_ms: wrong type str"),
    (lambda d: d["origins"][0].update(ready_for_primary=1), "$.origins[0].ready_for_primary: wrong type int"),
    (lambda d: d["origins"][0]["figures"].update(duplicates=True), "$.origins[0].figures.duplicates: wrong type"),
    (lambda d: d["origins"][0]["gates"][0].pop("threshold"), "$.origins[0].gates[0].threshold: missing"),
    (lambda d: d["origins"][0]["ratios"].update(completeness="99%"), "$.origins[0].ratios.completeness: wrong"),
    (lambda d: d["mismatch_timeline"][0].update(opened=None), "$.mismatch_timeline[0].opened: wrong type"),
])
def test_the_check_names_a_missing_key_or_a_wrong_type(breakage: Any, problem: str) -> None:
    report = copy.deepcopy(sample_report())
    breakage(report)
    assert any(p.startswith(problem) for p in check_report(report)), check_report(report)


def test_an_unobservable_origin_has_no_gates_and_is_never_ready() -> None:
    row = unobservable_entry("system", mode=None)
    assert (row["observable"], row["gates"], row["ready_for_primary"]) == (False, [], False)
    assert row["note"] == "not observable through callbacks"


def test_a_diff_keeps_identifiers_and_numbers_and_redacts_everything_else() -> None:
    diff = {"values_changed": {"root['status']": {"old_value": "failed", "new_value": "succeeded"}},
            "log_ref": "0123456789abcdef0123456789abcdef0123", "pid": 42,
            "run_ids": ["01890a5d-ac96-774b-bcce-b302099a8057"], "command": "task x.js --token=abc",
            "log_path": "/ql/data/log/x.log", "token": "t", "message": "rm -rf /",
            "who": "b8f0f2a4-3c1d-4e5f-9a7b-1c2d3e4f5a6b", "evidence": "schedule_match:main:5_field"}
    summary = summarize_diff(json.dumps(diff))
    assert summary == {
        "evidence": "schedule_match:main:5_field", "log_ref": "0123456789abcdef0123456789abcdef0123",
        "message": "[redacted]", "pid": 42, "run_ids": ["01890a5d-ac96-774b-bcce-b302099a8057"],
        "values_changed": {"root['status']": {"new_value": "succeeded", "old_value": "failed"}},
        "who": "[redacted]"}  # a v4 UUID is what a 2.x token looks like
    assert summarize_diff("not json {") == "[redacted]"


def test_the_page_escapes_every_string_and_has_the_ids_the_tests_use() -> None:
    report = sample_report('<script>alert("x")</script>')
    report["notes"].append("<img src=x onerror=alert(1)>")
    page = render_html(report)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    for element_id in ("origin-table", "agreement-chart", "mismatch-timeline"):
        assert f'id="{element_id}"' in page
    assert page.count('class="bar"') >= 5  # 3 agreement bars and 2 timeline bars
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing external


def test_the_page_of_an_empty_report_still_renders_both_charts() -> None:
    report = assemble(generated_at_ms=WINDOW.end_ms, window=WINDOW, thresholds=GateThresholds(), origins=[],
                      mismatch_timeline=[], notes=[])
    page = render_html(report)
    assert 'id="agreement-chart"' in page and 'id="mismatch-timeline"' in page
    assert "No mismatch was opened in this window." in page
