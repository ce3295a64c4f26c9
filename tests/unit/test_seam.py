"""The seam rule: most recent executions of an origin missing from the shadow store means bypass."""

from __future__ import annotations

from bridge.service.seam import OriginCoverage
from projections.seam import BYPASS_MESSAGE, bypass_findings


def test_an_origin_whose_executions_mostly_never_arrived_is_a_bypass_while_others_are_recorded() -> None:
    findings = bypass_findings([OriginCoverage("manual", missing=9, recorded=1),
                                OriginCoverage("scheduled_system", missing=1, recorded=40)])

    assert [f.origin for f in findings] == ["manual"]
    assert BYPASS_MESSAGE in findings[0].message and "9 of 10" in findings[0].message
    assert "config.sh" in findings[0].as_dict()["fix"]


def test_a_few_missed_executions_or_a_minority_are_mismatches_not_a_seam_problem() -> None:
    assert bypass_findings([OriginCoverage("manual", missing=2, recorded=0)]) == []
    assert bypass_findings([OriginCoverage("boot", missing=10, recorded=11)]) == []


def test_nothing_recorded_at_all_is_a_bypass_too() -> None:
    [finding] = bypass_findings([OriginCoverage("scheduled_node", missing=5, recorded=0)])
    assert (finding.missing, finding.recorded) == (5, 0)
