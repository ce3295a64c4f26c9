"""Identity of 2.x's things in the bridge: a cron's ``task_id`` and revision digest, and the Run key of an
execution read from 2.x's own rows (the format itself lives in ``bridge.domain.keys``)."""

from __future__ import annotations

import hashlib
import json

from bridge.domain.keys import execution_key
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.reader import LegacyCron
from legacy_adapters.timeconv import epoch_seconds_to_ms

# DESIGN.md section 5: the fields whose change makes a new task revision.
_REVISION_FIELDS = ("command", "schedule", "task_before", "task_after", "work_dir", "log_name")


def task_id(cron_id: int) -> str:
    return f"legacy-cron:{cron_id}"


def task_revision(cron: LegacyCron) -> str:
    """A stable digest of what the cron runs and when; equal rows give equal revisions."""
    values = [getattr(cron, name) for name in _REVISION_FIELDS]
    values.append(list(cron.extra_schedules or ()))
    canonical = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def instance_execution_key(cron_id: int | None, pid: int | None, log_path: str | None,
                           started_at_s: float | None) -> str:
    """The Run key of the execution a 2.x row describes: the same key its callbacks gave the Run."""
    started = epoch_seconds_to_ms(started_at_s, field="started_at") if started_at_s else None
    return execution_key(cron_id, pid, log_path_digest(log_path), started)
