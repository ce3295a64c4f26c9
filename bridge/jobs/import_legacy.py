"""`ql-bridge import-legacy`: 2.x's RunningInstances history as Runs (legacy-2x.md 2.4, 5.1, 8, 9.10).

2.x's database is never read in place for long and never written: a consistent copy is taken with SQLite's
Online Backup API in short steps (ADR-0064/0095), checked to be a 2.x database, streamed in keyset batches,
and deleted afterwards. A batch's Runs are built first (RunChange and the opening ladder, outside any
transaction), then written in one short bridge-store transaction that re-checks their keys and also advances the
``import_cursor`` setting, so an interrupted import resumes after its last committed batch; idempotency keys make
a re-run (even without the cursor) import nothing twice. The writes go through the import's storage port
(bridge/service/imports.py), which the composition root opens on the store: its bulk apply writes the rows
RunStore.apply would, with the same row mappers.

A store with one writer at a time (SQLite) is shared with a serving bridge whose shadow writes have 50 ms
before the shell is answered: there each write batch is sized so that its transaction holds the store's write
lock for about ``write_budget_ms`` (measured, batch after batch), and the next one begins no sooner than
IMPORT_GAP_MS after it, long enough for a writer polling in SQLite's busy handler to get in between.

One Run per execution: the rows of a batch are grouped by the execution identity the reconciler uses (cron id,
pid, log path, begin second; replayed start callbacks give 2.x more than one row), and the row that speaks for
the execution is chosen by ``legacy_adapters.identity.speaking_row``, the rule startup recovery and the
reconciler follow. The others are counted as ``replayed``. Every row of the execution names the same key
(``instance_import_key``), so a row of it in a later batch, or a rescan, finds the Run already there (as a
reconcile pass, the first batch an execution appears in decides). For that row:

- finished / error / stopped: a terminal Run + Attempt 1 in mode ``legacy_import`` (key
  ``legacy-import:<cron>:<pid>:<log digest>:<start ms>``, or ``legacy-import:<instance id>`` for a row with no
  usable cron id or start; origin unknown, actor system, every step marked synthesized): succeeded,
  failed (``process_exit_error``), cancelled (``cancelled_by_user``, exit code kept). A stopped row without
  ``finished_at`` is 2.x's boot reset (5.1): cancelled with error_code ``finish_time_unknown`` and no finish time.
- running: handed to the shadow path, i.e. an active shadow Run under the exact key ShadowRecorder uses, so the
  shell's end callback (or reconciliation) closes it as usual.
- an instance whose Run already exists (any of its keys, the row-id key of earlier imports included) is skipped.

Seconds become milliseconds only through ``legacy_adapters.timeconv``.
"""

from __future__ import annotations

import math
import os
import sqlite3
import tempfile
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Engine

from bridge.config import Settings, local_zone_name
from bridge.domain.aggregate import ChangeSet, RunChange
from bridge.domain.errors import BridgeError, SchemaMismatchError, StorageError
from bridge.domain.events import Actor, ActorType
from bridge.domain.keys import import_key
from bridge.domain.ladder import open_to_running
from bridge.domain.model import (
    IMPORT_TRIGGER,
    IMPORTED_MODE,
    PROJECT_ID,
    AttemptStatus,
    Mode,
    Owner,
    Run,
    RunAttempt,
    RunStatus,
    new_legacy_run,
)
from bridge.service.clock import SystemClock
from bridge.service.ids import new_id
from bridge.service.imports import CURSOR_KEY, ImportStore, ImportUnitOfWork
from bridge.service.ports import Clock, DedupeKeyTakenError, IdempotencyKeyTakenError, TaskSnapshot
from bridge.service.shadow import CallbackFacts
from bridge.storage.engine import store_capabilities
from bridge.storage.migrate import current_revision, head_revision
from legacy_adapters.callbacks import exit_code_as_given, log_path_digest
from legacy_adapters.errors import LegacyDatabaseError, LegacyTimeError
from legacy_adapters.identity import instance_import_key, speaking_row, task_revision, task_snapshot
from legacy_adapters.origin import OriginDecision, infer_scheduled_origin
from legacy_adapters.reader import LegacyReader
from legacy_adapters.records import LegacyInstance
from legacy_adapters.scheduler_mode import detect_scheduler_mode
from legacy_adapters.schema import ENDED_INSTANCE, EndedAs, InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.reconcile import instance_defects

