"""One reader of 2.x's database per release line, chosen from the release profile (legacy_adapters/releases.py).

- v2.21: ``LegacyReader`` reads ``Crontabs`` and ``RunningInstances``, one row per execution
  (docs/legacy-2x.md#runninginstances).
- v2.17–v2.20: ``ReaderBeforeV221`` reads ``Crontabs`` only. Those releases create no ``RunningInstances`` table
  (docs/legacy-2x.md#crontabs-before-v221): an execution's records are its cron's row and its task log, which
  ``bridge/jobs/evidence.py`` reads instead. Its per-execution reads are empty because the release keeps no such
  rows, not because a table happened to be missing when asked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from legacy_adapters.ports import LegacyRecords
from legacy_adapters.reader import INSTANCE_LOOKBACK_S, INSTANCE_SCAN_IDS, LegacyReader
from legacy_adapters.records import LegacyInstance
from legacy_adapters.releases import ReleaseProfile


class ReaderBeforeV221(LegacyReader):
    """2.x v2.17–v2.20: the Crontabs rows; no release of these lines keeps a row per execution."""

    def iter_instances(self, after_id: int = 0, batch_size: int = 500) -> Iterator[LegacyInstance]:
        return iter(())

    def instances_for_cron(self, cron_id: int, limit: int) -> list[LegacyInstance]:
        return []

    def recent_instances(self, limit: int) -> list[LegacyInstance]:
        return []

    def instances_inserted_near(self, cron_id: int, pid: int | None, at_ms: int, *,
                                lookback_s: int = INSTANCE_LOOKBACK_S,
                                max_ids: int = INSTANCE_SCAN_IDS) -> list[LegacyInstance]:
        return []

    def begun_logs(self, limit: int) -> list[tuple[str | None, float | None]]:
        """Each cron's latest execution: the start callback writes ``log_path`` and ``last_execution_time`` on
        its Crontabs row (docs/legacy-2x.md#crontabs-before-v221)."""
        begun = [(c.log_path, float(c.last_execution_time)) for c in self.iter_crons()
                 if c.log_path and isinstance(c.last_execution_time, int | float) and c.last_execution_time > 0]
        begun.sort(key=lambda pair: pair[1] or 0.0, reverse=True)
        return list(begun[:limit])


def open_legacy_records(release: ReleaseProfile | None, database_path: str | os.PathLike[str], *,
                        keep_connections: int = 0) -> LegacyRecords:
    """The reader of ``release``'s database at ``database_path`` (``keep_connections``: see LegacyReader). None:
    the release could not be decided, and the newest line's reader reads, as ``decide_release`` assumes it."""
    reader = LegacyReader if release is None or release.has_running_instances else ReaderBeforeV221
    return reader(database_path, keep_connections=keep_connections)
