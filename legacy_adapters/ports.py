"""The port the bridge reads 2.x's database through (docs/releases.md#one-home-for-the-release).

Every use case (the callback path, reconcile, recovery, the report, the import, doctor) asks a ``LegacyRecords``;
which implementation answers is chosen once, in bootstrap, from the release profile (``open_legacy_records``):
the records a release keeps differ, the questions asked of them do not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from legacy_adapters.database_state import DatabaseState
from legacy_adapters.records import LegacyCron, LegacyInstance


class LegacyRecords(Protocol):
    """2.x's ``database.sqlite``, read only. Each read raises LegacyDatabaseError (its ``reason`` a DatabaseState
    value) when the file cannot be read now, never a driver error."""

    path: Path

    def get_cron(self, cron_id: int) -> LegacyCron | None:
        """The Crontabs row with ``cron_id``, or None."""
        ...

    def iter_crons(self, batch_size: int = 500) -> Iterator[LegacyCron]:
        """Every Crontabs row in id order."""
        ...

    def iter_instances(self, after_id: int = 0, batch_size: int = 500) -> Iterator[LegacyInstance]:
        """The per-execution rows with id > ``after_id`` in id order (none where the release keeps none)."""
        ...

    def instances_for_cron(self, cron_id: int, limit: int) -> list[LegacyInstance]:
        """Up to ``limit`` per-execution rows of a cron, newest first."""
        ...

    def recent_instances(self, limit: int) -> list[LegacyInstance]:
        """The ``limit`` newest per-execution rows of any cron."""
        ...

    def instances_inserted_near(self, cron_id: int, pid: int | None, at_ms: int, *, lookback_s: int = ...,
                                max_ids: int = ...) -> list[LegacyInstance]:
        """The per-execution rows of ``cron_id`` with ``pid`` that 2.x inserted around ``at_ms``, newest first."""
        ...

    def crons_stamped(self, updated_at: str) -> int:
        """How many Crontabs rows carry exactly this ``updatedAt``: one statement's rows share it to the
        millisecond (2.x's boot idles every row in one)."""
        ...

    def begun_logs(self, limit: int) -> list[tuple[str | None, float | None]]:
        """The log paths of the ``limit`` latest executions beside their begin second, newest first: the
        evidence of the zone 2.x names its logs in."""
        ...

    def has_table(self, name: str) -> bool: ...

    def columns(self, table: str) -> frozenset[str]: ...

    def state(self) -> DatabaseState:
        """What the file is right now (OK, or why it cannot be read); never raises."""
        ...

    def check_is_legacy_database(self) -> None:
        """Raises LegacyDatabaseError unless the file reads as 2.x's database."""
        ...

    def close(self) -> None: ...


class OpenTokenCheck(Protocol):
    """2.x's ``/open/*`` token check, as the release fronted makes it (legacy_adapters/auth.py from v2.18, its
    keyv cache; legacy_adapters/auth_apps_table.py on v2.17, the Apps table)."""

    def check_open_request(self, path: str, authorization: str | None, now_s: float, *,
                           user_agent: str | None = None) -> None:
        """Return if 2.x would let the request through. Raises LegacyAuthError (2.x's 401 body), or
        LegacyDatabaseError when 2.x's files cannot be read."""
        ...
