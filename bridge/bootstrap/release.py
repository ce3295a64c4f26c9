"""Which 2.x release the bridge fronts, decided once per process from the evidence it can read
(legacy_adapters/releases.py); everything built after asks the profile, never a version number."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bridge.config import ConfigError, Settings, local_zone_name

if TYPE_CHECKING:
    from bridge.jobs.evidence import ExecutionEvidence
    from bridge.jobs.stop_decisions import Replacements
    from legacy_adapters.log_files import LogDirectory
    from legacy_adapters.ports import LegacyRecords
    from legacy_adapters.releases import ReleaseProfile


def decide_legacy_release(settings: Settings, reader: LegacyRecords | None = None) -> ReleaseProfile:
    """The release profile of the 2.x install ``settings`` name.

    Raises ConfigError naming the release when it is one the bridge does not support (older than v2.17, or
    newer than it knows). A database that cannot be read now leaves the schema out of the evidence; the
    operator's ``BRIDGE_LEGACY_RELEASE`` and 2.x's ``version.yaml`` come first anyway.
    """
    from legacy_adapters.releases import UnsupportedRelease, decide_release

    try:
        profile = decide_release(declared=settings.legacy_release, install_dir=settings.legacy_install_dir,
                                 schema=_schema(settings, reader))
    except UnsupportedRelease as exc:
        raise ConfigError("BRIDGE_LEGACY_RELEASE" if settings.legacy_release else "BRIDGE_LEGACY_DATA_DIR",
                          str(exc)) from None
    return profile


def _schema(settings: Settings, reader: LegacyRecords | None) -> tuple[frozenset[str], frozenset[str], bool] | None:
    if settings.legacy_data_dir is None:
        return None
    from legacy_adapters.errors import LegacyDatabaseError

    own = reader is None
    if reader is None:
        if settings.legacy_database_path is None or not settings.legacy_database_path.exists():
            return None
        reader = open_records(settings.legacy_database_path, None)  # the schema reads alike on every line
    try:
        tables = frozenset(t for t in ("RunningInstances", "CrontabStats") if reader.has_table(t))
        columns = reader.columns("Crontabs")
    except LegacyDatabaseError:
        return None
    finally:
        if own:
            reader.close()
    if not columns:
        return None  # 2.x has not created its tables yet: the schema says nothing
    return tables, columns, (settings.legacy_data_dir / "db" / "keyv.sqlite").exists()


def legacy_zone(settings: Settings) -> ZoneInfo:
    """The zone 2.x names its logs and runs its schedules in."""
    return ZoneInfo(settings.legacy_tz or local_zone_name())


def replacement_rule(settings: Settings) -> Replacements:
    """Which next start can have replaced a single-instance cron's execution: a Node scheduled fire, judged in
    2.x's scheduler mode and zone (bridge/jobs/stop_decisions.py)."""
    from bridge.jobs.stop_decisions import Replacements
    from legacy_adapters.scheduler_mode import resolve_scheduler_mode

    return Replacements(resolve_scheduler_mode(settings.legacy_scheduler), legacy_zone(settings))


def task_logs(settings: Settings, release: ReleaseProfile) -> LogDirectory:
    """2.x's ``data/log``, read in its zone with the release's stop marker (legacy_adapters/log_files.py)."""
    from legacy_adapters.log_files import LogDirectory

    return LogDirectory((settings.legacy_data_dir or Path(".")) / "log", legacy_zone(settings), release.stop_marker)


def open_records(database_path: Path, release: ReleaseProfile | None, *, keep_connections: int = 0) -> LegacyRecords:
    """The reader of 2.x's database for ``release`` (legacy_adapters/release_readers.py): the one place a reader
    is chosen. None: the release could not be decided (the newest line's reader)."""
    from legacy_adapters.release_readers import open_legacy_records

    return open_legacy_records(release, database_path, keep_connections=keep_connections)


def build_execution_evidence(settings: Settings, reader: LegacyRecords,
                             release: ReleaseProfile | None = None) -> ExecutionEvidence:
    """What reconcile and recovery judge 2.x's executions by: ``RunningInstances`` rows where the release has
    them, else its Crontabs rows and log files (docs/reconciliation.md#releases-before-v221). The one choice,
    made from ``release`` (decided from ``settings`` and ``reader`` when not given)."""
    from bridge.jobs.evidence import choose_evidence

    profile = release or decide_legacy_release(settings, reader)
    return choose_evidence(profile.has_running_instances, reader, lambda: task_logs(settings, profile),
                           profile.queued_status, replacement_rule(settings))
