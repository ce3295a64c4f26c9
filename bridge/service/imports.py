"""The import's storage port: brand-new Runs, already decided, written in bulk (bridge/jobs/import_legacy/).

The import decides a batch of 2.x's history outside any transaction (each Run a ChangeSet from RunChange and the
opening ladder) and writes it in one short transaction, together with the import cursor. Its rows are those
``RunStore.apply`` writes for each ChangeSet, in fewer statements: a store implements ``apply_many`` with the
row mappers of its ``apply`` (one per table), and tests/contract/test_bulk_apply.py holds every store to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from bridge.domain.aggregate import ChangeSet
from bridge.service.ports import TaskSnapshot

T = TypeVar("T")

CURSOR_KEY = "import_cursor"  # bridge_settings: the last 2.x instance id whose batch committed


class BulkRunWriter(Protocol):
    def apply_many(self, changes: Sequence[ChangeSet]) -> None:
        """Write brand-new Runs, each with its inserted Attempts and its events: exactly the rows ``apply``
        writes for each ChangeSet, in one multi-row insert per table.

        Raises ValueError, writing nothing, when a ChangeSet is not a new Run (an expected version, or an
        Attempt compare-and-set). Raises IdempotencyKeyTakenError when a Run's idempotency key is taken (by a
        committed Run or by another of the batch) and DedupeKeyTakenError when an event's dedupe key is; a
        store need not say which Run it was, so the error may name the batch's first. Then, as after any
        error, the caller's transaction must be rolled back (the unit of work does this when it propagates).
        """
        ...


class ImportStore(BulkRunWriter, Protocol):
    """What one import transaction reads and writes, all in that transaction."""

    def existing_keys(self, project_id: str, keys: Sequence[str]) -> set[str]:
        """Which of these idempotency keys already name a Run of the project (one read)."""
        ...

    def existing_log_refs(self, project_id: str, refs: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
        """Which of these (cron id, log path digest) pairs a Run of the project already holds (one read): before
        v2.21 a log names an execution, and the callbacks' Runs carry the same pair."""
        ...

    def put_task_snapshot(self, snapshot: TaskSnapshot) -> None:
        """Insert the snapshot unless that revision is already stored (as RunStore.put_task_snapshot)."""
        ...

    def import_cursor(self) -> int:
        """The cursor (CURSOR_KEY): 0 when there is none or it cannot be read (the keys keep a rescan safe)."""
        ...

    def advance_import_cursor(self, last_id: int, at_ms: int) -> None:
        """Move the cursor forward to ``last_id``; never back."""
        ...


class ImportUnitOfWork(Protocol):
    """The import's transactions: each call one transaction, retried whole while the store is busy."""

    def write(self, work: Callable[[ImportStore], T]) -> T:
        """One write transaction. Raises StoreBusyError / StoreUnavailableError / StorageError, and whatever
        ``work`` raises (nothing of the transaction is then committed)."""
        ...

    def read(self, work: Callable[[ImportStore], T]) -> T: ...
