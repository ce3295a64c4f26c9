"""The report's scan on releases without ``RunningInstances`` (v2.17–v2.20): 2.x's task logs that started in the
window, each set against its Run, counted per origin (docs/reconciliation.md#releases-before-v221).

A log is what those releases keep of each execution: its start, and once over its end, duration and, from v2.18,
whether the shell's trap ended it. So a pair agrees on its terminal status when both sides say stopped or both say
not stopped; nothing there holds an exit code, so no exit-code pair is ever formed (the gate says so by name).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import islice
from zoneinfo import ZoneInfo

from bridge.config import Settings
from bridge.domain.model import RUN_TERMINAL, RunMode, RunStatus, outcome_unreported
from bridge.jobs.report.scan import CRON_CACHE_SIZE, UNKNOWN, ProgressCallback, Tally
from bridge.service.reports import ReportedRun, ReportReads
from legacy_adapters.log_files import NO_LOG, LogDirectory, LoggedExecution
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.scheduler_mode import resolve_scheduler_mode
from projections.gates import Window


class LogScan:
    """Streams the window's task logs, looks up each batch's Runs by (cron, log digest), and tallies them."""

    def __init__(self, logs: LogDirectory, reader: LegacyRecords, queries: ReportReads, tally: Tally,
                 settings: Settings, window: Window, release_name: str, batch_size: int) -> None:
        self.logs, self.reader, self.queries, self.tally = logs, reader, queries, tally
        self.window, self.batch_size = window, batch_size
        self.marks_stops = logs.marks_stops
        self.tz = ZoneInfo(window.zone)
        self.scheduler_mode = resolve_scheduler_mode(settings.legacy_scheduler)
        self.get_cron = lru_cache(maxsize=CRON_CACHE_SIZE)(reader.get_cron)
        self.excluded = 0
        self.notes = [f"2.x {release_name} keeps no RunningInstances: its executions are its task logs under "
                      "data/log, and it reports no exit code, so no exit-code pair is formed."]
        tally.exit_codes_reported = False

    def run(self, progress: ProgressCallback | None) -> None:
        folders = {c.log_name: c.id for c in self.reader.iter_crons(batch_size=self.batch_size)
                   if c.log_name and c.log_name != NO_LOG}
        done = 0
        for batch in _chunks(self.logs.scan(self.window.start_ms, self.window.end_ms, folders), self.batch_size):
            self._flush([logged for logged in batch if logged.start_line and logged.cron_id is not None])
            done += len(batch)
            if progress is not None:
                progress(done, done + self.batch_size)
        if progress is not None:
            progress(done, max(done, 1))

    def _flush(self, batch: list[LoggedExecution]) -> None:
        if not batch:
            return
        found = self.queries.runs_by_log_refs([(logged.cron_id or 0, logged.log_ref) for logged in batch])
        for logged in batch:
            run = _closest(found.get((logged.cron_id or 0, logged.log_ref), []), logged)
            if run is not None and run.mode is RunMode.IMPORTED:
                self.excluded += 1
                self.tally.fig(run.origin).legacy_import_excluded += 1
                continue
            origin = (run.origin or UNKNOWN) if run is not None else self._inferred(logged)
            self._count(logged, run, origin)

    def _count(self, logged: LoggedExecution, run: ReportedRun | None, origin: str) -> None:
        f = self.tally.observe(origin, logged.cron_id)
        if run is None:
            return
        f.with_shadow_run += 1
        if not logged.ended or run.status not in RUN_TERMINAL:
            return  # nothing terminal on both sides to compare yet
        if outcome_unreported(run.status) and not self.marks_stops:
            f.ended_without_outcome += 1  # v2.17 cannot say stopped or not: unknown against an unknown end
            return
        f.terminal_pairs += 1
        stopped = run.status is RunStatus.CANCELLED
        f.terminal_status_agree += int(stopped == logged.stopped if self.marks_stops else not stopped)

    def _inferred(self, logged: LoggedExecution) -> str:
        cron = self.get_cron(logged.cron_id) if logged.cron_id is not None else None
        if cron is None or not logged.started_s:
            return UNKNOWN
        return infer_scheduled_origin(cron, logged.started_s, self.scheduler_mode, self.tz).origin


def _closest(runs: list[ReportedRun], logged: LoggedExecution) -> ReportedRun | None:
    """Of the Runs with the log's digest, the one whose start is nearest the log's."""
    if not runs:
        return None
    begin_ms = (logged.started_s or 0) * 1000
    return min(runs, key=lambda run: (abs((run.started_at_ms or 0) - begin_ms), run.id))


def _chunks(items: Iterable[LoggedExecution], size: int) -> Iterator[list[LoggedExecution]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
