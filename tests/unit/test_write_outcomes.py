"""WriteOutcomes: the rule that calls the store writable or not, on a clock the test moves."""

from __future__ import annotations

import threading

from bridge.storage.unit_of_work import WriteOutcomes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def outcomes(*results: str | None, keep: int = 32) -> tuple[WriteOutcomes, Clock]:
    """One outcome per second: None is a commit, a string is the failure's code."""
    clock = Clock()
    writes = WriteOutcomes(keep=keep, clock=clock)
    for code in results:
        writes.succeeded() if code is None else writes.failed(code)
        clock.now += 1
    return writes, clock


def test_without_writes_nothing_is_known() -> None:
    writes, _ = outcomes()

    summary = writes.summary(60)
    assert summary.writable is None and summary.last_age_s is None


def test_a_failure_after_commits_makes_the_store_unwritable_and_names_its_code() -> None:
    writes, _ = outcomes(None, None, "STORE_UNAVAILABLE")

    summary = writes.summary(60)
    assert summary.writable is False
    assert (summary.successes, summary.failures, summary.last_error) == (2, 1, "STORE_UNAVAILABLE")
    assert summary.last_age_s == 1.0


def test_a_commit_after_a_lone_failure_is_a_recovered_blip() -> None:
    writes, _ = outcomes("STORE_BUSY", None)

    assert writes.summary(60).writable is True


def test_an_empty_commit_between_failures_does_not_call_a_full_disk_writable() -> None:
    # A duplicate callback writes nothing, so its commit succeeds even on a full disk.
    writes, _ = outcomes("STORE_UNAVAILABLE", "STORE_UNAVAILABLE", None)

    assert writes.summary(60).writable is False


def test_outcomes_older_than_the_window_say_nothing() -> None:
    writes, clock = outcomes("STORE_UNAVAILABLE", "STORE_UNAVAILABLE", None, None)
    clock.now += 2.5  # the failures are now 6.5 and 5.5 seconds old, the commits 4.5 and 3.5

    assert writes.summary(5).writable is True
    assert (writes.summary(5).successes, writes.summary(5).failures) == (2, 0)
    assert writes.summary(3).writable is None


def test_only_the_last_keep_outcomes_are_kept() -> None:
    writes, _ = outcomes(*["STORE_UNAVAILABLE"] * 5, None, None, keep=2)

    assert (writes.summary(60).successes, writes.summary(60).failures) == (2, 0)


def test_threads_recording_at_once_lose_nothing() -> None:
    writes = WriteOutcomes(keep=10_000)

    def record() -> None:
        for _ in range(1000):
            writes.succeeded()
            writes.failed("STORE_BUSY")

    threads = [threading.Thread(target=record) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    summary = writes.summary(3600)
    assert (summary.successes, summary.failures) == (4000, 4000)
