"""run_transition_total and run_event_append_total count what committed, once: a write the store runs again
(SQLite busy) or a write that fails at commit counts nothing twice and nothing that did not land."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from bridge.domain.errors import InvalidRunTransitionError, StoreBusyError
from bridge.domain.model import RunStatus
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.storage.memory import InMemoryUnitOfWork
from tests.contract.lifecycle import create, move

T = TypeVar("T")
TRANSITIONS = "ql_bridge_run_transition_total"
EVENTS = "ql_bridge_run_event_append_total"


class RetriedUnitOfWork(InMemoryUnitOfWork):
    """Runs each write's work once more than it commits, as SqlUnitOfWork does when SQLite says busy."""

    def write(self, work: Callable[[Any], T]) -> T:
        try:
            super().write(lambda store: (work(store), _raise_busy()))
        except StoreBusyError:
            pass
        return super().write(work)


class FailingCommitUnitOfWork(InMemoryUnitOfWork):
    """Runs the work, then fails as a commit the store refused would."""

    fail = False

    def write(self, work: Callable[[Any], T]) -> T:
        result = super().write(work)
        if self.fail:
            _raise_busy()
        return result


def _raise_busy() -> None:
    raise StoreBusyError("the bridge store stayed locked past the busy-retry budget", attempts=1)


def service_over(uow: InMemoryUnitOfWork) -> tuple[RunService, BridgeMetrics]:
    metrics = BridgeMetrics()
    return RunService(uow, clock=SystemClock(), metrics=metrics), metrics


def moved(metrics: BridgeMetrics, from_: str, to: str, result: str = "ok") -> float:
    return metrics.value(TRANSITIONS, **{"from": from_, "to": to, "result": result})


def test_a_transition_is_counted_once() -> None:
    service, metrics = service_over(InMemoryUnitOfWork())

    move(service, create(service), RunStatus.QUEUED)

    assert moved(metrics, "created", "queued") == 1
    assert metrics.value(EVENTS, type="run.queued") == 1


def test_a_write_run_again_after_a_busy_store_counts_its_events_and_transitions_once() -> None:
    service, metrics = service_over(RetriedUnitOfWork())

    move(service, create(service), RunStatus.QUEUED)

    assert metrics.value(EVENTS, type="run.created") == 1
    assert moved(metrics, "created", "queued") == 1


def test_a_transition_whose_commit_failed_is_not_counted() -> None:
    uow = FailingCommitUnitOfWork()
    service, metrics = service_over(uow)
    run = create(service)
    uow.fail = True

    with pytest.raises(StoreBusyError):
        move(service, run, RunStatus.QUEUED)

    assert moved(metrics, "created", "queued") == 0


def test_a_refused_transition_is_counted_as_invalid() -> None:
    service, metrics = service_over(InMemoryUnitOfWork())

    with pytest.raises(InvalidRunTransitionError):
        move(service, create(service), RunStatus.SUCCEEDED)

    assert moved(metrics, "created", "succeeded", "invalid") == 1
    assert moved(metrics, "created", "succeeded") == 0


def test_an_end_without_a_reported_outcome_is_counted_under_its_own_bounded_labels() -> None:
    from bridge.domain.events import SHELL, EventType, RunEvent

    metrics = BridgeMetrics()
    ended = [RunEvent(id="e1", run_id="r1", sequence=9, type=EventType.ATTEMPT_ENDED, actor_type=SHELL.type,
                      created_at_ms=1, payload={"from": "running", "to": "ended"}),
             RunEvent(id="e2", run_id="r1", sequence=10, type=EventType.RUN_ENDED, actor_type=SHELL.type,
                      created_at_ms=1, payload={"from": "running", "to": "ended"})]
    metrics.events_appended(ended)
    assert moved(metrics, "running", "ended") == 1 and moved(metrics, "running", "other") == 0
    assert metrics.value(EVENTS, type="run.ended") == 1 and metrics.value(EVENTS, type="attempt.ended") == 1
