"""What an operator reads to decide, without any store: one verdict sentence per origin before anything else,
"insufficient data" as a neutral state, the two sides of every diff named, times in 2.x's zone with their
offset, and charts on which near values look different."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from projections.gates import GateThresholds, OriginFigures, Window
from projections.report import assemble, example, origin_entry, timeline, to_json, unobservable_entry
from projections.report_html import agreement_chart, render_html
from projections.report_redaction import diff_sides
from projections.report_schema import check_report

START_MS, END_MS = 1_795_611_600_000, 1_796_216_400_000  # 2026-11-25T13:00Z .. 2026-12-02T13:00Z
WINDOW = Window(START_MS, END_MS)
SEAM = "manual: callbacks are bypassing the bridge (5 of 6 recent executions never reached it)"
VALUES_CHANGED = '{"values_changed": {"root[\'exit_code\']": {"new_value": 1, "old_value": 2}}}'


def shanghai() -> Window:
    return Window(START_MS, END_MS, zone="Asia/Shanghai")  # type: ignore[call-arg]


def healthy(origin: str = "manual", n: int = 1204, **changes: Any) -> OriginFigures:
    figures = OriginFigures(origin, executions_observed=n, with_shadow_run=n, terminal_pairs=n,
                            terminal_status_agree=n, exit_code_pairs=n, exit_code_agree=n)
    for name, value in changes.items():
        setattr(figures, name, value)
    return figures


def entry_of(figures: OriginFigures, window: Window = WINDOW, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("mode", "shadow")
    return origin_entry(figures, GateThresholds(), window, **kwargs)


def report_of(entries: list[dict[str, Any]], window: Window = WINDOW, rows: Any = ()) -> dict[str, Any]:
    return assemble(generated_at_ms=window.end_ms, window=window, thresholds=GateThresholds(), origins=entries,
                    mismatch_timeline=timeline(rows), notes=[])


def verdict_items(page: str) -> list[tuple[str, str]]:
    """(data-state, text) of each verdict line, in page order."""
    block = page[page.index('id="verdicts"'):]
    block = block[:block.index("</ul>")]
    return [(state, re.sub(r"<[^>]+>", "", text)) for state, text in
            re.findall(r'<li class="verdict" data-state="([a-z_]+)"[^>]*>(.*?)</li>', block)]


# --- one verdict sentence per origin ---------------------------------------------------------------------


def test_a_ready_origin_reads_as_one_sentence_with_its_executions_and_mismatches_over_the_window() -> None:
    manual = entry_of(healthy())
    assert manual["verdict"] == {
        "state": "ready",
        "sentence": "manual: ready for primary — 1,204 executions over 7 days, 0 open mismatches"}
    assert manual["ready_for_primary"] is True


def test_a_failing_gate_is_named_in_the_sentence_with_its_figure_and_threshold() -> None:
    figures = healthy(n=40, with_shadow_run=39, open_mismatches_by_kind={"exit_code": 2, "stuck": 1},
                      unmatched_callbacks=1)
    verdict = entry_of(figures)["verdict"]
    assert verdict["state"] == "not_ready"
    assert verdict["sentence"] == (
        "manual: not ready for primary — completeness 97.50% is below 99.00% (39 of 40 executions with a shadow "
        "Run); 40 executions over 7 days, 3 open mismatches, none counting against the gates (2 exit_code, which "
        "the gates judge afresh per execution; 1 stuck first seen inside the window, not yet stale), 1 unplaced "
        "callback")


def test_open_missing_findings_whose_executions_have_runs_now_are_said_not_to_count_against_the_gates() -> None:
    # A pass found them missing; an import has given those executions Runs since, and the next pass resolves them.
    figures = healthy("script", n=401, open_mismatches_by_kind={"missing": 108}, legacy_import_excluded=108)
    verdict = entry_of(figures)["verdict"]
    assert verdict == {
        "state": "ready",
        "sentence": "script: ready for primary — 401 executions over 7 days, 108 open mismatches, none counting "
                    "against the gates (108 missing, which the gates judge afresh per execution: no execution in "
                    "the window lacks a Run now, 108 of them imported from 2.x history)"}


def test_missing_findings_beside_executions_still_without_a_run_point_at_completeness() -> None:
    figures = healthy(n=400, with_shadow_run=397, open_mismatches_by_kind={"missing": 5})
    assert entry_of(figures)["verdict"]["sentence"].endswith(
        "5 open mismatches, none counting against the gates (5 missing, which the gates judge afresh per execution: "
        "completeness counts the 3 executions in the window without a Run)")


def test_the_sentence_splits_open_mismatches_into_those_the_gates_count_and_the_rest_with_why() -> None:
    figures = healthy(open_mismatches_by_kind={"duplicate": 2, "stuck": 4, "orphan": 1, "missing": 3, "pid": 2},
                      duplicates=2, stale_mismatches=3)
    assert entry_of(figures)["verdict"]["sentence"].endswith(
        "12 open mismatches, 5 counting against the gates (2 duplicate, 3 stuck/orphan first seen before the "
        "window) and 7 not (3 missing, which the gates judge afresh per execution: no execution in the window "
        "lacks a Run now; 2 stuck/orphan first seen inside the window, not yet stale; 2 pid, which no gate reads)")
    counted = healthy(open_mismatches_by_kind={"duplicate": 1, "orphan": 2}, duplicates=1, stale_mismatches=2)
    assert entry_of(counted)["verdict"]["sentence"].endswith(
        "3 open mismatches, all counting against the gates (1 duplicate, 2 orphan first seen before the window)")


def test_too_few_executions_are_their_own_neutral_state_not_a_failure() -> None:
    few = entry_of(OriginFigures("scheduled_node", executions_observed=2, with_shadow_run=2), mode=None)
    assert few["verdict"] == {
        "state": "insufficient_data",
        "sentence": "scheduled_node: insufficient data — 2 executions over 7 days, fewer than the 20 needed to "
                    "judge; 0 open mismatches"}
    assert few["ready_for_primary"] is False
    enough_runs_few_pairs = entry_of(healthy(n=30, terminal_pairs=5, terminal_status_agree=5, exit_code_pairs=5,
                                             exit_code_agree=5))["verdict"]
    assert enough_runs_few_pairs["state"] == "insufficient_data"
    assert "only 5 ended with a shadow Run to compare" in enough_runs_few_pairs["sentence"]


def test_a_real_failure_beside_too_little_data_is_not_ready() -> None:
    verdict = entry_of(healthy(n=5, duplicates=1))["verdict"]
    assert verdict["state"] == "not_ready"
    assert verdict["sentence"].startswith("manual: not ready for primary — 1 open duplicate-execution mismatch")
    assert "too little data to judge completeness, status agreement, exit-code agreement" in verdict["sentence"]


def test_a_seam_finding_comes_first_in_the_sentence_and_keeps_the_origin_from_primary() -> None:
    manual = entry_of(healthy(), seam=SEAM)
    assert manual["seam"] == SEAM
    assert manual["verdict"]["state"] == "bypassed"
    assert manual["verdict"]["sentence"].startswith(SEAM + " — not ready for primary; 1,204 executions")
    assert manual["ready_for_primary"] is False  # every gate passed, but the executions bypass the bridge


def test_origins_that_cannot_be_judged_say_why_in_a_neutral_sentence() -> None:
    hidden = unobservable_entry("subscription", mode="off")
    assert hidden["verdict"]["state"] == "not_observable"
    assert hidden["verdict"]["sentence"] == "subscription: not observable through callbacks, so never promoted"
    unknown = entry_of(healthy("unknown", n=3), mode=None, promotable=False,
                       note="executions and mismatches that could not be attributed to an origin")
    assert unknown["verdict"]["state"] == "not_promotable"
    assert unknown["verdict"]["sentence"] == ("unknown: not an origin to promote — 3 executions over 7 days, "
                                              "0 open mismatches")


@pytest.mark.parametrize("start_ms, phrase", [(END_MS - 86_400_000, "over 24 hours"),
                                              (END_MS - 36 * 3_600_000, "over 36 hours"),
                                              (END_MS - 10 * 86_400_000 - 43_200_000, "over 10.5 days"),
                                              (END_MS - 90 * 60_000, "over 90 minutes")])
def test_the_sentence_names_the_window_length(start_ms: int, phrase: str) -> None:
    assert phrase in entry_of(healthy(), Window(start_ms, END_MS))["verdict"]["sentence"]


def test_the_page_opens_with_the_verdict_sentences_before_window_thresholds_and_tables() -> None:
    entries = [entry_of(healthy()), entry_of(OriginFigures("scheduled_node", executions_observed=2), mode=None),
               unobservable_entry("subscription", mode="off")]
    page = render_html(report_of(entries))
    body = page[page.index("<body>"):]
    first = re.search(r'<(?:section|table|p|svg|ul)\b[^>]*\bid="([\w-]+)"', body)
    assert first is not None and first.group(1) == "verdicts"
    assert body.index('id="verdicts"') < min(body.index(f'id="{i}"') for i in ("window", "thresholds",
                                                                                "origin-table", "agreement-chart"))
    assert verdict_items(page) == [(e["verdict"]["state"], e["verdict"]["sentence"]) for e in entries]


def test_insufficient_data_is_never_drawn_as_a_failure() -> None:
    few = entry_of(OriginFigures("scheduled_node", executions_observed=2, with_shadow_run=2), mode=None)
    page = render_html(report_of([few]))
    row = re.search(r'<tr data-origin="scheduled_node">(.*?)</tr>', page)
    assert row is not None and 'class="fail"' not in row.group(1) and "insufficient data" in row.group(1)
    section = page[page.index('id="gates-scheduled_node"'):]
    heading, gates = section[:section.index("</h3>")], section[section.index('<ul class="gates">'):]
    gates = gates[:gates.index("</ul>")]
    assert '<span class="nodata">insufficient data</span>' in heading
    assert "FAIL" not in gates and 'class="fail"' not in gates
    assert gates.count('<span class="nodata">INSUFFICIENT DATA</span>') == 3  # the ratio gates; the count gates pass


# --- the sides of a diff -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, diff, sides", [
    ("exit_code", VALUES_CHANGED, {"legacy": {"exit_code": 2}, "shadow": {"exit_code": 1}, "context": {}}),
    ("terminal_status", {"type_changes": {"root['status']": {"old_type": "str", "new_type": "str",
                                                            "old_value": "failed", "new_value": "succeeded"}}},
     {"legacy": {"status": "failed"}, "shadow": {"status": "succeeded"}, "context": {}}),
    ("missing", {"legacy": {"status": 1, "pid": 4001}, "shadow": None},
     {"legacy": {"pid": 4001, "status": 1}, "shadow": None, "context": {}}),
    ("orphan", {"legacy": None, "shadow": {"status": "succeeded"}},
     {"legacy": None, "shadow": {"status": "succeeded"}, "context": {}}),
    ("stuck", {"legacy": "running", "process": "gone", "pid": 4002},
     {"legacy": {"state": "running"}, "shadow": {}, "context": {"pid": 4002, "process": "gone"}}),
    ("duplicate", {"runs": 2, "first_run_id": "01890a5d-ac96-774b-bcce-b302099a8057"},
     {"legacy": {}, "shadow": {"first_run_id": "01890a5d-ac96-774b-bcce-b302099a8057", "runs": 2}, "context": {}}),
    ("invalid_legacy_value", {"RunningInstances.started_at": "negative"},
     {"legacy": {"RunningInstances.started_at": "negative"}, "shadow": {}, "context": {}}),
    ("compat.ambiguous_callback", {"candidates": 2, "pid": 4711, "log_ref": None},
     {"legacy": {}, "shadow": {"candidates": 2}, "context": {"log_ref": None, "pid": 4711}}),
    ("terminal_status", {"status": {"old": "failed", "new": "succeeded"}},
     {"legacy": {"status": "failed"}, "shadow": {"status": "succeeded"}, "context": {}}),
])
def test_a_diff_is_split_into_what_2x_holds_and_what_the_shadow_holds(kind: str, diff: Any,
                                                                       sides: dict[str, Any]) -> None:
    row = {"kind": kind, "legacy_cron_id": 4, "run_id": None, "first_seen_ms": END_MS - 5000,
           "diff": diff if isinstance(diff, str) else json.dumps(diff)}
    assert example(row)["sides"] == sides


def test_the_page_labels_each_side_of_a_diff_in_words() -> None:
    figures = healthy(open_mismatches_by_kind={"exit_code": 1, "missing": 1})
    figures.examples = [
        example({"kind": "exit_code", "legacy_cron_id": 4, "run_id": None, "first_seen_ms": END_MS - 5000,
                 "diff": VALUES_CHANGED}),
        example({"kind": "missing", "legacy_cron_id": 4, "run_id": None, "first_seen_ms": END_MS - 5000,
                 "diff": '{"legacy": {"status": 1, "pid": 4001}, "shadow": null}'})]
    page = render_html(report_of([entry_of(figures)]))
    table = page[page.index('id="examples-table"'):]
    table = table[:table.index("</table>")]
    text = re.sub(r"<[^>]+>", " ", table)
    assert re.search(r"2\.x\s+exit_code = 2", text) and re.search(r"shadow\s+exit_code = 1", text)
    assert re.search(r"shadow\s+no Run", text) and "status = 1 (finished)" in text
    assert "old_value" not in table and "new_value" not in table


# --- times in 2.x's zone -----------------------------------------------------------------------------------


def test_the_document_keeps_utc_and_adds_2x_local_siblings_with_the_offset() -> None:
    figures = healthy(stale_mismatches=1)
    figures.examples = [example({"kind": "stuck", "legacy_cron_id": 4, "run_id": None,
                                 "first_seen_ms": START_MS - 86_400_000, "diff": "{}"}, zone="Asia/Shanghai")]
    report = report_of([entry_of(figures, shanghai())], shanghai())
    assert report["generated_at"] == "2026-12-02T13:00:00.000Z"
    assert report["generated_at_local"] == "2026-12-02T21:00:00.000+08:00"
    assert report["time_zone"] == "Asia/Shanghai"
    assert report["window"] == {"start": "2026-11-25T13:00:00.000Z", "end": "2026-12-02T13:00:00.000Z",
                                "start_ms": START_MS, "end_ms": END_MS,
                                "start_local": "2026-11-25T21:00:00.000+08:00",
                                "end_local": "2026-12-02T21:00:00.000+08:00"}
    ex = report["origins"][0]["figures"]["examples"][0]
    assert (ex["first_seen_ms"], ex["first_seen_local"]) == (START_MS - 86_400_000, "2026-11-24T21:00:00.000+08:00")
    stale = next(g for g in report["origins"][0]["gates"] if g["gate"] == "no_stale_mismatches")
    assert "(2026-11-25T21:00:00+08:00)" in stale["detail"]
    assert check_report(report) == []


def test_the_page_shows_every_time_in_2x_zone_with_its_offset_and_no_utc_time() -> None:
    figures = healthy(stale_mismatches=1)
    figures.examples = [example({"kind": "stuck", "legacy_cron_id": 4, "run_id": None,
                                 "first_seen_ms": START_MS - 86_400_000, "diff": "{}"}, zone="Asia/Shanghai")]
    page = render_html(report_of([entry_of(figures, shanghai())], shanghai()))
    assert "2026-11-25 21:00:00 +08:00" in page and "2026-12-02 21:00:00 +08:00" in page  # window
    assert "2026-11-24 21:00:00 +08:00" in page  # the example's first sighting
    assert "Asia/Shanghai" in page
    assert re.findall(r"\d{2}:\d{2}:\d{2}(?:\.\d+)?Z", page) == []


def test_daylight_saving_shows_each_time_with_its_own_offset() -> None:
    summer_to_winter = Window(1_793_300_000_000 - 7 * 86_400_000, 1_793_300_000_000,
                              zone="Europe/Berlin")  # type: ignore[call-arg]
    report = report_of([], summer_to_winter)  # 2026-10-22 .. 2026-10-29: CEST, then CET from 25 October
    assert report["window"]["start_local"].endswith("+02:00") and report["window"]["end_local"].endswith("+01:00")


# --- charts ------------------------------------------------------------------------------------------------


def bar_widths(svg: str) -> list[float]:
    return [float(w) for w in re.findall(r'<rect class="bar" [^>]*width="([\d.]+)"', svg)]


def test_near_agreement_values_get_visibly_different_bars_each_with_its_figure() -> None:
    a = entry_of(healthy("manual", n=1000, with_shadow_run=995))
    b = entry_of(healthy("scheduled_node", n=1000, with_shadow_run=999))
    svg = agreement_chart([a, b])
    widths = bar_widths(svg)
    assert len(widths) == 6
    assert widths[3] - widths[0] >= 40  # 99.5 % and 99.9 % completeness: a difference the eye sees
    assert "99.50%" in svg and "99.90%" in svg
    assert "995 of 1,000" in svg and "999 of 1,000" in svg


def test_the_agreement_axis_says_where_it_starts() -> None:
    page = render_html(report_of([entry_of(healthy(n=1000, with_shadow_run=995))]))
    assert re.search(r"starts at 98%", page)


def test_a_ratio_of_zero_starts_the_axis_at_zero() -> None:
    svg = agreement_chart([entry_of(healthy(n=30, with_shadow_run=0))])
    assert ">0%</text>" in svg and bar_widths(svg)[0] == 1  # a hairline, never a negative width
    assert "0.00% · 0 of 30" in svg


def test_a_figure_just_below_its_threshold_never_reads_as_the_threshold() -> None:
    svg = agreement_chart([entry_of(healthy(n=100_000, with_shadow_run=98_999))])
    assert "98.999%" in svg and "99.00%</text>" not in svg.split('class="threshold"')[0]
    svg = agreement_chart([entry_of(healthy(n=100_000, with_shadow_run=99_999))])
    assert "99.999%" in svg  # not "100.00%"


def test_each_day_of_the_timeline_carries_its_total() -> None:
    day = END_MS // 86_400_000
    page = render_html(report_of([entry_of(healthy())], rows=[(day, "stuck", 11), (day, "exit_code", 1),
                                                              (day - 1, "stuck", 7)]))
    svg = page[page.index('id="mismatch-timeline"'):]
    svg = svg[:svg.index("</svg>")]
    assert re.findall(r'<text class="total"[^>]*>(\d+)</text>', svg) == ["7", "12"]


# --- the check ---------------------------------------------------------------------------------------------


def full_report() -> dict[str, Any]:
    figures = healthy()
    figures.examples = [example({"kind": "exit_code", "legacy_cron_id": 4, "run_id": None,
                                 "first_seen_ms": END_MS - 5000, "diff": VALUES_CHANGED}, zone="Asia/Shanghai")]
    return report_of([entry_of(figures, shanghai()), unobservable_entry("system", mode=None)], shanghai())


@pytest.mark.parametrize("breakage, problem", [
    (lambda d: d["origins"][0]["verdict"].update(state="fine"), "$.origins[0].verdict.state: unknown state"),
    (lambda d: d["origins"][0]["verdict"].pop("sentence"), "$.origins[0].verdict.sentence: missing"),
    (lambda d: d["origins"][0].update(ready_for_primary=False), "$.origins[0].verdict.state: 'ready' while"),
    (lambda d: d["origins"][0].update(seam=3), "$.origins[0].seam: wrong type int"),
    (lambda d: d.update(time_zone=None), "$.time_zone: wrong type"),
    (lambda d: d["window"].update(start_local=0), "$.window.start_local: wrong type int"),
    (lambda d: d["origins"][0]["figures"]["examples"][0].update(sides="2.x"),
     "$.origins[0].figures.examples[0].sides: wrong type str"),
    (lambda d: d["origins"][0]["figures"]["examples"][0]["sides"].update(shadow=[1]),
     "$.origins[0].figures.examples[0].sides.shadow: wrong type list"),
])
def test_the_check_covers_the_new_fields(breakage: Any, problem: str) -> None:
    report = copy.deepcopy(full_report())
    assert check_report(report) == []
    breakage(report)
    assert any(p.startswith(problem) for p in check_report(report)), check_report(report)


def test_a_report_written_before_these_fields_is_still_a_valid_version_1_document() -> None:
    report = json.loads(to_json(full_report()))
    for key in ("generated_at_local", "time_zone"):
        del report[key]
    for key in ("start_local", "end_local"):
        del report["window"][key]
    for origin in report["origins"]:
        del origin["verdict"], origin["seam"]
        for ex in origin["figures"]["examples"]:
            del ex["first_seen_local"], ex["last_seen_local"], ex["sides"]
    assert check_report(report) == []


def test_diff_sides_is_the_same_split_the_example_carries() -> None:
    assert diff_sides("exit_code", json.loads(VALUES_CHANGED)) == {"legacy": {"exit_code": 2},
                                                                   "shadow": {"exit_code": 1}, "context": {}}
