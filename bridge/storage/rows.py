"""The row mappers of the Run store: a Run, a RunAttempt and a RunEvent to and from their table rows.

One mapper a table and direction, shared by every write (SqlRunStore, the StepRun repository) and read
(the queries) of those rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from bridge.domain.events import ActorType, EventType, RunEvent
from bridge.domain.model import AttemptStatus, Origin, Owner, Run, RunAttempt, RunMode, RunStatus, member

RUN_FIELDS = tuple(f.name for f in fields(Run))
ATTEMPT_FIELDS = tuple(f.name for f in fields(RunAttempt))


def run_from_row(row: Mapping[Any, Any]) -> Run:
    values = {name: row[name] for name in RUN_FIELDS}
    values["status"] = RunStatus(values["status"])
    values["origin"] = member(Origin, values["origin"])
    values["mode"] = member(RunMode, values["mode"])
    values["owner"] = member(Owner, values["owner"])
    values["synthesized"] = bool(values["synthesized"])
    return Run(**values)


def attempt_from_row(row: Mapping[Any, Any]) -> RunAttempt:
    values = {name: row[name] for name in ATTEMPT_FIELDS}
    values["status"] = AttemptStatus(values["status"])
    values["synthesized"] = bool(values["synthesized"])
    return RunAttempt(**values)


def event_from_row(row: Mapping[Any, Any]) -> RunEvent:
    return RunEvent(
        id=row["id"], run_id=row["run_id"], sequence=row["sequence"], type=EventType(row["type"]),
        actor_type=ActorType(row["actor_type"]), created_at_ms=row["created_at_ms"],
        payload=json.loads(row["payload"]), dedupe_key=row["dedupe_key"], actor_id=row["actor_id"],
        attempt_id=row["attempt_id"], step_run_id=row["step_run_id"],
    )


def run_values(run: Run) -> dict[str, Any]:
    values = {name: getattr(run, name) for name in RUN_FIELDS}
    values["status"] = run.status.value
    for name in ("origin", "mode", "owner"):  # as text, whether a member or (from a test) a plain str
        values[name] = _text(values[name])
    return values


def _text(value: str | None) -> str | None:
    return None if value is None else str(value)


def attempt_values(attempt: RunAttempt) -> dict[str, Any]:
    values = {name: getattr(attempt, name) for name in ATTEMPT_FIELDS}
    values["status"] = attempt.status.value
    return values


def event_values(event: RunEvent) -> dict[str, Any]:
    return {
        "id": event.id, "run_id": event.run_id, "sequence": event.sequence, "type": event.type.value,
        "dedupe_key": event.dedupe_key, "actor_type": event.actor_type.value, "actor_id": event.actor_id,
        "attempt_id": event.attempt_id, "step_run_id": event.step_run_id,
        "payload": json.dumps(dict(event.payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        "created_at_ms": event.created_at_ms,
    }
