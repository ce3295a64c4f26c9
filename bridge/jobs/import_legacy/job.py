"""The import job: 2.x's instances streamed from the private copy in keyset batches, each batch planned outside
any transaction, then written in one short one that also advances the cursor; paced on a store with one writer."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bridge.config import Settings, local_zone_name
from bridge.domain.aggregate import ChangeSet
from bridge.domain.errors import SchemaMismatchError, StorageError
from bridge.domain.model import PROJECT_ID
from bridge.jobs.import_legacy.backup import (
    ImportRefusedError,
    checked_reader,
    private_copy,
    remove_copy,
    temp_copy_path,
)
from bridge.jobs.import_legacy.pacing import IMPORT_WRITE_BUDGET_MS, Pacing
from bridge.jobs.import_legacy.plan import (
    DELETED_CRON_REVISION,
    ENDED,
    FINISH_TIME_UNKNOWN,
    Builder,
    Plan,
    Planned,
    begin_seconds,
    import_ended,
    open_shadow,
    speaking_rows,
)
from bridge.jobs.import_legacy.summary import ImportSummary
from bridge.service.imports import ImportStore, ImportUnitOfWork
from bridge.service.ports import Clock, DedupeKeyTakenError, IdempotencyKeyTakenError
from legacy_adapters.callbacks import exit_code_as_given
from legacy_adapters.identity import task_revision, task_snapshot
from legacy_adapters.online_backup import instance_span
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.records import LegacyInstance
from legacy_adapters.scheduler_mode import resolve_scheduler_mode
from legacy_adapters.schema import InstanceStatus, instance_outcome

T = TypeVar("T")

DEFAULT_BATCH_SIZE = 500
CRON_CACHE_SIZE = 4096  # Crontabs rows kept while streaming (bounded LRU)
SNAPSHOT_MEMORY = 4096  # revisions known to be in task_snapshots (bounded LRU), saves a lookup per instance
# A batch write is larger than a shadow write and nobody waits on it: wait longer for a busy store.
IMPORT_BUSY_BUDGET_MS = 5_000
IMPORT_BUSY_ATTEMPTS = 10
BATCH_ATTEMPTS = 3  # a batch that lost a race to a concurrent shadow write is retried whole
BATCH_RETRY_SLEEP_S = 0.05

BatchHook = Callable[[int], None]


class OpenedStore(Protocol):
    """What the import needs of the bridge store the composition root opens for it."""

    @property
    def single_writer(self) -> bool:
        """True when the store takes one writer at a time (SQLite): the import's batches are then paced."""
        ...

    def schema_revisions(self) -> tuple[str | None, str]:
        """(the store's Alembic revision, None when empty; this code's head revision)."""
        ...

    def import_writes(self, *, busy_budget_ms: int, busy_attempts: int) -> ImportUnitOfWork:
        """The import's transactions on this store, each retried whole while the store stays busy, up to
        ``busy_attempts`` times within ``busy_budget_ms``."""
        ...

    def close(self) -> None: ...


def paced_writes(settings: Settings, store: OpenedStore, batch_size: int,
                 write_budget_ms: int) -> tuple[ImportUnitOfWork, Pacing | None]:
    """The import's transactions (waiting longer for a busy store than a shadow write does) and, on a store with
    one writer at a time, the pacing of its batches beside a serving bridge (pacing.py)."""
    uow = store.import_writes(busy_budget_ms=max(settings.sqlite_busy_budget_ms, IMPORT_BUSY_BUDGET_MS),
                              busy_attempts=IMPORT_BUSY_ATTEMPTS)
    return uow, Pacing(batch_size, write_budget_ms / 1000) if store.single_writer else None


