"""Identity of 2.x's things in the bridge: a cron's ``task_id`` and revision digest, the Run keys of an
execution read from 2.x's own rows (the formats themselves live in ``bridge.domain.keys``), and which of the rows
2.x holds for one execution speaks for it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence

from bridge.domain.keys import execution_key, import_key, imported_execution_key, task_id
from bridge.service.ports import TaskSnapshot
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.errors import LegacyTimeError
from legacy_adapters.records import LegacyCron, LegacyInstance
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms

# docs/shadow-recording.md: the fields whose change makes a new task revision.
_REVISION_FIELDS = ("command", "schedule", "task_before", "task_after", "work_dir", "log_name")


def task_revision(cron: LegacyCron) -> str:
    """A stable digest of what the cron runs and when; equal rows give equal revisions."""
    values = [getattr(cron, name) for name in _REVISION_FIELDS]
    values.append(list(cron.extra_schedules or ()))
    canonical = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def task_snapshot(cron: LegacyCron, revision: str, at_ms: int) -> TaskSnapshot:
    """What the cron runs at ``revision`` (its ``task_revision``), as the store keeps it once per revision."""
    return TaskSnapshot(task_revision=revision, task_id=task_id(cron.id), legacy_cron_id=cron.id, name=cron.name,
                        command=cron.command, schedule=cron.schedule, work_dir=cron.work_dir, log_name=cron.log_name,
                        created_at_ms=at_ms)


def instance_execution_key(cron_id: int | None, pid: int | None, log_path: str | None,
                           started_at_s: float | None) -> str:
    """The Run key of the execution a 2.x row describes: the same key its callbacks gave the Run."""
    started = epoch_seconds_to_ms(started_at_s, field="started_at") if started_at_s else None
    return execution_key(cron_id, pid, log_path_digest(log_path), started)


def instance_import_key(instance: LegacyInstance) -> str:
    """The key of the one Run ``import-legacy`` makes of the execution this row belongs to: the execution's
    identity, so every row of a replayed execution names the same Run; the row's own id when its cron id or
    start cannot be read (it has no execution identity then)."""
    try:
        started = epoch_seconds_to_ms(instance.started_at, field="started_at") if instance.started_at else None
    except LegacyTimeError:
        started = None
    if instance.cron_id is None or started is None:
        return import_key(instance.id)
    return imported_execution_key(instance.cron_id, instance.pid, log_path_digest(instance.log_path), started)


def speaking_row(rows: Sequence[LegacyInstance], invalid: Collection[int] = ()) -> LegacyInstance:
    """Of the rows 2.x holds for one execution (cron, pid, log path, begin second), the one that speaks for it:
    one without invalid values (``invalid``: the ids of the others), then a closed one, then the lowest id.
    Startup recovery, the stop decider, the reconciler and ``import-legacy`` all take this row.

    Why the lowest closed id, from 2.x's own code (back/services/cron.ts ``status``,
    docs/legacy-2x.md#what-a-callback-writes, #startup-reset): every start callback inserts a row (a replayed one too),
    ids follow insertion, and an end callback closes every open row of that cron and pid at once, stamping
    ``finished_at`` with its own arrival. So the lowest id is the execution's own start, and no row of the execution is
    closed before it: it was closed by the execution's own end, with 2.x's true facts. A higher row closed differently
    was opened by a replay after that end and closed by something later (a replayed end stamps the replay's time; 2.x's
    boot reset leaves it stopped without finish time or exit code), so the newest closed row can tell a wrong story. A
    running row says nothing about how the execution ended while a closed one exists.
    """
    return min(rows, key=lambda i: (i.id in invalid, i.status == InstanceStatus.RUNNING, i.id))
