"""Which 2.x release the bridge fronts, decided once per process from the evidence it can read
(legacy_adapters/releases.py); everything built after asks the profile, never a version number."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config import ConfigError, Settings

if TYPE_CHECKING:
    from legacy_adapters.reader import LegacyReader
    from legacy_adapters.releases import ReleaseProfile

def decide_legacy_release(settings: Settings, reader: LegacyReader | None = None) -> ReleaseProfile:
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


def _schema(settings: Settings, reader: LegacyReader | None) -> tuple[frozenset[str], frozenset[str], bool] | None:
    if settings.legacy_data_dir is None:
        return None
    from legacy_adapters.errors import LegacyDatabaseError
    from legacy_adapters.reader import LegacyReader

    own = reader is None
    if reader is None:
        if settings.legacy_database_path is None or not settings.legacy_database_path.exists():
            return None
        reader = LegacyReader(settings.legacy_database_path)
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
