"""The opening ladder: a Run and its Attempt 1 taken up to running, one legal step at a time.

A 2.x execution reaches the bridge already running, so the shadow path (bridge/service/shadow.py) and the
import of 2.x's history (bridge/jobs/import_legacy/) open its Run through every step a Run of its own would
have taken: created, queued, dispatching (Attempt 1 claimed, starting, running), running. The steps are not
written out here: they are the shortest paths of RUN_TRANSITIONS and ATTEMPT_TRANSITIONS (bridge/domain/model.py)
from a new Run's and a new Attempt's status to running, so the ladder follows the tables when they change.
Pure, like RunChange: the steps land in the caller's RunChange, nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from bridge.domain.aggregate import RunChange
from bridge.domain.model import ATTEMPT_TRANSITIONS, RUN_TRANSITIONS, AttemptStatus, RunAttempt, RunStatus

S = TypeVar("S", bound=Enum)
_SYNTH = {"synthesized": True}


def shortest_path(transitions: Mapping[S, frozenset[S]], start: S, goal: S) -> tuple[S, ...]:
    """The statuses after ``start`` on the shortest way to ``goal`` through ``transitions``, ``goal`` last.

    Breadth first, targets in the enum's declaration order, so a tie is broken the same way in every process
    (a frozenset's order follows string hashes, which differ from one process to the next). Raises
    ValueError when ``goal`` cannot be reached.
    """
    if goal is start:
        return ()
    order = {status: i for i, status in enumerate(type(start))}
    came_from: dict[S, S] = {}
    frontier, seen = [start], {start}
    while frontier and goal not in seen:
        following = []
        for status in frontier:
            for target in sorted(transitions[status], key=order.__getitem__):
                if target not in seen:
                    seen.add(target)
                    came_from[target] = status
                    following.append(target)
        frontier = following
    if goal not in seen:
        raise ValueError(f"{goal} cannot be reached from {start}")
    path = [goal]
    while path[-1] in came_from and came_from[path[-1]] is not start:
        path.append(came_from[path[-1]])
    return tuple(reversed(path))


# created -> queued -> dispatching -> running, and claimed -> starting -> running, read off the tables.
RUN_OPENING: tuple[RunStatus, ...] = shortest_path(RUN_TRANSITIONS, RunStatus.CREATED, RunStatus.RUNNING)
ATTEMPT_OPENING: tuple[AttemptStatus, ...] = shortest_path(ATTEMPT_TRANSITIONS, AttemptStatus.CLAIMED,
                                                           AttemptStatus.RUNNING)


def _rest(path: tuple[S, ...], start: S, current: S) -> tuple[S, ...]:
    """The steps of ``path`` (which begins after ``start``) still ahead of ``current``; none off the path."""
    if current is start:
        return path
    return path[path.index(current) + 1:] if current in path else ()


def open_to_running(change: RunChange, attempt: RunAttempt, *, started_at_ms: int | None) -> RunAttempt:
    """Take a new Run (status created, the change begun by RunChange.create) and its new Attempt 1 (claimed)
    up to running; returns the Attempt as it now is.

    The Run goes up the ladder to the step before running (queued at its own created_at_ms: an opened Run
    was queued the moment it was created); Attempt 1 is claimed there, with its pid and log reference in the
    payload, and goes up to running; the Run follows it to running. Both start at ``started_at_ms`` (None
    leaves the start unknown). When the Run is synthesized every step's payload says so. Raises ValueError
    when the Run is not new or the Attempt not claimed, and what RunChange raises for an illegal step.
    """
    if change.run.status is not RunStatus.CREATED or attempt.status is not AttemptStatus.CLAIMED:
        raise ValueError("open_to_running opens a created Run with a claimed Attempt")
    mark = _SYNTH if change.run.synthesized else {}
    *to_claim, running = RUN_OPENING
    change.set_run_fields(queued_at_ms=change.run.created_at_ms)
    for step in to_claim:
        change.move_run(step, payload=mark)
    attempt = change.add_attempt(attempt, payload={"pid": attempt.pid, "log_ref": attempt.log_artifact_id, **mark})
    *to_start, attempt_running = ATTEMPT_OPENING
    for attempt_step in to_start:
        attempt = change.move_attempt(attempt, attempt_step, payload=mark)
    attempt = change.move_attempt(attempt, attempt_running, payload=mark, started_at_ms=started_at_ms)
    change.move_run(running, payload=mark, started_at_ms=started_at_ms)
    return attempt


def bring_run_to_running(change: RunChange, *, payload: Mapping[str, Any]) -> None:
    """The opening steps the Run has not taken yet (each with ``payload``); none when it is off the ladder
    (running already, or waiting, lost, ended)."""
    for step in _rest(RUN_OPENING, RunStatus.CREATED, change.run.status):
        change.move_run(step, payload=payload)


def bring_attempt_to_running(change: RunChange, attempt: RunAttempt, *,
                             payload: Mapping[str, Any]) -> RunAttempt:
    """The opening steps the Attempt has not taken yet (each with ``payload``); returns it as it now is."""
    for step in _rest(ATTEMPT_OPENING, AttemptStatus.CLAIMED, attempt.status):
        attempt = change.move_attempt(attempt, step, payload=payload)
    return attempt
