"""What a write lane executes: plain, frozen commands made of values, never closures.

A callback 2.x accepted becomes one command per cron id before it reaches a lane, so the same command can be
executed at once, or kept and executed later with the same result (its times are the callback's own, its
dedupe and idempotency keys come from its facts). ``to_json`` / ``from_json`` give each command one stable JSON
form. ``ReadOpenRuns`` and ``ReadEndOwner`` are the queries a lane runs (an end's open Runs read while 2.x
answers, and primary mode's owner of an end, read within the budget): hints, never facts, never kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeAlias

from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.ports import TaskSnapshot


@dataclass(frozen=True, slots=True)
class RecordStart:
    """A start 2.x accepted, with the context its Run is accepted under (origin, mode, task revision)."""

    facts: CallbackFacts
    context: ExecutionContext
    kind: ClassVar[str] = "record_start"

    @property
    def cron_id(self) -> int:
        return self.facts.cron_id


@dataclass(frozen=True, slots=True)
class RecordEnd:
    """An end 2.x accepted. ``begin_s`` is the callback's begin time in 2.x's whole seconds, the evidence a
    back-filled Run's origin is inferred from. ``bridge_owned``: the end of an execution the bridge answered
    (primary): it never waits for a stop's evidence and never back-fills."""

    facts: CallbackFacts
    begin_s: int | None
    bridge_owned: bool = False
    kind: ClassVar[str] = "record_end"

    @property
    def cron_id(self) -> int:
        return self.facts.cron_id


@dataclass(frozen=True, slots=True)
class ApplyStop:
    """2.x accepted `PUT /crons/stop` for this cron, which reached the bridge at ``received_at_ms``."""

    cron_id: int
    received_at_ms: int
    kind: ClassVar[str] = "apply_stop"


@dataclass(frozen=True, slots=True)
class ApplyInstanceStop:
    """2.x's stopInstance answered code 200. ``cron_id`` is the path's :id (the lane it runs in, the stop it
    settles); the instance row names the real cron."""

    instance_id: int
    cron_id: int
    received_at_ms: int
    kind: ClassVar[str] = "apply_instance_stop"


@dataclass(frozen=True, slots=True)
class ReadOpenRuns:
    """The cron's open Runs, read ahead of its end's write in the same lane."""

    cron_id: int
    kind: ClassVar[str] = "read_open_runs"


@dataclass(frozen=True, slots=True)
class ReadEndOwner:
    """Who owns the one open Run an end would close (primary mode decides on it before the forward)."""

    facts: CallbackFacts
    kind: ClassVar[str] = "read_end_owner"

    @property
    def cron_id(self) -> int:
        return self.facts.cron_id


FactCommand: TypeAlias = RecordStart | RecordEnd | ApplyStop | ApplyInstanceStop
LaneCommand: TypeAlias = FactCommand | ReadOpenRuns | ReadEndOwner


def to_json(command: FactCommand) -> dict[str, Any]:
    """The command as JSON-ready values, tagged with its kind."""
    return {"kind": command.kind, **asdict(command)}


def from_json(data: dict[str, Any]) -> FactCommand:
    """The command ``to_json`` gave. Raises ValueError for an unknown kind, KeyError or TypeError for a document
    that is not one."""
    fields = {key: value for key, value in data.items() if key != "kind"}
    kind = data.get("kind")
    if kind == RecordStart.kind:
        return RecordStart(_facts(fields["facts"]), _context(fields["context"]))
    if kind == RecordEnd.kind:
        return RecordEnd(_facts(fields["facts"]), fields["begin_s"], fields["bridge_owned"])
    if kind == ApplyStop.kind:
        return ApplyStop(**fields)
    if kind == ApplyInstanceStop.kind:
        return ApplyInstanceStop(**fields)
    raise ValueError(f"not a lane command: {kind!r}")


def _facts(data: dict[str, Any]) -> CallbackFacts:
    return CallbackFacts(**data)


def _context(data: dict[str, Any]) -> ExecutionContext:
    snapshot = data.get("snapshot")
    return ExecutionContext(**{**data, "snapshot": TaskSnapshot(**snapshot) if snapshot is not None else None})