T = TypeVar("T")

DELETED_CRON_REVISION = "deleted-cron"  # task_revision when the instance's Crontabs row is gone
FINISH_TIME_UNKNOWN = "finish_time_unknown"  # error_code of a stopped row 2.x's boot reset left without finished_at
# origin_evidence of an imported Run (of a still-running one: the prefix of its inferred origin's evidence).
IMPORT_EVIDENCE = "legacy_import"
IMPORTER = Actor(ActorType.SYSTEM, "legacy_import")  # the actor of every step the import writes
DEFAULT_BATCH_SIZE = 500
CRON_CACHE_SIZE = 4096  # Crontabs rows kept while streaming (bounded LRU)
SNAPSHOT_MEMORY = 4096  # revisions known to be in task_snapshots (bounded LRU), saves a lookup per instance
# Online Backup API steps: each step holds 2.x's SHARED lock only while it copies this many pages. A write by
# 2.x between steps restarts the copy; after a few restarts the step grows so the copy can finish.
BACKUP_PAGES = 256
BACKUP_SLEEP_S = 0.005
BACKUP_RESTARTS_PER_STEP_SIZE = 3
BACKUP_MAX_PAGES = 65_536
# A batch write is larger than a shadow write and nobody waits on it: wait longer for a busy store.
IMPORT_BUSY_BUDGET_MS = 5_000
IMPORT_BUSY_ATTEMPTS = 10
BATCH_ATTEMPTS = 3  # a batch that lost a race to a concurrent shadow write is retried whole
BATCH_RETRY_SLEEP_S = 0.05
# On a store with one writer at a time: how long one batch may hold the write lock. A shadow write that
# arrives meanwhile waits that long plus its busy handler's next poll (1, 3, 8, 18, 33 ms ...), well inside
# its 50 ms budget. The batch size follows the measured hold, between MIN_WRITE_ROWS and batch_size.
IMPORT_WRITE_BUDGET_MS = 15
FIRST_WRITE_ROWS = 32
MIN_WRITE_ROWS = 8
# ... and how long the lock is left free after each batch: longer than the busy handler's poll interval
# for a writer that has waited up to 50 ms (20 ms), so that one gets in. Building the next batch's Runs
# happens in this gap.
IMPORT_GAP_MS = 25

_SYNTH = {"synthesized": True}
_SAFE_INTEGER = 2**53 - 1  # what 2.x accepts (Joi: a safe number); kept as given since revision 0014


class ImportRefusedError(BridgeError):
    """The import did not start: no 2.x database is configured, or the file is not one. Nothing was written."""

    code = "LEGACY_IMPORT_REFUSED"

    def __init__(self, message: str, *, reason: str, path: str | None = None) -> None:
        super().__init__(message, reason=reason, path=path)
        self.reason = reason
        self.path = path


@dataclass
class ImportSummary:
    """What one ``run_import`` did. ``imported`` counts the legacy_import Runs written (terminal history);
    running instances handed to the shadow path are counted in ``handed_to_shadow`` only."""

    total: int = 0  # instances after the cursor when the import began
    scanned: int = 0
    imported: int = 0
    skipped: int = 0  # a Run for the instance already existed (import key or shadow key)
    replayed: int = 0  # rows of an execution 2.x recorded more than once, other than the one that speaks for it
    handed_to_shadow: int = 0
    unsupported: int = 0  # an unknown status or no cron id: not imported
    by_status: dict[str, int] = field(default_factory=dict)  # imported Runs by Run status
    finish_time_unknown: int = 0  # of the cancelled ones: 2.x's boot reset, no finished_at
    deleted_crons: int = 0  # imported with the "deleted-cron" revision
    unusable_times: int = 0  # a time or exit code 2.x stored in a form that cannot be converted: kept null
    batches: int = 0
    resumed_after: int = 0  # the cursor the import started from (0: the beginning)
    last_id: int = 0  # the cursor after the import
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def _add(self, counts: Counter[str]) -> None:
        self.scanned += counts["scanned"]
        self.imported += counts["imported"]
        self.skipped += counts["skipped"]
        self.replayed += counts["replayed"]
        self.handed_to_shadow += counts["handed_to_shadow"]
        self.unsupported += counts["unsupported"]
        self.finish_time_unknown += counts["finish_time_unknown"]
        self.deleted_crons += counts["deleted_crons"]
        self.unusable_times += counts["unusable_times"]
        for key, n in counts.items():
            if key.startswith("status:"):
                status = key.removeprefix("status:")
                self.by_status[status] = self.by_status.get(status, 0) + n


