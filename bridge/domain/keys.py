"""The Run keys the bridge gives 2.x's executions, and the task id of a 2.x cron: the one home of their formats.

A callback-recorded execution is keyed by what every callback of that execution repeats (cron id, pid, the
digest of its log path, its start in milliseconds); imported history by the same identity under its own prefix
(every row 2.x holds for one execution names one Run), or by 2.x's instance row id where a row has no
identity (no usable cron id or start), as history imported by earlier versions was. The keys are
idempotency keys: the same execution seen twice (a replay, a second replica, a reconcile pass) finds the same
Run instead of making another.
"""

from __future__ import annotations

IMPORT_KEY_PREFIX = "legacy-import:"


def task_id(cron_id: int) -> str:
    """The task a 2.x cron is: ``legacy-cron:{cron id}``."""
    return f"legacy-cron:{cron_id}"


def execution_key(cron_id: int | None, pid: int | None, log_ref: str | None, started_at_ms: int | None) -> str:
    """``legacy:{cron}:{pid}:{log digest}:{start ms}``; absent parts read ``None``, as every writer wrote them."""
    return f"legacy:{cron_id}:{pid}:{log_ref}:{started_at_ms}"


def import_key(instance_id: int) -> str:
    """The key of the Run imported from 2.x's ``RunningInstances`` row ``instance_id`` alone."""
    return f"{IMPORT_KEY_PREFIX}{instance_id}"


def imported_execution_key(cron_id: int, pid: int | None, log_ref: str | None, started_at_ms: int) -> str:
    """``legacy-import:{cron}:{pid}:{log digest}:{start ms}``: the Run imported for one execution, however many
    rows 2.x holds for it."""
    return f"{IMPORT_KEY_PREFIX}{cron_id}:{pid}:{log_ref}:{started_at_ms}"
