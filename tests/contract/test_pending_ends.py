"""SqlPendingEnds on each store: a repeated end is kept once, due ends come oldest first, and the lookups the
stop path, the reconciler and recovery make."""

from __future__ import annotations

from dataclasses import replace

from bridge.service.callback_facts import CallbackFacts
from bridge.service.pending_ends import PendingEnd
from bridge.storage.pending_ends import SqlPendingEnds
from tests.conftest import Backend


def end(cron: int = 1, pid: int = 41, exit_code: int = 143, received: int = 1_000, due: int = 2_000,
        run_id: str = "run-a") -> PendingEnd:
    facts = CallbackFacts(cron_id=cron, pid=pid, log_ref="abc", started_at_ms=500, duration_ms=3_000,
                          exit_code=exit_code, received_at_ms=received)
    return PendingEnd(facts, run_id, run_created_at_ms=510, due_at_ms=due)


def test_an_end_is_kept_once_with_everything_needed_to_decide_it(sql_backend: Backend) -> None:
    pending = SqlPendingEnds(sql_backend.engine)  # type: ignore[arg-type]
    assert pending.add(end()) is True
    assert pending.add(end(received=1_001)) is False  # the same end again (a repeated callback)

    (kept,) = pending.due(2_000, 10)
    assert (kept.facts, kept.run_id, kept.run_created_at_ms, kept.due_at_ms, kept.attempts) == (
        end().facts, "run-a", 510, 2_000, 0)
    assert pending.due(1_999, 10) == []


def test_due_ends_come_longest_due_first_and_postponing_counts(sql_backend: Backend) -> None:
    pending = SqlPendingEnds(sql_backend.engine)  # type: ignore[arg-type]
    pending.add(end(pid=1, due=3_000, run_id="r1"))
    pending.add(end(pid=2, due=1_000, run_id="r2"))
    pending.add(end(pid=3, due=9_000, run_id="r3"))
    assert [e.run_id for e in pending.due(5_000, 10)] == ["r2", "r1"]
    assert [e.run_id for e in pending.due(5_000, 1)] == ["r2"]

    first = pending.due(5_000, 1)[0]
    pending.postpone(first.id or 0, 8_000)
    assert [e.run_id for e in pending.due(5_000, 10)] == ["r1"]
    assert [(e.run_id, e.attempts) for e in pending.due(8_000, 10)] == [("r1", 0), ("r2", 1)]


def test_lookups_by_cron_and_by_run_and_removal(sql_backend: Backend) -> None:
    pending = SqlPendingEnds(sql_backend.engine)  # type: ignore[arg-type]
    pending.add(end(cron=1, pid=1, received=1_000, run_id="r1"))
    pending.add(end(cron=1, pid=2, received=2_000, run_id="r2"))
    pending.add(end(cron=2, pid=3, received=3_000, run_id="r3"))

    assert [e.run_id for e in pending.for_cron(1, 0)] == ["r1", "r2"]
    assert [e.run_id for e in pending.for_cron(1, 2_000)] == ["r2"]
    assert pending.waiting_runs(["r1", "r3", "nope"]) == {"r1", "r3"} and pending.waiting_runs([]) == set()

    pending.remove([e.id or 0 for e in pending.for_cron(1, 0)])
    pending.remove([])
    assert [e.run_id for e in pending.due(10**12, 10)] == ["r3"]


def test_an_exit_code_of_any_size_2x_accepts_is_kept(sql_backend: Backend) -> None:
    pending = SqlPendingEnds(sql_backend.engine)  # type: ignore[arg-type]
    pending.add(end(exit_code=2**53 - 1))
    assert pending.due(10**12, 1)[0].facts.exit_code == 2**53 - 1


def test_an_end_with_no_exit_code_and_one_the_trap_sent_are_kept_as_given(sql_backend: Backend) -> None:
    """Before v2.21 an end carries no exit code, and the seam block may say the shell's trap sent it."""
    pending = SqlPendingEnds(sql_backend.engine)  # type: ignore[arg-type]
    silent = end(pid=1, run_id="r1")
    silent = PendingEnd(replace(silent.facts, exit_code=None), "r1", 510, 2_000)
    trapped = end(pid=2, run_id="r2")
    trapped = PendingEnd(replace(trapped.facts, exit_code=None, trapped=True), "r2", 510, 2_000)
    assert pending.add(silent) and pending.add(trapped)
    assert pending.add(trapped) is False  # still one key per end
    kept = {e.run_id: e.facts for e in pending.due(2_000, 10)}
    assert kept == {"r1": silent.facts, "r2": trapped.facts}
