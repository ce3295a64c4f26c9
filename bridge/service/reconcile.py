"""The reconcile passes' port on the bridge store (implemented by bridge.storage.reconcile_queries.SqlReconcileStore):
one reconciler at a time, the pass history, the reconciler's open mismatches, and the bounded lookups a pass
compares 2.x's rows with. Rows cross it as frozen records with the domain's enums (ComparedRun, UnseenRun,
DuplicateGroup, ActiveRun, UnfinishedRun, OpenMismatch), mapped from the tables in bridge.storage.rows.

Errors: none of these raise a bridge error of their own. Each call is its own short transaction, and a failure of
the store propagates as the driver's exception, untranslated; the reconciler records it by its code
(bridge.jobs.reconcile.failure_code) and leaves the rest of the pass to the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import AttemptStatus, Origin, RunMode, RunStatus


class OpenMismatch(NamedTuple):
    """An open reconciler mismatch, as much of it as a pass needs to decide whether to close it."""

    id: int
    kind: MismatchKind
    legacy_cron_id: int | None
    dedupe_key: str


@dataclass(frozen=True, slots=True)
class ComparedRun:
    """A Run a 2.x row's key found, with Attempt 1's facts: what the pass compares that row with. The times and
    the exit code are Attempt 1's, as 2.x keeps them for its one execution."""

    id: str
    idempotency_key: str
    status: RunStatus
    created_at_ms: int
    origin: Origin | None = None
    mode: RunMode | None = None
    legacy_cron_id: int | None = None
    cancel_requested_at_ms: int | None = None
    error_code: str | None = None
    attempt_id: str | None = None
    attempt_status: AttemptStatus | None = None
    exit_code: int | float | None = None  # 2.x keeps any JS number; a fraction stays one
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    pid: int | None = None
    executor_handle: str | None = None  # legacy_adapters.process_identity.ProcessHandle as JSON


@dataclass(frozen=True, slots=True)
class UnseenRun:
    """A compared Run created in the window that no 2.x row matched in this pass: an orphan once past grace."""

    id: str
    status: RunStatus
    created_at_ms: int
    origin: Origin | None = None
    legacy_cron_id: int | None = None
    synthesized: bool = False


@dataclass(frozen=True, slots=True)
class DuplicateGroup:
    """One (cron, pid, log digest) that ``runs`` compared Runs claim: one execution recorded as several Runs."""

    legacy_cron_id: int | None
    legacy_pid: int
    log_ref: str | None
    runs: int
    first_run_id: str  # the lowest Run id of the group (UUIDv7: the oldest)
    last_run_id: str
    origin: Origin | None = None  # the greatest of the group's origins, one to file the mismatch under


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A compared Run of a cron not yet terminal, with Attempt 1's pid: what Crontabs.status / pid sit beside."""

    id: str
    status: RunStatus
    created_at_ms: int
    legacy_cron_id: int | None = None
    origin: Origin | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class UnfinishedRun:
    """A legacy-owned shadow Run still open, with the execution's identity and Attempt 1: what startup recovery
    looks up 2.x's row for."""

    id: str
    status: RunStatus
    created_at_ms: int
    legacy_cron_id: int | None = None
    legacy_pid: int | None = None
    log_ref: str | None = None
    started_at_ms: int | None = None
    origin: Origin | None = None
    attempt_id: str | None = None
    attempt_status: AttemptStatus | None = None
    executor_handle: str | None = None


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

    def close_pass(self, pass_id: int, at_ms: int, result: str, reason: str | None, stats: Mapping[str, int]) -> None:
        """Record how the pass ended (``reason`` a code, never a message) and drop its scratch rows."""
        ...

    def prune_passes(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` passes started before ``before_ms``, oldest first, with the scratch rows of any
        that died midway; returns how many. The latest pass always stays: health reads it."""
        ...


class ReconcilerMismatches(Protocol):
    """The upkeep of the reconciler's own mismatch kinds (rows are opened through bridge.service.ports.MismatchLog)."""

    def open_reconciler_mismatches(self) -> list[OpenMismatch]:
        """Every open reconciler mismatch, by id: what a pass may close."""
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

    def runs_by_keys(self, keys: Sequence[str]) -> dict[str, ComparedRun]:
        """Runs (with attempt 1's fields) for a batch of idempotency keys, by key."""
        ...

    def runs_by_log_refs(self, refs: Sequence[tuple[int, str]]) -> dict[tuple[int, str], list[ComparedRun]]:
        """Runs (with attempt 1's fields) of these (cron id, log path digest) pairs, by pair, oldest first: before
        v2.21 a log file is what names an execution, and it holds no pid."""
        ...

    def mark_seen(self, pass_id: int, run_ids: Sequence[str]) -> set[str]:
        """Note Runs a 2.x row matched in this pass; returns those an earlier call of the same pass had noted."""
        ...

    def unseen_runs(self, pass_id: int, since_ms: int, until_ms: int, after: tuple[int, str],
                    limit: int) -> list[UnseenRun]:
        """Compared Runs created in the window that no 2.x row matched this pass, keyset by (created_at_ms, id)."""
        ...

    def duplicate_groups(self, since_ms: int, limit: int) -> list[DuplicateGroup]:
        """(cron, pid, log digest) that more than one compared Run claims since ``since_ms``, at most ``limit``."""
        ...

    def crons_with_runs(self, since_ms: int, after_cron: int, limit: int) -> list[int]:
        """Cron ids above ``after_cron`` with recorded (not imported) Runs created since ``since_ms``, ascending,
        at most ``limit``."""
        ...

    def active_by_cron(self, cron_ids: Sequence[int]) -> dict[int, list[ActiveRun]]:
        """The compared active Runs of these crons with attempt 1's pid, newest first, by cron id."""
        ...


class ReconcileStore(ReconcileLock, PassHistory, ReconcilerMismatches, ReconcileLookups, Protocol):
    """Everything one reconcile pass uses of the bridge store."""


class UnfinishedRuns(Protocol):
    """What startup recovery pages through: the legacy-owned shadow Runs still open."""

    def active_legacy_runs(self, after: tuple[int, str], limit: int) -> list[UnfinishedRun]:
        """Non-terminal legacy-owned Runs (imported history excluded) with Attempt 1's id, status and executor
        handle, keyset by (created_at_ms, id) after ``after``, at most ``limit``."""
        ...