def run_import(settings: Settings, open_store: Callable[[], OpenedStore], *,
               open_reader: Callable[[Path], LegacyRecords], clock: Clock, batch_size: int = DEFAULT_BATCH_SIZE,
               console: Console | None = None,
               resume: bool = True, after_batch: BatchHook | None = None,
               write_budget_ms: int = IMPORT_WRITE_BUDGET_MS) -> ImportSummary:
    """Import 2.x's RunningInstances into the bridge store; returns what was done.

    ``open_store`` opens the bridge store once 2.x's database has been copied and checked.
    ``batch_size`` instances are read at a time and written in batches of at most that many (on SQLite, as
    many as ``write_budget_ms`` of write lock allows). ``resume`` False rescans from the first instance (the
    idempotency keys skip what is already there; the cursor never moves back). ``after_batch`` is called with
    the batch's last instance id after each commit.
    ``console`` receives the progress bar (default: stderr). Raises ImportRefusedError (nothing written),
    SchemaMismatchError when the store is not at the current revision, StoreBusyError / StoreUnavailableError,
    and whatever ``after_batch`` raises (the batches committed so far stay, the next run resumes after them).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.monotonic()
    with opened_import(settings, open_reader, open_store) as (reader, store):
        uow, pacing = paced_writes(settings, store, batch_size, write_budget_ms)
        summary = _Importer(settings, uow, reader, batch_size, clock, pacing).run(
            console or Console(stderr=True), resume, after_batch)
    summary.elapsed_s = time.monotonic() - started
    return summary


@contextmanager
def opened_import(settings: Settings, open_reader: Callable[[Path], LegacyRecords],
                  open_store: Callable[[], OpenedStore]) -> Iterator[tuple[LegacyRecords, OpenedStore]]:
    """What every import reads from and writes to: a private copy of 2.x's database (never 2.x's own file), read
    through ``open_reader``, and the bridge store at the code's revision; both let go of afterwards. Raises
    ImportRefusedError without BRIDGE_LEGACY_DATA_DIR, and as the copy, the reader and the store raise."""
    source = settings.legacy_database_path
    if source is None:
        raise ImportRefusedError("BRIDGE_LEGACY_DATA_DIR is not set: nothing to import (the import reads "
                                 "<data dir>/db/database.sqlite)", reason="not_configured")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    copy = temp_copy_path(settings.data_dir)
    store = None
    try:
        private_copy(source, copy)
        reader = checked_reader(source, copy, open_reader)
        store = open_store()
        _require_current_schema(store)
        yield reader, store
    finally:
        if store is not None:
            store.close()
        remove_copy(copy)


def _require_current_schema(store: OpenedStore) -> None:
    revision, head = store.schema_revisions()
    if revision != head:
        raise SchemaMismatchError(f"the bridge store is at revision {revision or 'empty'}, not {head}: "
                                  "run `ql-bridge db upgrade` first", revision=revision)


class _Importer:
    def __init__(self, settings: Settings, uow: ImportUnitOfWork, reader: LegacyRecords, batch_size: int,
                 clock: Clock, pacing: Pacing | None = None) -> None:
        self.reader = reader
        self.batch_size = batch_size
        self.pacing = pacing
        self.clock = clock
        self.cap = settings.payload_cap_bytes
        self.uow = uow
        self.cron = lru_cache(maxsize=CRON_CACHE_SIZE)(reader.get_cron)
        self.snapshots_stored: OrderedDict[str, None] = OrderedDict()
        self.scheduler_mode = resolve_scheduler_mode(settings.legacy_scheduler)
        self.tz = ZoneInfo(settings.legacy_tz or local_zone_name())

    def run(self, console: Console, resume: bool, after_batch: BatchHook | None) -> ImportSummary:
        stored_cursor = self.uow.read(lambda store: store.import_cursor())
        start = stored_cursor if resume else 0
        total, newest = instance_span(self.reader.path, start)
        summary = ImportSummary(total=total, resumed_after=start, last_id=stored_cursor)
        if stored_cursor > newest:
            summary.notes.append(f"the import cursor ({stored_cursor}) is past 2.x's newest instance ({newest}): "
                                 "was 2.x's database replaced? Run again without resuming to rescan it.")
        with Progress(TextColumn("importing 2.x instances"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task("import", total=summary.total)
            instances = self.reader.iter_instances(after_id=start, batch_size=self.batch_size)
            chunks = _chunks(instances, self.batch_size)
            for batch in (b for chunk in chunks for b in self.pacing.batches(chunk)) if self.pacing else chunks:
                counts, revisions = self._commit(batch)
                self._remember(revisions)
                summary._add(counts)
                summary.batches += 1
                summary.last_id = max(summary.last_id, batch[-1].id)
                bar.advance(task, len(batch))
                if after_batch is not None:
                    after_batch(batch[-1].id)
        return summary

    def _commit(self, batch: list[LegacyInstance]) -> tuple[Counter[str], set[str]]:
        """Build the batch's Runs outside any transaction, then write them in one short one.

        The write transaction re-checks the keys, so what a concurrent shadow write committed in between is
        skipped. If a racing insert still wins (or the store stays locked), the batch is retried whole.
        """
        began: list[float] = []  # when each try's transaction had taken the write lock

        def write(tx: _Tx, planned: list[Planned]) -> tuple[Counter[str], set[str]]:
            began.append(time.monotonic())  # BEGIN IMMEDIATE has just taken it
            return self._write(tx, planned, batch)

        for attempt in range(1, BATCH_ATTEMPTS + 1):
            planned = self._prepare(batch)
            if self.pacing is not None:
                self.pacing.wait_turn()
            try:
                at_ms = self.clock.now_ms()
                result = self.uow.write(partial(_write_planned, write, planned, at_ms))
            except (IdempotencyKeyTakenError, DedupeKeyTakenError, StorageError):
                if attempt == BATCH_ATTEMPTS:
                    raise
                time.sleep(BATCH_RETRY_SLEEP_S * attempt)
                continue
            if self.pacing is not None:
                self.pacing.written(len(batch), time.monotonic() - began[-1])
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _remember(self, revisions: Iterable[str]) -> None:
        for revision in revisions:
            self.snapshots_stored[revision] = None
            self.snapshots_stored.move_to_end(revision)
        while len(self.snapshots_stored) > SNAPSHOT_MEMORY:
            self.snapshots_stored.popitem(last=False)

    def _prepare(self, batch: list[LegacyInstance]) -> list[Planned]:
        """Each instance's Run (as a ChangeSet), read-only: what is already in the store is not built again."""
        plans = [Plan.of(instance) for instance in batch]
        present = self.uow.read(lambda store: store.existing_keys(PROJECT_ID, [k for p in plans for k in p.keys]))
        build = Builder(self.clock.now_ms(), self.cap)
        speaking = speaking_rows(plans)
        out = []
        for plan in plans:
            status = plan.instance.status
            if plan.instance.id not in speaking:
                out.append(Planned(plan, "replayed"))
            elif present.intersection(plan.keys):
                out.append(Planned(plan, "skipped"))
            elif plan.instance.cron_id is None or (status not in ENDED and status != InstanceStatus.RUNNING):
                out.append(Planned(plan, "unsupported"))
            else:
                cron = self.cron(plan.instance.cron_id)
                revision = task_revision(cron) if cron is not None else DELETED_CRON_REVISION
                snapshot = task_snapshot(cron, revision, build.at_ms) if cron is not None else None
                if status == InstanceStatus.RUNNING:
                    decision = infer_scheduled_origin(cron, begin_seconds(plan.instance), self.scheduler_mode,
                                                      self.tz)
                    out.append(Planned(plan, "handed_to_shadow", open_shadow(build, plan, revision, decision),
                                        plan.execution_key, "running", snapshot))
                else:
                    ended = instance_outcome(InstanceStatus(int(status or 0)),
                                             exit_code_as_given(plan.instance.exit_code))
                    change, reached = import_ended(build, plan, revision, ended)
                    out.append(Planned(plan, "imported", change, plan.import_key, reached.value, snapshot))
        return out

    # One transaction: it may run again on a busy retry, so it only touches the database.
    def _write(self, tx: _Tx, planned: list[Planned],
               batch: list[LegacyInstance]) -> tuple[Counter[str], set[str]]:
        store = tx.store
        present = store.existing_keys(PROJECT_ID, [p.key for p in planned if p.key is not None])
        counts: Counter[str] = Counter(scanned=len(batch))
        revisions: set[str] = set()
        changes: list[ChangeSet] = []
        for p in planned:
            if p.change is None or p.key is None:
                counts[p.outcome] += 1
                continue
            if p.key in present:  # committed by someone else since _prepare (or twice in this batch)
                counts["skipped"] += 1
                continue
            present.add(p.key)
            changes.append(p.change)
            counts[p.outcome] += 1
            counts["unusable_times"] += p.plan.unusable
            if p.outcome == "imported":
                counts[f"status:{p.status}"] += 1
                counts["finish_time_unknown"] += p.change.run.error_code == FINISH_TIME_UNKNOWN
            if p.snapshot is None:
                counts["deleted_crons"] += 1
            elif p.snapshot.task_revision not in revisions and p.snapshot.task_revision not in self.snapshots_stored:
                store.put_task_snapshot(p.snapshot)
                revisions.add(p.snapshot.task_revision)
        store.apply_many(changes)  # what RunStore.apply would write for each, one multi-row insert per table
        store.advance_import_cursor(batch[-1].id, tx.at_ms)
        return counts, revisions


@dataclass(frozen=True)
class _Tx:
    """One write transaction of the import: its store, and when it began (the cursor's stamp)."""

    store: ImportStore
    at_ms: int



def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _write_planned(write: Callable[[_Tx, list[Planned]], T], planned: list[Planned], at_ms: int, store: Any) -> T:
    """One batch's write on the store a unit of work hands out, at the batch's time."""
    return write(_Tx(store, at_ms), planned)
