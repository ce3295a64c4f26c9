"""What the interceptor prepares before a callback is forwarded, and hands back to itself after 2.x answered.

A status callback keeps what only the moment before the forward can give: the cron's Crontabs row as 2.x had it
(2.x overwrites it on receipt), the origin inferred from it, the shell's process identity, and for an end on
PostgreSQL the read of its open Runs started while 2.x answers. A stop keeps its crons and when it arrived.
``LocalAnswer`` (primary mode) means the bridge answered and nothing is forwarded.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeAlias

from bridge.callbacks.answers import LocalAnswer
from legacy_adapters.callbacks import StatusCallback
from legacy_adapters.origin import OriginDecision
from legacy_adapters.records import LegacyCron
from legacy_adapters.shell_report import NOTHING, ShellReport


@dataclass(frozen=True)
class PreparedStop:
    cron_ids: tuple[int, ...]
    received_at_ms: int


@dataclass(frozen=True)
class PreparedInstanceStop:
    instance_id: int
    cron_ids: tuple[int, ...]  # the path's :id, for the lane; the instance row names the real cron
    received_at_ms: int


@dataclass(frozen=True)
class PreparedCallback:
    callback: StatusCallback
    cron_ids: tuple[int, ...]
    received_at_ms: int
    crons_before: dict[int, LegacyCron | None] = field(default_factory=dict)
    shell_handle: str | None = None
    unreadable: frozenset[int] = frozenset()  # ids whose Crontabs row could not be read (2.x held its lock)
    read_ahead: Future[object] | None = None  # an end's open Runs, read during the forward
    origins: dict[int, OriginDecision] = field(default_factory=dict)  # a start's, per cron 2.x knows
    handed_to_legacy: str | None = None  # a primary start the bridge could not be the record of: why 2.x is
    shell: ShellReport = NOTHING  # what the seam block added beside 2.x's body (an end's exit code, its trap)


Forwarded: TypeAlias = PreparedCallback | PreparedStop | PreparedInstanceStop  # watched on its way to 2.x
Prepared: TypeAlias = Forwarded | LocalAnswer
