"""The row mappers of the Run store: a Run, a RunAttempt and a RunEvent to and from their table rows, and the
reconciler's read rows (bridge.service.reconcile) from theirs.

One mapper a table and direction, shared by every write (SqlRunStore, the StepRun repository) and read
(the queries) of those rows. Stored text becomes the domain's enums here, and nowhere above.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from bridge.domain.events import ActorType, EventType, RunEvent
from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import AttemptStatus, Origin, Owner, Run, RunAttempt, RunMode, RunStatus, member
from bridge.service.reconcile import (
    ActiveRun,
    ComparedRun,
    DuplicateGroup,
    OpenMismatch,
    UnfinishedRun,
    UnseenRun,
)

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


# -- the reconciler's reads (bridge.storage.reconcile_queries) -------------------------------------------


def compared_run_from_row(row: Mapping[Any, Any]) -> ComparedRun:
    return ComparedRun(
        id=row["id"], idempotency_key=row["idempotency_key"], status=RunStatus(row["status"]),
        created_at_ms=row["created_at_ms"], origin=member(Origin, row["origin"]), mode=member(RunMode, row["mode"]),
        legacy_cron_id=row["legacy_cron_id"], cancel_requested_at_ms=row["cancel_requested_at_ms"],
        error_code=row["error_code"], attempt_id=row["attempt_id"],
        attempt_status=member(AttemptStatus, row["attempt_status"]), exit_code=row["exit_code"],
        started_at_ms=row["started_at_ms"], finished_at_ms=row["finished_at_ms"], pid=row["pid"],
        executor_handle=row["executor_handle"])


def unseen_run_from_row(row: Mapping[Any, Any]) -> UnseenRun:
    return UnseenRun(id=row["id"], status=RunStatus(row["status"]), created_at_ms=row["created_at_ms"],
                     origin=member(Origin, row["origin"]), legacy_cron_id=row["legacy_cron_id"],
                     synthesized=bool(row["synthesized"]))


def duplicate_group_from_row(row: Mapping[Any, Any]) -> DuplicateGroup:
    return DuplicateGroup(legacy_cron_id=row["legacy_cron_id"], legacy_pid=row["legacy_pid"], log_ref=row["log_ref"],
                          runs=int(row["n"]), first_run_id=row["first_id"], last_run_id=row["last_id"],
                          origin=member(Origin, row["origin"]))


def active_run_from_row(row: Mapping[Any, Any]) -> ActiveRun:
    return ActiveRun(id=row["id"], status=RunStatus(row["status"]), created_at_ms=row["created_at_ms"],
                     legacy_cron_id=row["legacy_cron_id"], origin=member(Origin, row["origin"]), pid=row["pid"])


def unfinished_run_from_row(row: Mapping[Any, Any]) -> UnfinishedRun:
    return UnfinishedRun(
        id=row["id"], status=RunStatus(row["status"]), created_at_ms=row["created_at_ms"],
        legacy_cron_id=row["legacy_cron_id"], legacy_pid=row["legacy_pid"], log_ref=row["log_ref"],
        started_at_ms=row["started_at_ms"], origin=member(Origin, row["origin"]), attempt_id=row["attempt_id"],
        attempt_status=member(AttemptStatus, row["attempt_status"]), executor_handle=row["executor_handle"])


def open_mismatch_from_row(row: Mapping[Any, Any]) -> OpenMismatch:
    return OpenMismatch(row["id"], MismatchKind(row["kind"]), row["legacy_cron_id"], row["dedupe_key"])
