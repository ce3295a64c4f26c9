"""The 2.x (v2.21.0) schema as it sits on disk: exact DDL, numeric enums, and text encodings.

We never migrate the 2.x database; these strings mirror it (docs/legacy-2x.md#the-database) for reads and the double.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import IntEnum

from bridge.domain.events import ErrorCode
from bridge.domain.model import AttemptStatus, RunStatus

# Single statements exactly as Sequelize 6 sync() emits them on a fresh v2.21.0 install. On an
# upgraded install the ALTER-added columns sit after `updatedAt`, so never rely on order.
CRONTABS_DDL = (
    "CREATE TABLE `Crontabs` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, `name` VARCHAR(255), "
    "`command` VARCHAR(255), `schedule` VARCHAR(255), `timestamp` VARCHAR(255), "
    "`saved` TINYINT(1), `status` NUMBER, `isSystem` NUMBER, `pid` NUMBER, `isDisabled` NUMBER, "
    "`isPinned` NUMBER, `log_path` VARCHAR(255), `labels` JSON, `last_running_time` NUMBER, "
    "`last_execution_time` NUMBER, `sub_id` NUMBER, `extra_schedules` JSON, "
    "`task_before` VARCHAR(255), `task_after` VARCHAR(255), `log_name` VARCHAR(255), "
    "`allow_multiple_instances` NUMBER, `work_dir` VARCHAR(255), "
    "`createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL, "
    "UNIQUE (`name`, `command`, `schedule`));"
)

RUNNING_INSTANCES_DDL = (
    "CREATE TABLE `RunningInstances` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, "
    "`cron_id` NUMBER NOT NULL, `pid` NUMBER, `log_path` VARCHAR(255), "
    "`started_at` NUMBER NOT NULL, `finished_at` NUMBER, `status` NUMBER NOT NULL DEFAULT 0, "
    "`exit_code` NUMBER, `createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL);"
)

# total_time / max_time are already milliseconds (elapsed seconds x 1000): never multiply again.
CRONTAB_STATS_DDL = (
    "CREATE TABLE `CrontabStats` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, "
    "`ref_id` NUMBER NOT NULL, `date` VARCHAR(255) NOT NULL, `run_count` NUMBER DEFAULT 0, "
    "`success_count` NUMBER DEFAULT 0, `fail_count` NUMBER DEFAULT 0, "
    "`total_time` NUMBER DEFAULT 0, `max_time` NUMBER DEFAULT 0, "
    "`createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL);",
    "CREATE UNIQUE INDEX `crontab_stats_ref_id_date` ON `CrontabStats` (`ref_id`, `date`);",
    "CREATE INDEX `crontab_stats_date` ON `CrontabStats` (`date`);",
)

APPS_DDL = (
    "CREATE TABLE `Apps` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, `name` VARCHAR(255), "
    "`scopes` JSON, `client_id` VARCHAR(255), `client_secret` VARCHAR(255), `tokens` JSON, "
    "`createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL, UNIQUE (`name`));"
)

# data/db/keyv.sqlite: the cache /open/* auth actually reads (not the Apps table).
KEYV_DDL = "CREATE TABLE keyv(key VARCHAR(255) PRIMARY KEY, value TEXT)"

DATABASE_DDL: tuple[str, ...] = (
    CRONTABS_DDL,
    RUNNING_INSTANCES_DDL,
    *CRONTAB_STATS_DDL,
    APPS_DDL,
)

# Crontabs columns added by hand-written ALTERs; installs older than v2.21.0 may lack them.
CRONTABS_OPTIONAL_COLUMNS = frozenset(
    {
        "sub_id",
        "extra_schedules",
        "task_before",
        "task_after",
        "log_name",
        "allow_multiple_instances",
        "work_dir",
    }
)
# The columns that recognise a 2.x database (docs/run-state.md#adopting-a-2x-database).
CRONTABS_SENTINEL_COLUMNS = frozenset({"id", "command", "schedule"})


class CrontabStatus(IntEnum):
    """``Crontabs.status``; "disabled" is only a filter value, ``isDisabled`` is the real flag."""

    RUNNING = 0
    IDLE = 1
    DISABLED = 2
    QUEUED = 3


def crontab_state(status: int | float | None, queued_status: float) -> str:
    """``running``, ``queued`` or ``idle``, as a ``Crontabs.status`` reads on the release whose queued number is
    ``queued_status`` (ReleaseProfile.queued_status: 0.5 before v2.21, 3 from; docs/legacy-2x.md#crontabs-before-v221).
    Anything else (disabled, an odd value) is not an execution in progress: idle."""
    if status == CrontabStatus.RUNNING:
        return "running"
    return "queued" if status is not None and status == queued_status else "idle"


class InstanceStatus(IntEnum):
    """``RunningInstances.status``."""

    RUNNING = 0
    FINISHED = 1
    STOPPED = 2
    ERROR = 3


@dataclass(frozen=True, slots=True)
class EndedAs:
    """What an ended ``RunningInstances.status`` stands for in the Run model."""

    run: RunStatus
    attempt: AttemptStatus
    error_code: ErrorCode | None  # what an imported Run records; a stop's source is not in 2.x's row


# docs/legacy-2x.md#status-numbers: each ended instance status as a Run status, an Attempt status and an error code. The
# Run status is what a shadow Run should sit beside; the import records all three. RUNNING is not ended.
ENDED_INSTANCE: Mapping[InstanceStatus, EndedAs] = {
    InstanceStatus.FINISHED: EndedAs(RunStatus.SUCCEEDED, AttemptStatus.SUCCEEDED, None),
    InstanceStatus.ERROR: EndedAs(RunStatus.FAILED, AttemptStatus.FAILED, ErrorCode.PROCESS_EXIT_ERROR),
    InstanceStatus.STOPPED: EndedAs(RunStatus.CANCELLED, AttemptStatus.CANCELLED, ErrorCode.CANCELLED_BY_USER),
}

# An ended execution nobody reported the outcome of (docs/releases.md#outcome-not-reported): 2.x writes finished
# with a NULL exit code for an end without one (v2.21 `update.sh`), and before v2.21 nothing keeps an exit code.
OUTCOME_NOT_REPORTED = EndedAs(RunStatus.ENDED, AttemptStatus.ENDED, None)


def instance_outcome(status: InstanceStatus, exit_code: int | float | None) -> EndedAs:
    """What an ended ``RunningInstances`` row stands for: finished with no exit code claims no success."""
    if status is InstanceStatus.FINISHED and exit_code is None:
        return OUTCOME_NOT_REPORTED
    return ENDED_INSTANCE[status]


def format_updated_at(ms: int) -> str:
    """UTC ms as Sequelize writes DATETIME on SQLite: ``YYYY-MM-DD HH:MM:SS.SSS +00:00``."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} +00:00"


# ICU long names for the zones a 2.x image normally runs in; others fall back to tzname().
_LONG_ZONE_NAMES = {"CST+0800": "China Standard Time", "UTC+0000": "Coordinated Universal Time"}


def format_js_date_string(ms: int, tz: tzinfo | None = None) -> str:
    """JS ``Date#toString()`` text, as 2.x writes ``Crontabs.timestamp`` (local time zone)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(tz)
    offset = moment.strftime("%z")
    name = moment.tzname() or ""
    long_name = _LONG_ZONE_NAMES.get(f"{name}{offset}", name)
    return moment.strftime("%a %b %d %Y %H:%M:%S") + f" GMT{offset} ({long_name})"
