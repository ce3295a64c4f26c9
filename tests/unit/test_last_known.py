"""LastKnown: a failed refresh keeps the last value in force, is counted each time and logged once per episode."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from bridge.domain.errors import StoreUnavailableError
from bridge.service.last_known import LastKnown, inline
from tests.support.waiting import wait_for


class Source:
    """A store read that answers ``value`` or raises ``error`` when one is set."""

    def __init__(self, value: dict[str, str]) -> None:
        self.value = value
        self.error: Exception | None = None
        self.reads = 0

    def __call__(self) -> dict[str, str]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return dict(self.value)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def source() -> Source:
    return Source({"manual": "shadow"})


@pytest.fixture
def clock() -> Clock:
    return Clock()


def cache(source: Source, clock: Clock, failures: list[str] | None = None) -> LastKnown[dict[str, str]]:
    sink = failures if failures is not None else []
    # Refreshed inline, so that each get() after the clock moved shows that refresh's outcome at once.
    return LastKnown(source, what="flags", fallback={}, ttl_s=1.0, max_stale_s=60.0, on_failure=sink.append,
                     clock=clock, refresh_in=inline)


def test_a_failed_refresh_keeps_the_last_value_in_force(source: Source, clock: Clock) -> None:
    failures: list[str] = []
    kept = cache(source, clock, failures)
    assert kept.get() == {"manual": "shadow"}
    source.error = StoreUnavailableError("the bridge store is unavailable")
    for _ in range(5):
        clock.now += 1.0
        assert kept.get() == {"manual": "shadow"}
    assert failures == ["STORE_UNAVAILABLE"] * 5 and kept.failing


def test_before_any_read_succeeded_the_fallback_is_used(source: Source, clock: Clock) -> None:
    source.error = OSError("no store yet")
    kept = cache(source, clock)
    assert kept.get() == {} and kept.age_s() is None and kept.stale


def test_the_store_is_read_at_most_once_per_ttl(source: Source, clock: Clock) -> None:
    kept = cache(source, clock)
    kept.get()
    kept.get()
    clock.now += 0.5
    kept.get()
    assert source.reads == 1
    clock.now += 0.5
    source.value = {"manual": "primary"}
    assert kept.get() == {"manual": "primary"} and source.reads == 2


def test_a_failing_read_is_retried_once_per_ttl_not_on_every_call(source: Source, clock: Clock) -> None:
    kept = cache(source, clock)
    kept.get()
    source.error = OSError("gone")
    clock.now += 1.0
    for _ in range(10):
        kept.get()
    assert source.reads == 2


def test_the_value_turns_stale_past_the_bound_and_stays_in_force(source: Source, clock: Clock) -> None:
    kept = cache(source, clock)
    kept.get()
    source.error = OSError("gone")
    clock.now += 30
    assert kept.get() == {"manual": "shadow"} and kept.failing and not kept.stale
    clock.now += 31
    assert kept.get() == {"manual": "shadow"} and kept.stale and kept.age_s() == pytest.approx(61)
    source.error = None
    clock.now += 1
    kept.get()
    assert not kept.failing and not kept.stale and kept.age_s() == 0


def test_one_episode_logs_its_start_its_staleness_and_its_end_once_each(
        source: Source, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bridge.last_known")
    kept = cache(source, clock)
    kept.get()
    source.error = StoreUnavailableError("postgresql://user:secret@db/x is down")
    for _ in range(100):
        clock.now += 1
        kept.get()
    source.error = None
    clock.now += 1
    kept.get()
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "flags unreadable (STORE_UNAVAILABLE): keeping the last read in force",
        "flags still unreadable (STORE_UNAVAILABLE) after 61 s: the last read stays in force; readiness reports "
        "it stale until a read succeeds",
        "flags readable again after 100 failed reads",
    ]
    assert not any("secret" in m for m in messages)


def test_a_value_put_first_hand_is_in_force_until_the_next_read(source: Source, clock: Clock) -> None:
    kept = cache(source, clock)
    kept.get()
    kept.put({"manual": "primary"})
    clock.now += 0.5
    assert kept.get() == {"manual": "primary"} and source.reads == 1
    clock.now += 0.5
    assert kept.get() == {"manual": "shadow"} and source.reads == 2


class SilentSource(Source):
    """A store read that, once ``silent`` is set, does not answer until ``answer`` is set (a store gone quiet)."""

    def __init__(self, value: dict[str, str]) -> None:
        super().__init__(value)
        self.silent = threading.Event()
        self.answer = threading.Event()
        self.waiting = threading.Semaphore(0)  # released each time a read starts waiting

    def __call__(self) -> dict[str, str]:
        if self.silent.is_set():
            self.waiting.release()
            self.answer.wait(10)
        return super().__call__()


def test_a_store_that_stops_answering_never_holds_a_reader_and_only_one_refresh_waits_on_it(clock: Clock) -> None:
    source = SilentSource({"manual": "shadow"})
    kept = LastKnown(source, what="flags", fallback={}, ttl_s=1.0, clock=clock)
    assert source.reads == 1  # read once when built, before any caller
    source.silent.set()
    source.value = {"manual": "primary"}
    try:
        answers = []
        for _ in range(50):
            clock.now += 1.0
            started = time.monotonic()
            answers.append(kept.get())
            assert time.monotonic() - started < 0.5
        assert source.waiting.acquire(timeout=5) and kept.refreshing
        assert not source.waiting.acquire(timeout=0.2)  # the one refresh still waits; no second one began
        assert answers == [{"manual": "shadow"}] * 50
    finally:
        source.answer.set()
    assert wait_for(lambda: not kept.refreshing, 5.0)
    clock.now += 1.0
    assert kept.get() == {"manual": "primary"}  # what the refresh read once the store answered


def test_a_value_kept_fresh_is_reread_without_any_reader(source: Source) -> None:
    kept = LastKnown(source, what="flags", fallback={}, ttl_s=0.05)
    stop = kept.keep_fresh(0.02)
    try:
        source.value = {"manual": "primary"}
        assert wait_for(lambda: source.reads >= 3, 5.0)  # read again and again with nobody calling get()
        assert wait_for(lambda: kept.get() == {"manual": "primary"}, 5.0)
    finally:
        stop()
