"""The report's scan: 2.x's instances that started in the window, each set against its Run, counted per origin."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from bridge.config import Settings
from bridge.domain.events import EventType
from bridge.domain.keys import execution_key, import_key
from bridge.domain.model import RunMode, RunStatus, outcome_unreported
from bridge.service.reports import MAX_KEYS, ReportedRun, ReportReads
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.errors import LegacyTimeError
from legacy_adapters.identity import instance_import_key
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.records import LegacyInstance
from legacy_adapters.scheduler_mode import resolve_scheduler_mode
from legacy_adapters.schema import ENDED_INSTANCE, InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.gates import OriginFigures, Window

BATCH_SIZE = 500
CRON_CACHE_SIZE = 4096
CRON_TRACK_CAP = 100_000
SKEW_S = 86_400  # 2.x inserts an instance when it starts: ids follow started_at, give or take a clock step
UNKNOWN = "unknown"
# docs/legacy-2x.md#status-numbers: the shadow Run status each ended InstanceStatus should sit beside.
EXPECTED_STATUS = {int(status): ended.run for status, ended in ENDED_INSTANCE.items()}
ProgressCallback = Callable[[int, int], None]  # (rows scanned so far, rows to scan), in instance ids
# Callback mismatches without an origin, by (cron id, pid, log digest), waiting for the instance they belong to.
Pending = dict[tuple[int | None, Any, Any], list[str]]


class Tally:
    """Per-origin figures accumulated instance by instance, plus which origins each cron ran under."""

    def __init__(self) -> None:
        self.figures: dict[str, OriginFigures] = {}
        self.cron_origins: dict[int, set[str]] = {}
        self.exit_codes_reported = True  # False: the release keeps none, so the exit-code gate has nothing to judge

    def fig(self, origin: str | None) -> OriginFigures:
        name = origin or UNKNOWN
        if name not in self.figures:
            self.figures[name] = OriginFigures(name, legacy_reports_exit_codes=self.exit_codes_reported)
        return self.figures[name]

    def observe(self, origin: str, cron_id: int | None) -> OriginFigures:
        """One of 2.x's executions seen under ``origin``: its figures, with the execution counted."""
        f = self.fig(origin)
        f.executions_observed += 1
        if cron_id is not None and (cron_id in self.cron_origins or len(self.cron_origins) < CRON_TRACK_CAP):
            self.cron_origins.setdefault(cron_id, set()).add(origin)
        return f

    def count(self, instance: LegacyInstance, run: ReportedRun | None, origin: str) -> None:
        f = self.observe(origin, instance.cron_id)
        if run is None:
            return
        f.with_shadow_run += 1
        if outcome_unreported(run.status):
            f.ended_without_outcome += 1  # unknown, in neither agreement (docs/run-state.md#outcome-not-reported)
            return
        expected = EXPECTED_STATUS.get(instance.status) if instance.status is not None else None
        if expected is None:
            return  # still running (or an unknown status): nothing terminal to compare yet
        f.terminal_pairs += 1
        f.terminal_status_agree += int(run.status == expected)
        if instance.exit_code is None:
            return
        f.exit_code_pairs += 1
        if instance.status == InstanceStatus.STOPPED:
            f.exit_code_agree += int(run.status is RunStatus.CANCELLED)  # stopInstance's 143 pairs with a cancel
        else:
            f.exit_code_agree += int(run.exit_code is not None and run.exit_code == instance.exit_code)



