"""Gate logic: each gate passes and fails on its own, ratios need a minimum of data, thresholds come from env."""

from __future__ import annotations

import pytest

from projections.gates import (
    GATES,
    GateThresholds,
    OriginFigures,
    ThresholdError,
    Window,
    evaluate,
    failing,
    passes_all,
    weigh_open_mismatches,
)

WINDOW = Window(1_000_000, 2_000_000)
STRICT = GateThresholds(min_executions=20)


def healthy(**changes: object) -> OriginFigures:
    figures = OriginFigures("manual", executions_observed=100, with_shadow_run=100, terminal_pairs=100,
                            terminal_status_agree=100, exit_code_pairs=90, exit_code_agree=90)
    for name, value in changes.items():
        setattr(figures, name, value)
    return figures


def verdict(figures: OriginFigures, name: str, thresholds: GateThresholds = STRICT):  # type: ignore[no-untyped-def]
    return next(v for v in evaluate(figures, thresholds, WINDOW) if v.gate == name)


def test_healthy_figures_pass_every_gate_in_the_documented_order() -> None:
    verdicts = evaluate(healthy(), STRICT, WINDOW)
    assert [v.gate for v in verdicts] == list(GATES)
    assert passes_all(verdicts) and failing(verdicts) == []
    assert all(v.reason == "meets_threshold" for v in verdicts)


@pytest.mark.parametrize("name, changes, value", [
    ("completeness", {"with_shadow_run": 98}, 0.98),
    ("terminal_status_agreement", {"terminal_status_agree": 97}, 0.97),
    ("exit_code_agreement", {"exit_code_agree": 88}, round(88 / 90, 6)),
])
def test_a_ratio_below_its_threshold_fails_that_gate_alone(name: str, changes: dict[str, int], value: float) -> None:
    verdicts = evaluate(healthy(**changes), STRICT, WINDOW)
    assert failing(verdicts) == [name]
    failed = verdict(healthy(**changes), name)
    assert (failed.passed, failed.value, failed.threshold, failed.reason) == (False, value, 0.99, "below_threshold")


def test_a_ratio_exactly_at_the_threshold_passes() -> None:
    assert verdict(healthy(with_shadow_run=99), "completeness").passed


def test_fewer_executions_than_the_minimum_fail_every_ratio_gate_as_insufficient_data_without_a_value() -> None:
    few = OriginFigures("manual", executions_observed=3, with_shadow_run=3, terminal_pairs=3, terminal_status_agree=3,
                        exit_code_pairs=3, exit_code_agree=3)
    verdicts = evaluate(few, STRICT, WINDOW)
    assert failing(verdicts) == ["completeness", "terminal_status_agreement", "exit_code_agreement"]
    for v in verdicts[:3]:
        assert (v.value, v.reason) == (None, "insufficient_data")
    assert not passes_all(verdicts)


def test_enough_executions_but_too_few_terminal_pairs_is_still_insufficient_data() -> None:
    v = verdict(healthy(terminal_pairs=5, terminal_status_agree=5), "terminal_status_agreement")
    assert (v.passed, v.value, v.reason) == (False, None, "insufficient_data")


def test_an_unexplained_duplicate_fails_its_gate_and_a_higher_allowance_passes_it() -> None:
    v = verdict(healthy(duplicates=1), "no_unexplained_duplicates")
    assert (v.passed, v.value, v.threshold, v.reason) == (False, 1, 0, "duplicates_found")
    assert verdict(healthy(duplicates=1), "no_unexplained_duplicates", GateThresholds(max_duplicates=1)).passed


def test_a_stale_open_mismatch_fails_no_stale_mismatches_and_names_the_kinds() -> None:
    v = verdict(healthy(stale_mismatches=2), "no_stale_mismatches")
    assert (v.passed, v.value, v.reason) == (False, 2, "stale_mismatches_found")
    assert "stuck/orphan" in v.detail


