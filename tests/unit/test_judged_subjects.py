"""JudgedSubjects: what a whole pass judged again (may resolve) and what it can never judge again (expires)."""

from __future__ import annotations

from projections.reconcile import CRON_DELETED, LEGACY_ROW_GONE, PAST_LOOKBACK, JudgedSubjects

OPEN = [
    (1, "exit_code", 5, "exit_code:5:i10"),  # a 2.x row read in the lookback and compared
    (2, "missing", 5, "missing:5:i11"),  # a 2.x row read, older than the lookback
    (3, "missing", 5, "missing:5:i12"),  # a 2.x row the pass never read
    (4, "orphan", 5, "orphan:5:rOLD"),  # a Run created before the lookback
    (5, "orphan", 5, "orphan:5:rNEW"),  # a Run in the lookback, not matched: still an orphan, stays open
    (6, "active_state", 6, "active_state:6:rX"),  # a cron 2.x deleted
    (7, "pid", 7, "pid:7:rY"),  # a cron the pass never visited: no Run of it in the lookback
    (8, "active_state", 8, "active_state:8:rZ"),  # a cron visited, too recent to compare: stays open
]


def test_what_a_whole_pass_can_no_longer_judge_expires_with_its_reason_and_what_it_judged_never_does() -> None:
    judged = JudgedSubjects(OPEN)
    judged.row_read(10, past_lookback=False)
    judged.instance(10)
    judged.row_read(11, past_lookback=True)
    judged.cron_visited(6, exists=False)
    judged.cron_visited(8, exists=True)
    judged.cron(8, compared=False)

    assert judged.ids == [1]
    assert judged.open_runs == ["NEW", "OLD"]  # cron kinds are about their cron, whatever Run they name
    assert judged.unjudgeable(runs_past_lookback=["OLD"]) == {
        2: PAST_LOOKBACK, 3: LEGACY_ROW_GONE, 4: PAST_LOOKBACK, 6: CRON_DELETED, 7: PAST_LOOKBACK}
