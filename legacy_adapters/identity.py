"""Task identity of a 2.x cron: ``task_id``, the revision digest, and the fields of its snapshot."""

from __future__ import annotations

import hashlib
import json

from legacy_adapters.reader import LegacyCron

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