class Scan:
    """Streams RunningInstances in id order, looks up each batch's Runs in one query, and tallies them."""

    def __init__(self, reader: LegacyRecords, queries: ReportReads, tally: Tally,
                 pending: Pending, settings: Settings, window: Window,
                 batch_size: int) -> None:
        self.reader, self.queries, self.tally, self.pending = reader, queries, tally, pending
        self.window, self.batch_size = window, batch_size
        self.tz = ZoneInfo(window.zone)
        self.scheduler_mode = resolve_scheduler_mode(settings.legacy_scheduler)
        self.get_cron = lru_cache(maxsize=CRON_CACHE_SIZE)(reader.get_cron)
        self.excluded, self.notes = 0, list[str]()

    def run(self, progress: ProgressCallback | None) -> None:
        last_id = _last_instance_id(self.reader)
        start_after = _first_candidate_id(self.reader, self.window.start_ms // 1000 - SKEW_S, last_id)
        if start_after:
            self.notes.append(f"RunningInstances were scanned after id {start_after}: earlier rows started more "
                              f"than {SKEW_S // 3600} h before the window.")
        batch: list[tuple[LegacyInstance, int]] = []
        stop_s, total, scanned = self.window.end_ms // 1000 + SKEW_S, max(last_id - start_after, 1), 0
        for instance in self.reader.iter_instances(after_id=start_after, batch_size=self.batch_size):
            started_ms = _started_ms(instance)
            if started_ms is not None and self.window.start_ms <= started_ms <= self.window.end_ms:
                batch.append((instance, started_ms))
            if len(batch) >= self.batch_size:
                self._flush(batch)
                batch = []
            scanned += 1
            if progress is not None and scanned % self.batch_size == 0:
                progress(min(instance.id - start_after, total), total)
            if instance.started_at is not None and instance.started_at > stop_s:
                break  # ids follow start times: nothing later can fall in the window
        self._flush(batch)
        if progress is not None:
            progress(total, total)

    def _flush(self, batch: list[tuple[LegacyInstance, int]]) -> None:
        if not batch:
            return
        keys = {i.id: _execution_key(i, ms) for i, ms in batch}
        # History brought in by `bridge import-legacy` is keyed by the execution (or, by earlier imports, the row).
        imported = {i.id: (instance_import_key(i), import_key(i.id)) for i, _ in batch}
        wanted = [k for k in keys.values() if k is not None] + sorted({k for pair in imported.values() for k in pair})
        runs: dict[str, ReportedRun] = {}
        for start in range(0, len(wanted), MAX_KEYS):  # up to three keys a row: more than one lookup takes
            runs.update(self.queries.runs_by_keys(wanted[start:start + MAX_KEYS]))
        for instance, started_ms in batch:
            key = keys[instance.id]
            run = ((runs.get(key) if key is not None else None) or runs.get(imported[instance.id][0])
                   or runs.get(imported[instance.id][1]))
            if run is not None and run.mode is RunMode.IMPORTED:
                self.excluded += 1
                self.tally.fig(run.origin).legacy_import_excluded += 1
                continue
            origin = (run.origin or UNKNOWN) if run is not None else self._inferred(instance, started_ms)
            self.tally.count(instance, run, origin)
            for kind in self.pending.pop((instance.cron_id, instance.pid, log_path_digest(instance.log_path)), []):
                count_callback(self.tally.fig(origin), kind)

    def _inferred(self, instance: LegacyInstance, started_ms: int) -> str:
        cron = self.get_cron(instance.cron_id) if instance.cron_id is not None else None
        if cron is None:
            return UNKNOWN
        return infer_scheduled_origin(cron, started_ms // 1000, self.scheduler_mode, self.tz).origin


def _started_ms(instance: LegacyInstance) -> int | None:
    try:
        return epoch_seconds_to_ms(instance.started_at, field="started_at") if instance.started_at else None
    except LegacyTimeError:
        return None


def _execution_key(instance: LegacyInstance, started_ms: int) -> str | None:
    """The execution key of this instance: the one its callbacks gave the Run (CallbackFacts.execution_key)."""
    if instance.cron_id is None:
        return None
    return execution_key(instance.cron_id, instance.pid, log_path_digest(instance.log_path), started_ms)


def _probe(reader: LegacyRecords, after_id: int) -> LegacyInstance | None:
    """The first instance with an id above ``after_id`` (one LIMIT 1 statement)."""
    for row in reader.iter_instances(after_id=after_id, batch_size=1):
        return row
    return None


def _last_instance_id(reader: LegacyRecords) -> int:
    """The highest RunningInstances id (0 when empty): doubling, then halving probes on the primary key."""
    if _probe(reader, 0) is None:
        return 0
    high = 1
    while _probe(reader, high) is not None:
        high *= 2
    low = 0  # invariant: low <= last id <= high
    while low < high:
        mid = (low + high) // 2
        row = _probe(reader, mid)
        if row is None:
            high = mid
        else:
            low = row.id
    return low


def _first_candidate_id(reader: LegacyRecords, cutoff_s: int, last_id: int) -> int:
    """The largest id after which every row started at or after ``cutoff_s`` (binary search on the PK)."""
    lo, hi = 0, last_id
    while lo < hi:
        mid = (lo + hi) // 2
        row = _probe(reader, mid)
        if row is None or row.started_at is None or row.started_at >= cutoff_s:
            hi = mid
        else:
            lo = row.id
    return lo


def count_callback(figures: OriginFigures, kind: str, n: int = 1) -> None:
    if kind == EventType.COMPAT_AMBIGUOUS_CALLBACK:
        figures.ambiguous_callbacks += n
    else:
        figures.unmatched_callbacks += n