BatchHook = Callable[[int], None]


class OpenedStore(Protocol):
    """What the import needs of the bridge store the composition root opens for it."""

    engine: Engine

    def import_writes(self, *, busy_budget_ms: int, busy_attempts: int) -> ImportUnitOfWork:
        """The import's transactions on this store, each retried whole while the store stays busy, up to
        ``busy_attempts`` times within ``busy_budget_ms``."""
        ...

    def close(self) -> None: ...


def run_import(settings: Settings, open_store: Callable[[], OpenedStore], *, batch_size: int = DEFAULT_BATCH_SIZE,
               console: Console | None = None,
               resume: bool = True, after_batch: BatchHook | None = None, clock: Clock | None = None,
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
    source = settings.legacy_database_path
    if source is None:
        raise ImportRefusedError("BRIDGE_LEGACY_DATA_DIR is not set: nothing to import (the import reads "
                                 "<data dir>/db/database.sqlite)", reason="not_configured")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    copy = _temp_copy_path(settings.data_dir)
    store = None
    try:
        backup_copy(source, copy)
        reader = _checked_reader(source, copy)
        store = open_store()
        _require_current_schema(store.engine)
        one_writer = store_capabilities(store.engine).single_writer
        pacing = _Pacing(batch_size, write_budget_ms / 1000) if one_writer else None
        uow = store.import_writes(busy_budget_ms=max(settings.sqlite_busy_budget_ms, IMPORT_BUSY_BUDGET_MS),
                                  busy_attempts=IMPORT_BUSY_ATTEMPTS)
        summary = _Importer(settings, uow, reader, batch_size, clock or SystemClock(), pacing).run(
            console or Console(stderr=True), resume, after_batch)
    finally:
        if store is not None:
            store.close()
        _remove(copy)
    summary.elapsed_s = time.monotonic() - started
    return summary


def print_summary(summary: ImportSummary, console: Console) -> None:
    """The summary as a small table (and its notes, if any)."""
    table = Table(title="2.x import", show_header=True, header_style="bold")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("instances scanned", f"{summary.scanned} of {summary.total}")
    table.add_row("imported (legacy_import Runs)", str(summary.imported))
    # Boot-reset rows are cancelled Runs, so their count sits under "cancelled".
    statuses = set(summary.by_status) | ({"cancelled"} if summary.finish_time_unknown else set())
    for status in sorted(statuses):
        table.add_row(f"  {status}", str(summary.by_status.get(status, 0)))
        if status == "cancelled" and summary.finish_time_unknown:
            table.add_row(f"    of which {FINISH_TIME_UNKNOWN} (2.x boot reset)", str(summary.finish_time_unknown))
    table.add_row("running: handed to the shadow path", str(summary.handed_to_shadow))
    table.add_row("skipped (already present)", str(summary.skipped))
    if summary.replayed:
        table.add_row("replayed rows of an execution (folded into its one Run)", str(summary.replayed))
    if summary.unsupported:
        table.add_row("not imported (unknown status or no cron id)", str(summary.unsupported))
    if summary.deleted_crons:
        table.add_row("of a deleted cron", str(summary.deleted_crons))
    if summary.unusable_times:
        table.add_row("unusable times / exit codes (kept null)", str(summary.unusable_times))
    table.add_row("batches committed", str(summary.batches))
    table.add_row("cursor", f"{summary.resumed_after} -> {summary.last_id}")
    rate = summary.scanned / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    table.add_row("elapsed", f"{summary.elapsed_s:.1f} s ({rate:.0f} instances/s)")
    console.print(table)
    for note in summary.notes:
        console.print(f"note: {note}")


# -- the copy of 2.x's database ---------------------------------------------------------------------------------


def backup_copy(source: Path, dest: Path, *, pages: int = BACKUP_PAGES, sleep_s: float = BACKUP_SLEEP_S,
                on_step: Callable[[int, int], None] | None = None) -> None:
    """Copy ``source`` to ``dest`` with the Online Backup API, opened read-only, in steps of ``pages`` pages.

    Between steps 2.x's database is not locked at all; if 2.x writes meanwhile, SQLite restarts the copy, so
    the result is always one consistent state. Every few restarts the step doubles (up to a whole-file step),
    so steady writes cannot keep the copy from finishing. ``on_step(remaining, total)`` is called after each
    step. Raises ImportRefusedError when the source is missing or is not an SQLite database.
    """
    if not source.is_file():
        raise ImportRefusedError(f"2.x's database {source} does not exist", reason="missing", path=str(source))
    step = pages
    while True:
        restarts = _Restarts(BACKUP_RESTARTS_PER_STEP_SIZE if step != -1 else None, on_step)
        try:
            with closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=0.3)) as src, \
                    closing(sqlite3.connect(dest)) as dst:
                src.backup(dst, pages=step, progress=restarts, sleep=sleep_s)
            return
        except _TooManyRestarts:
            step = -1 if step * 2 > BACKUP_MAX_PAGES else step * 2
        except sqlite3.DatabaseError as exc:
            raise ImportRefusedError(f"{source} is not a QingLong 2.x database ({type(exc).__name__}: {exc})",
                                     reason="not_legacy", path=str(source)) from exc


