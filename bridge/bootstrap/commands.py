"""The composition root of the one-shot commands (`ql-bridge import-legacy`, `report`, `projection retry`): each
job given the store and the 2.x readers it works on, built here and nowhere below."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from bridge.bootstrap import build_readers, build_store, store_deadlines
from bridge.config import Settings
from bridge.service.clock import SystemClock
from bridge.service.ports import Clock
from bridge.storage.engine import make_engine

if TYPE_CHECKING:
    from bridge.jobs.import_legacy.summary import ImportSummary
    from bridge.service.reports import ReportSources
    from projections.projector import ProjectionMetrics, Projector


def run_legacy_import(settings: Settings, **options: Any) -> ImportSummary:
    """`bridge import-legacy`: the import job, given the store it writes to (opened after 2.x's copy is checked),
    reading what the release keeps: its RunningInstances rows, or before v2.21 its task logs (one choice, from
    the release profile; docs/reconciliation.md#releases-before-v221)."""
    from bridge.bootstrap.release import decide_legacy_release, open_records, task_logs
    from bridge.jobs.import_legacy import run_import
    from bridge.jobs.import_legacy.logs import run_log_import

    options.setdefault("clock", SystemClock())
    release = decide_legacy_release(settings) if settings.legacy_data_dir is not None else None
    open_reader = partial(open_records, release=release)
    if release is None or release.has_running_instances:
        return run_import(settings, partial(build_store, settings), open_reader=open_reader, **options)
    return run_log_import(settings, partial(build_store, settings), open_reader=open_reader,
                          logs=task_logs(settings, release), **options)


def requeue_parked_projections(settings: Settings) -> int:
    """`bridge projection retry` on the configured store."""
    from bridge.storage.outbox import SqlOutbox

    store = build_store(settings)
    try:
        return SqlOutbox(store.engine).requeue_parked(SystemClock().now_ms())
    finally:
        store.close()


def build_projector(engine: Engine, legacy_database_path: str | PathLike[str], metrics: ProjectionMetrics,
                    clock: Clock | None = None, **options: Any) -> Projector:
    """One Projector over the bridge store and 2.x's database.sqlite, driven by its caller (no thread)."""
    from bridge.storage.outbox import SqlOutbox
    from legacy_adapters.status_writer import LegacyStatusWriter
    from projections.projector import Projector

    return Projector(SqlOutbox(engine), LegacyStatusWriter(legacy_database_path), metrics, clock or SystemClock(),
                     **options)


def write_cutover_report(settings: Settings, **options: Any) -> tuple[Path, Path]:
    """`bridge report`: the report job, given the store's side once its arguments are checked, and the 2.x release
    its header names (refused, naming it, when the bridge does not support it)."""
    from bridge.bootstrap.release import decide_legacy_release, open_records, task_logs
    from bridge.jobs.report import run_report

    release = decide_legacy_release(settings) if settings.legacy_data_dir is not None else None
    # Before v2.21 an execution's record is its task log: the report scans those (docs/releases.md).
    logs = task_logs(settings, release) if release is not None and not release.has_running_instances else None
    return run_report(settings, partial(_report_store, settings), partial(open_records, release=release),
                      release=release, logs=logs, **options)


@contextmanager
def _report_store(settings: Settings) -> Iterator[ReportSources]:
    engine = make_engine(settings.database_url, pg_search_path=settings.database_schema,
                         deadlines=store_deadlines(settings))
    try:
        yield report_sources(engine)
    finally:
        engine.dispose()


def report_sources(engine: Engine) -> ReportSources:
    """What a cutover report reads and where it is kept (bridge.service.reports.ReportSources)."""
    from bridge.jobs.project import projection_status
    from bridge.service.reports import ReportSources
    from bridge.storage.report_queries import ReportQueries

    queries, readers, clock = ReportQueries(engine), build_readers(engine), SystemClock()
    return ReportSources(reads=queries, archive=queries, coverage=readers.coverage,
                         outbox_status=lambda: projection_status(readers.outbox, clock.now_ms()))
