"""The reconcile passes' port on the bridge store (implemented by bridge.storage.reconcile_queries.SqlReconcileStore):
one reconciler at a time, the pass history, the reconciler's open mismatches, and the bounded lookups a pass
compares 2.x's rows with.

Errors: none of these raise a bridge error of their own. Each call is its own short transaction, and a failure of
the store propagates as the driver's exception, untranslated; the reconciler records it by its code
(bridge.jobs.reconcile.failure_code) and leaves the rest of the pass to the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class ReconcileLock(Protocol):
    """One reconciler at a time over a store, across processes and replicas."""

    def singleton(self, holder: str, now_ms: int, lease_ms: int) -> AbstractContextManager[bool]:
        """Yields True while this process holds the reconciler lock for the pass, False when another does
        (a lock held elsewhere is no error). ``lease_ms`` bounds how long a lease row outlives a holder that died."""
        ...


class PassHistory(Protocol):
    """One row per reconcile pass: when it ran, how it ended, and its figures."""

    def open_pass(self, at_ms: int) -> int:
        """Record a pass as running; returns its id."""
        ...

    def close_pass(self, pass_id: int, at_ms: int, result: str, reason: str | None, stats: dict[str, Any]) -> None:
        """Record how the pass ended (``reason`` a code, never a message) and drop its scratch rows."""
        ...

    def prune_passes(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` passes started before ``before_ms``, oldest first, with the scratch rows of any
        that died midway; returns how many. The latest pass always stays: health reads it."""
        ...


class ReconcilerMismatches(Protocol):
    """The upkeep of the reconciler's own mismatch kinds (rows are opened through bridge.service.ports.MismatchLog)."""

    def open_reconciler_mismatches(self) -> list[tuple[int, str, int | None, str]]:
        """(id, kind, cron id, dedupe key) of every open reconciler mismatch: what a pass may close."""
        ...

    def resolve_unseen(self, mismatch_ids: Sequence[int], since_ms: int, at_ms: int, pass_id: int) -> int:
        """Close those of ``mismatch_ids`` not seen again since ``since_ms`` as resolved by pass ``pass_id``
        (never deleted); returns how many."""
        ...

    def expire_unseen(self, reasons: Mapping[int, str], since_ms: int, at_ms: int, pass_id: int) -> int:
        """Close each mismatch of ``reasons`` not seen again since ``since_ms`` as expired, with its reason, by pass
        ``pass_id`` (never deleted); returns how many."""
        ...

    def expire_callback_mismatches(self, before_ms: int, at_ms: int, pass_id: int, reason: str) -> int:
        """Close as expired with ``reason`` every open ``compat.*`` callback mismatch last seen before
        ``before_ms``; returns how many."""
        ...

    def runs_created_before(self, run_ids: Sequence[str], before_ms: int) -> set[str]:
        """Those of ``run_ids`` whose Run was created before ``before_ms``."""
        ...


class ReconcileLookups(Protocol):
    """Bounded reads of the shadow Runs a pass compares, and the pass's note of the Runs 2.x's rows matched."""

    def runs_by_keys(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Runs (with attempt 1's fields) for a batch of idempotency keys, by key."""
        ...

    def mark_seen(self, pass_id: int, run_ids: Sequence[str]) -> set[str]:
        """Note Runs a 2.x row matched in this pass; returns those an earlier call of the same pass had noted."""
        ...

    def unseen_runs(self, pass_id: int, since_ms: int, until_ms: int, after: tuple[int, str],
                    limit: int) -> list[dict[str, Any]]:
        """Compared Runs created in the window that no 2.x row matched this pass, keyset by (created_at_ms, id)."""
        ...

    def duplicate_groups(self, since_ms: int, limit: int) -> list[dict[str, Any]]:
        """(cron, pid, log digest) that more than one compared Run claims since ``since_ms``, at most ``limit``."""
        ...

    def crons_with_runs(self, since_ms: int, after_cron: int, limit: int) -> list[int]:
        """Cron ids above ``after_cron`` with recorded (not imported) Runs created since ``since_ms``, ascending,
        at most ``limit``."""
        ...

    def active_by_cron(self, cron_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        """The compared active Runs of these crons with attempt 1's pid, newest first, by cron id."""
        ...


class ReconcileStore(ReconcileLock, PassHistory, ReconcilerMismatches, ReconcileLookups, Protocol):
    """Everything one reconcile pass uses of the bridge store."""


class UnfinishedRuns(Protocol):
    """What startup recovery pages through: the legacy-owned shadow Runs still open."""

    def active_legacy_runs(self, after: tuple[int, str], limit: int) -> list[dict[str, Any]]:
        """Non-terminal legacy-owned Runs (imported history excluded) with Attempt 1's id, status and executor
        handle, keyset by (created_at_ms, id) after ``after``, at most ``limit``."""
        ...