class _TooManyRestarts(Exception):
    pass


class _Restarts:
    """Backup progress callback: a successful step that did not shrink ``remaining`` means SQLite restarted
    the copy because 2.x wrote in between (a busy step is only waited out)."""

    def __init__(self, limit: int | None, on_step: Callable[[int, int], None] | None) -> None:
        self.limit, self.on_step = limit, on_step
        self.seen = 0
        self.last_remaining: int | None = None

    def __call__(self, status: int, remaining: int, total: int) -> None:
        if self.on_step is not None:
            self.on_step(remaining, total)
        if status == sqlite3.SQLITE_OK and self.last_remaining is not None and remaining >= self.last_remaining:
            self.seen += 1
            if self.limit is not None and self.seen >= self.limit:
                raise _TooManyRestarts()
        self.last_remaining = remaining


def _temp_copy_path(data_dir: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=".legacy-import-", suffix=".sqlite", dir=data_dir)
    os.close(fd)
    return Path(name)


def _remove(copy: Path) -> None:
    for path in (copy, copy.with_name(copy.name + "-journal")):
        path.unlink(missing_ok=True)


def _checked_reader(source: Path, copy: Path) -> LegacyReader:
    reader = LegacyReader(copy)
    try:
        reader.check_is_legacy_database()
    except LegacyDatabaseError as exc:
        detail = {"not_legacy": "it has no Crontabs(id, command, schedule) table",
                  "unsupported": "it already holds QingLong 3.0 tables"}.get(exc.reason, exc.reason)
        raise ImportRefusedError(f"{source} is not a QingLong 2.x database: {detail}", reason=exc.reason,
                                 path=str(source)) from exc
    return reader


def _require_current_schema(engine: Engine) -> None:
    revision, head = current_revision(engine), head_revision()
    if revision != head:
        raise SchemaMismatchError(f"the bridge store is at revision {revision or 'empty'}, not {head}: "
                                  "run `ql-bridge db upgrade` first", revision=revision)


