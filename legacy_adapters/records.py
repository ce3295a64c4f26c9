"""2.x's ``Crontabs`` and ``RunningInstances`` rows as typed records, coerced from whatever SQLite gives back.

2.x's columns have loose affinities (NUMBER, JSON in TEXT): a value stored in an odd form reads as None (the id
excepted) rather than failing the read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CRON_COLUMNS = {  # field -> Crontabs column
    "id": "id",
    "name": "name",
    "command": "command",
    "schedule": "schedule",
    "timestamp": "timestamp",
    "saved": "saved",
    "status": "status",
    "is_system": "isSystem",
    "pid": "pid",
    "is_disabled": "isDisabled",
    "is_pinned": "isPinned",
    "log_path": "log_path",
    "labels": "labels",
    "last_running_time": "last_running_time",
    "last_execution_time": "last_execution_time",
    "sub_id": "sub_id",
    "extra_schedules": "extra_schedules",
    "task_before": "task_before",
    "task_after": "task_after",
    "log_name": "log_name",
    "allow_multiple_instances": "allow_multiple_instances",
    "work_dir": "work_dir",
    "created_at": "createdAt",
    "updated_at": "updatedAt",
}
INSTANCE_COLUMNS = ("id", "cron_id", "pid", "log_path", "started_at", "finished_at", "status", "exit_code")


@dataclass(frozen=True)
class LegacyCron:
    """One ``Crontabs`` row; a column the install lacks reads as None."""

    id: int
    name: str | None
    command: str | None
    schedule: str | None
    timestamp: str | None
    saved: bool | None
    status: int | float | None  # 0.5 is queued before v2.21 (ReleaseProfile.queued_status)
    is_system: bool | None
    pid: int | None
    is_disabled: bool  # NULL is "not disabled", as in 2.x's filters
    is_pinned: bool | None
    log_path: str | None
    labels: tuple[str, ...] | None  # None: the stored JSON text is malformed
    last_running_time: int | float | None  # seconds (a duration)
    last_execution_time: int | float | None  # unix seconds; 0 means never
    sub_id: int | None
    extra_schedules: tuple[str, ...] | None  # None: the stored JSON text is malformed
    task_before: str | None
    task_after: str | None
    log_name: str | None
    work_dir: str | None
    # NULL on upgraded rows never re-saved; runCron tests `=== 0`, so NULL acts as True.
    allow_multiple_instances: bool | None
    created_at: str | None
    updated_at: str | None


@dataclass(frozen=True)
class LegacyInstance:
    """One ``RunningInstances`` row; times are unix seconds."""

    id: int
    cron_id: int | None
    pid: int | None
    log_path: str | None
    started_at: int | float | None
    finished_at: int | float | None
    status: int | None
    exit_code: int | float | None


def _number(value: Any) -> int | float | None:
    # NUMBER has NUMERIC affinity: integers come back as int, odd writes as float or text.
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    return value if isinstance(value, int) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return number if isinstance(number, int) else None


def _flag(value: Any) -> bool | None:
    number = _number(value)
    return None if number is None else bool(number)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_strings(value: Any, key: str | None = None) -> tuple[str, ...] | None:
    """A JSON array of strings (labels) or of ``{"schedule": ...}`` objects (extra_schedules)."""
    if value is None or value == "":
        return ()
    try:
        items = json.loads(value) if isinstance(value, (str, bytes)) else value
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    found = [item.get(key) if key and isinstance(item, dict) else item for item in items]
    return tuple(str(item) for item in found if isinstance(item, str) and item)


def cron_from_row(row: Mapping[str, Any]) -> LegacyCron:
    get = row.get
    return LegacyCron(
        id=int(row["id"]),
        name=_text(get("name")),
        command=_text(get("command")),
        schedule=_text(get("schedule")),
        timestamp=_text(get("timestamp")),
        saved=_flag(get("saved")),
        status=_number(get("status")),
        is_system=_flag(get("isSystem")),
        pid=_integer(get("pid")),
        is_disabled=bool(_flag(get("isDisabled"))),
        is_pinned=_flag(get("isPinned")),
        log_path=_text(get("log_path")),
        labels=_json_strings(get("labels")),
        last_running_time=_number(get("last_running_time")),
        last_execution_time=_number(get("last_execution_time")),
        sub_id=_integer(get("sub_id")),
        extra_schedules=_json_strings(get("extra_schedules"), "schedule"),
        task_before=_text(get("task_before")),
        task_after=_text(get("task_after")),
        log_name=_text(get("log_name")),
        work_dir=_text(get("work_dir")),
        allow_multiple_instances=_flag(get("allow_multiple_instances")),
        created_at=_text(get("createdAt")),
        updated_at=_text(get("updatedAt")),
    )


def instance_from_row(row: Mapping[str, Any]) -> LegacyInstance:
    get = row.get
    return LegacyInstance(
        id=int(row["id"]),
        cron_id=_integer(get("cron_id")),
        pid=_integer(get("pid")),
        log_path=_text(get("log_path")),
        started_at=_number(get("started_at")),
        finished_at=_number(get("finished_at")),
        status=_integer(get("status")),
        exit_code=_number(get("exit_code")),
    )