def test_only_duplicates_and_stale_findings_count_against_the_gates_and_every_open_one_is_placed_once() -> None:
    figures = healthy(open_mismatches_by_kind={"duplicate": 2, "stuck": 3, "orphan": 1, "missing": 7,
                                               "exit_code": 1, "pid": 4, "compat.unmatched_callback": 2},
                      duplicates=2, stale_mismatches=1)
    w = weigh_open_mismatches(figures, STRICT)
    assert (w.total, w.against_gates, w.duplicates, w.stale, w.not_yet_stale) == (20, 3, 2, 1, 3)
    assert w.judged_afresh == {"exit_code": 1, "missing": 7}
    assert w.ungated == {"compat.unmatched_callback": 2, "pid": 4}
    assert w.stale_kinds == ("stuck", "orphan")
    assert w.total == (w.duplicates + w.stale + w.not_yet_stale + sum(w.judged_afresh.values())
                       + sum(w.ungated.values()))


def test_open_missing_findings_never_count_against_the_gates_unless_missing_is_made_a_stale_kind() -> None:
    figures = healthy(open_mismatches_by_kind={"missing": 108})
    assert weigh_open_mismatches(figures, STRICT).against_gates == 0
    figures.stale_mismatches = 100  # missing findings first seen before the window
    stale_missing = weigh_open_mismatches(figures, GateThresholds(stale_mismatch_kinds=("missing",)))
    assert (stale_missing.stale, stale_missing.not_yet_stale, stale_missing.judged_afresh) == (100, 8, {})


def test_a_duplicate_made_a_stale_kind_is_never_counted_twice_beyond_the_other_stale_findings() -> None:
    both = GateThresholds(stale_mismatch_kinds=("stuck", "duplicate"))
    figures = healthy(open_mismatches_by_kind={"duplicate": 3, "stuck": 1}, duplicates=3, stale_mismatches=4)
    w = weigh_open_mismatches(figures, both)
    assert (w.total, w.against_gates, w.duplicates, w.stale, w.not_yet_stale) == (4, 4, 3, 1, 0)


def test_no_verdicts_never_counts_as_passing() -> None:
    assert passes_all([]) is False


def test_thresholds_default_to_the_published_values() -> None:
    assert GateThresholds.from_env({}) == GateThresholds(20, 0.99, 0.99, 0.99, 0, ("stuck", "orphan"))


def test_thresholds_are_read_from_bridge_gate_variables() -> None:
    thresholds = GateThresholds.from_env({
        "BRIDGE_GATE_MIN_EXECUTIONS": "50", "BRIDGE_GATE_COMPLETENESS": "0.995",
        "BRIDGE_GATE_STATUS_AGREEMENT": "1", "BRIDGE_GATE_EXIT_CODE_AGREEMENT": "0.9",
        "BRIDGE_GATE_MAX_DUPLICATES": "2", "BRIDGE_GATE_STALE_MISMATCH_KINDS": "stuck, missing,stuck"})
    assert thresholds == GateThresholds(50, 0.995, 1.0, 0.9, 2, ("stuck", "missing"))
    assert GateThresholds.from_env({"BRIDGE_GATE_STALE_MISMATCH_KINDS": "none"}).stale_mismatch_kinds == ()


@pytest.mark.parametrize("variable, value", [
    ("BRIDGE_GATE_MIN_EXECUTIONS", "many"), ("BRIDGE_GATE_MIN_EXECUTIONS", "0"),
    ("BRIDGE_GATE_COMPLETENESS", "99%"), ("BRIDGE_GATE_COMPLETENESS", "1.5"),
    ("BRIDGE_GATE_STATUS_AGREEMENT", "nan"), ("BRIDGE_GATE_EXIT_CODE_AGREEMENT", "-0.1"),
    ("BRIDGE_GATE_MAX_DUPLICATES", "-1"), ("BRIDGE_GATE_STALE_MISMATCH_KINDS", "stuck;orphan"),
])
def test_a_bad_threshold_raises_a_value_error_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable) as caught:
        GateThresholds.from_env({variable: value})
    assert isinstance(caught.value, ThresholdError) and caught.value.variable == variable
