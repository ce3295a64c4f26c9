"""Pending ends: an end callback that may be a stop's (a signal exit, the shell's trap, no exit code before v2.21)
kept while 2.x's evidence of a stop comes in.

A signal exit (128 + N) is no proof of a stop. The end is kept (``PendingEnd``) for a bounded window, and its
Run is then closed as decided (``EndVerdict``): cancelled with the stop's source, or by its exit code. The
store of kept ends is ``PendingEndStore`` (bridge.storage.pending_ends); bridge.jobs.stop_decisions decides.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.domain.events import SHELL, STOP_CODES, Actor, ErrorCode
from bridge.service.callback_facts import CallbackFacts


@dataclass(frozen=True, slots=True)
class EndVerdict:
    """How a pending end closes its Run: ``stop`` None closes it by its exit code, a stop code cancels it.

    The code is the Run's and the Attempt's error_code and the Run's cancel_reason; ``evidence`` says what
    decided it (it goes into the event payloads).
    """

    stop: ErrorCode | None
    evidence: str
    actor: Actor = SHELL
    requested_at_ms: int | None = None  # when the stop was asked for, if the bridge saw it asked

    def __post_init__(self) -> None:
        if self.stop is not None and self.stop not in STOP_CODES:
            raise ValueError(f"{self.stop} is not a stop code")


@dataclass(frozen=True, slots=True)
class PendingEnd:
    """An end callback kept during the stop-decision window: the observed end and the Run it closes."""

    facts: CallbackFacts
    run_id: str
    run_created_at_ms: int
    due_at_ms: int
    id: int | None = None
    attempts: int = 0

    @property
    def dedupe_key(self) -> str:
        return f"{self.facts.cron_id}:{self.facts.end_key}"


class PendingEndStore(Protocol):
    """The pending ends (bridge.storage.pending_ends); each call is one short transaction of its own."""

    def add(self, end: PendingEnd) -> bool:
        """Keep the end unless the same end is kept already; True when it was added."""
        ...

    def due(self, now_ms: int, limit: int) -> list[PendingEnd]:
        """Ends whose window is over, the longest due first."""
        ...

    def for_cron(self, cron_id: int, received_since_ms: int) -> list[PendingEnd]:
        """The cron's pending ends that reached the bridge at or after ``received_since_ms``."""
        ...

    def waiting_runs(self, run_ids: Collection[str]) -> set[str]:
        """Which of these Runs have an end kept."""
        ...

    def postpone(self, end_id: int, due_at_ms: int) -> None:
        """Decide this end later (counts the attempt)."""
        ...

    def remove(self, end_ids: Sequence[int]) -> None: ...