def _instance_span(copy: Path, after_id: int) -> tuple[int, int]:
    """(instances with an id above ``after_id``, the newest instance id) of the private copy."""
    with closing(sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        table = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'RunningInstances'"
        if not conn.execute(table).fetchone():
            return 0, 0
        count, newest = conn.execute("SELECT count(*) FILTER (WHERE id > ?), coalesce(max(id), 0) "
                                     "FROM RunningInstances", (after_id,)).fetchone()
        return int(count), int(newest)


# -- the import loop ------------------------------------------------------------------------------------------------


_ENDED = {int(status): ended for status, ended in ENDED_INSTANCE.items()}


class _Pacing:
    """Write batches sized to a budget of write-lock time, with a gap after each: for a store with one
    writer at a time, shared with a serving bridge."""

    def __init__(self, batch_size: int, budget_s: float) -> None:
        self.budget_s = budget_s
        self.most = batch_size
        self.least = min(batch_size, MIN_WRITE_ROWS)
        self.rows = min(batch_size, FIRST_WRITE_ROWS)
        self._free_from = 0.0  # monotonic time before which the next batch does not take the lock

    def batches(self, chunk: list[T]) -> Iterator[list[T]]:
        """``chunk`` in batches of the current size (which each written batch adjusts)."""
        start = 0
        while start < len(chunk):
            batch = chunk[start:start + self.rows]
            start += len(batch)
            yield batch

    def wait_turn(self) -> None:
        """Before taking the write lock: the gap after the last batch, less what building this one took."""
        pause = self._free_from - time.monotonic()
        if pause > 0:
            time.sleep(pause)

    def written(self, rows: int, held_s: float) -> None:
        """A batch of ``rows`` held the lock ``held_s``: size the next one to the budget (at most doubling)."""
        self._free_from = time.monotonic() + IMPORT_GAP_MS / 1000
        fits = rows * self.budget_s / max(held_s, 1e-4)
        self.rows = int(max(self.least, min(self.most, 2 * self.rows, (self.rows + fits) / 2)))


class _Importer:
    def __init__(self, settings: Settings, uow: ImportUnitOfWork, reader: LegacyReader, batch_size: int,
                 clock: Clock, pacing: _Pacing | None = None) -> None:
        self.reader = reader
        self.batch_size = batch_size
        self.pacing = pacing
        self.clock = clock
        self.cap = settings.payload_cap_bytes
        self.uow = uow
        self.cron = lru_cache(maxsize=CRON_CACHE_SIZE)(reader.get_cron)
        self.snapshots_stored: OrderedDict[str, None] = OrderedDict()
        self.scheduler_mode = (detect_scheduler_mode() if settings.legacy_scheduler == "auto"
                               else settings.legacy_scheduler)
        self.tz = ZoneInfo(settings.legacy_tz or local_zone_name())

    def run(self, console: Console, resume: bool, after_batch: BatchHook | None) -> ImportSummary:
        stored_cursor = self.uow.read(lambda store: store.import_cursor())
        start = stored_cursor if resume else 0
        total, newest = _instance_span(self.reader.path, start)
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

        def write(tx: _Tx, planned: list[_Planned]) -> tuple[Counter[str], set[str]]:
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

    def _prepare(self, batch: list[LegacyInstance]) -> list[_Planned]:
        """Each instance's Run (as a ChangeSet), read-only: what is already in the store is not built again."""
        plans = [_Plan.of(instance) for instance in batch]
        present = self.uow.read(lambda store: store.existing_keys(PROJECT_ID, [k for p in plans for k in p.keys]))
        build = _Builder(self.clock.now_ms(), self.cap)
        speaking = _speaking_rows(plans)
        out = []
        for plan in plans:
            status = plan.instance.status
            if plan.instance.id not in speaking:
                out.append(_Planned(plan, "replayed"))
            elif present.intersection(plan.keys):
                out.append(_Planned(plan, "skipped"))
            elif plan.instance.cron_id is None or (status not in _ENDED and status != InstanceStatus.RUNNING):
                out.append(_Planned(plan, "unsupported"))
            else:
                cron = self.cron(plan.instance.cron_id)
                revision = task_revision(cron) if cron is not None else DELETED_CRON_REVISION
                snapshot = task_snapshot(cron, revision, build.at_ms) if cron is not None else None
                if status == InstanceStatus.RUNNING:
                    decision = infer_scheduled_origin(cron, _begin_seconds(plan.instance), self.scheduler_mode,
                                                      self.tz)
                    out.append(_Planned(plan, "handed_to_shadow", _open_shadow(build, plan, revision, decision),
                                        plan.shadow_key, "running", snapshot))
                else:
                    change, reached = _import_ended(build, plan, revision, _ENDED[int(status or 0)])
                    out.append(_Planned(plan, "imported", change, plan.import_key, reached.value, snapshot))
        return out

    # One transaction: it may run again on a busy retry, so it only touches the database.
    def _write(self, tx: _Tx, planned: list[_Planned],
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


@dataclass(frozen=True)
class _Planned:
    """What _prepare decided for one instance: an outcome, and for a new Run its ChangeSet and key."""

    plan: _Plan
    outcome: str  # imported | handed_to_shadow | skipped | unsupported | replayed
    change: ChangeSet | None = None
    key: str | None = None
    status: str | None = None
    snapshot: TaskSnapshot | None = None


@dataclass(frozen=True)
class _Builder:
    """Where new Runs are built: RunTransaction.create's work, done before any transaction opens."""

    at_ms: int
    cap: int

    def new_id(self) -> str:
        return new_id()

    def create(self, run: Run, payload: dict[str, Any]) -> RunChange:
        return RunChange.create(run, actor=IMPORTER, at_ms=self.at_ms, new_id=new_id, payload_cap_bytes=self.cap,
                                payload=payload)


def _speaking_rows(plans: list[_Plan]) -> set[int]:
    """The ids of the rows that speak for their execution, one per execution of the batch."""
    executions: dict[str, list[LegacyInstance]] = {}
    for plan in plans:
        executions.setdefault(plan.import_key, []).append(plan.instance)
    return {speaking_row(rows, {i.id for i in rows if instance_defects(i, math.inf)}).id
            for rows in executions.values()}


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


@dataclass(frozen=True)
class _Plan:
    """One instance with its times in ms (None when unknown or unusable) and both of its possible Run keys."""

    instance: LegacyInstance
    started_ms: int | None
    finished_ms: int | None
    exit_code: int | float | None
    log_ref: str | None
    unusable: int  # times / exit code that could not be converted

    @property
    def import_key(self) -> str:
        """The key of the execution's one imported Run (the row's own id when it has no execution identity)."""
        return instance_import_key(self.instance)

    @property
    def facts(self) -> CallbackFacts:
        return CallbackFacts(cron_id=self.instance.cron_id or 0, pid=self.instance.pid, log_ref=self.log_ref,
                             started_at_ms=self.started_ms, duration_ms=None, exit_code=None, received_at_ms=0)

    @property
    def shadow_key(self) -> str:
        """ShadowRecorder's key for this execution (CallbackFacts.execution_key, bridge.jobs.reconcile.run_key)."""
        return self.facts.execution_key

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key a Run of this execution may already have: imported (also by the row-id key of earlier
        imports) or recorded by the shadow path."""
        return self.import_key, import_key(self.instance.id), self.shadow_key

    @classmethod
    def of(cls, instance: LegacyInstance) -> _Plan:
        unusable: list[str] = []
        return cls(instance, _ms(instance.started_at, "started_at", unusable),
                   _ms(instance.finished_at, "finished_at", unusable), _exit_code(instance.exit_code, unusable),
                   log_path_digest(instance.log_path), len(unusable))


def _ms(seconds: int | float | None, name: str, unusable: list[str]) -> int | None:
    if seconds is None:
        return None
    try:
        return epoch_seconds_to_ms(seconds, field=name)
    except LegacyTimeError:
        unusable.append(name)
        return None


def _exit_code(value: int | float | None, unusable: list[str]) -> int | float | None:
    """The row's exit code as 2.x keeps it (a fraction stays one); one outside what Joi accepts is unusable."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value) and abs(value) <= _SAFE_INTEGER:
        return exit_code_as_given(value)
    unusable.append("exit_code")
    return None


def _begin_seconds(instance: LegacyInstance) -> int | None:
    value = instance.started_at
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _import_ended(build: _Builder, plan: _Plan, revision: str, ended: EndedAs) -> tuple[ChangeSet, RunStatus]:
    """A terminal Run + Attempt 1 up the opening ladder and on to the end, each step marked synthesized, and the
    status reached."""
    instance, started, finished = plan.instance, plan.started_ms, plan.finished_ms
    cron_id = instance.cron_id or 0
    error_code = ended.error_code.value if ended.error_code is not None else None
    if instance.status == InstanceStatus.STOPPED and instance.finished_at is None:
        error_code = FINISH_TIME_UNKNOWN  # 2.x's boot reset (legacy-2x.md 5.1): when it ended is not known
    created = started if started is not None else build.at_ms
    duration = finished - started if started is not None and finished is not None and finished >= started else None
    run = new_legacy_run(
        run_id=build.new_id(), cron_id=cron_id, task_revision=revision, trigger_type=IMPORT_TRIGGER,
        created_at_ms=created, idempotency_key=plan.import_key, origin=None, origin_evidence=IMPORT_EVIDENCE,
        mode=IMPORTED_MODE, owner=Owner.LEGACY.value, legacy_pid=instance.pid, log_ref=plan.log_ref, synthesized=True,
    )
    change = build.create(run, {"evidence": IMPORT_EVIDENCE, "legacy_status": instance.status, **_SYNTH})
    attempt = open_to_running(change, _attempt_1(build, run, created, plan), started_at_ms=started)
    end: dict[str, Any] = {k: v for k, v in (("exit_code", plan.exit_code), ("finished_at_ms", finished),
                                             ("duration_ms", duration), ("error_code", error_code)) if v is not None}
    errors = {"error_code": error_code} if error_code else {}
    change.move_attempt(attempt, ended.attempt, payload={**end, **_SYNTH}, finished_at_ms=finished,
                        exit_code=plan.exit_code, **errors)
    reached = change.move_run(ended.run, payload={**end, **_SYNTH}, finished_at_ms=finished, duration_ms=duration,
                              **errors)
    return change.result(), reached


def _open_shadow(build: _Builder, plan: _Plan, revision: str, decision: OriginDecision) -> ChangeSet:
    """A still-running instance as the shadow path opens one (bridge/service/shadow.py ``_open_run`` with a
    synthesized start, up the same ladder): same key, owner legacy, mode shadow, Run and Attempt 1 running, so
    the shell's end callback closes it through ShadowRecorder.record_end."""
    instance, facts = plan.instance, plan.facts
    started = plan.started_ms if plan.started_ms is not None else build.at_ms
    evidence = f"{IMPORT_EVIDENCE}:{decision.evidence}"
    run = new_legacy_run(
        run_id=build.new_id(), cron_id=facts.cron_id, task_revision=revision, trigger_type=IMPORT_TRIGGER,
        created_at_ms=started, idempotency_key=facts.execution_key, origin=decision.origin, origin_evidence=evidence,
        mode=Mode.SHADOW.value, owner=Owner.LEGACY.value, legacy_pid=instance.pid, log_ref=plan.log_ref,
        synthesized=True, received_at_ms=build.at_ms,
    )
    change = build.create(run, {"origin": decision.origin, "evidence": evidence, "legacy_status": instance.status,
                                **_SYNTH})
    open_to_running(change, _attempt_1(build, run, started, plan), started_at_ms=started)
    return change.result()


def _attempt_1(build: _Builder, run: Run, created_at_ms: int, plan: _Plan) -> RunAttempt:
    """The instance's Attempt 1, claimed (the ladder takes it up), synthesized like every imported step."""
    return RunAttempt(id=build.new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED,
                      executor_type="legacy_shell", callback_sequence=0, created_at_ms=created_at_ms,
                      pid=plan.instance.pid, log_artifact_id=plan.log_ref, synthesized=True)


__all__ = [
    "CURSOR_KEY", "DELETED_CRON_REVISION", "FINISH_TIME_UNKNOWN", "ImportRefusedError",
    "ImportSummary", "backup_copy", "print_summary", "run_import",
]


def _write_planned(write: Callable[[_Tx, list[_Planned]], T], planned: list[_Planned], at_ms: int, store: Any) -> T:
    """One batch's write on the store a unit of work hands out, at the batch's time."""
    return write(_Tx(store, at_ms), planned)
