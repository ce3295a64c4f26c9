"""The cutover report's ports on the bridge store (implemented by bridge.storage.report_queries.ReportQueries): the
bounded reads a report is built from, and the archive of the reports built.

Rows cross it as frozen records (ReportedRun, MismatchExample, UnattributedCallback); counts are keyed by the
stored text, so an origin or kind a newer bridge wrote is counted under its own name.

Errors: each call is its own short transaction; a failure of the store raises StoreBusyError,
StoreUnavailableError or StorageError (the driver's error translated, nothing half-written).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.domain.model import RunMode, RunStatus
from bridge.service.seam import OriginCoverage

MAX_KEYS = 1000  # keys one ``runs_by_keys`` lookup takes (one IN list): callers send batches of at most this many


@dataclass(frozen=True, slots=True)
class ReportedRun:
    """A Run a 2.x instance's key found, as the report tallies it; ``exit_code`` is its latest Attempt's."""

    key: str
    id: str
    status: RunStatus
    origin: str | None = None  # as stored: the report names an origin a newer bridge wrote, never refuses it
    mode: RunMode | None = None
    exit_code: int | float | None = None  # 2.x keeps any JS number; a fraction stays one
    started_at_ms: int | None = None
    finished_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MismatchExample:
    """One open mismatch shown in the report (projections.report.example turns it into the document's shape)."""

    kind: str
    origin: str | None
    legacy_cron_id: int | None
    run_id: str | None
    first_seen_ms: int
    last_seen_ms: int
    occurrences: int
    diff: str  # JSON, as stored


@dataclass(frozen=True, slots=True)
class UnattributedCallback:
    """A callback mismatch without an origin: the report attributes it to the instance its diff names."""

    id: int
    kind: str
    legacy_cron_id: int | None
    diff: str  # JSON, as stored


class ReportReads(Protocol):
    """Read-only figures behind ``bridge report``: grouped counts, key batches and keyset pages, never a whole
    table."""

    def runs_by_keys(self, keys: Sequence[str]) -> dict[str, ReportedRun]:
        """Shadow Runs for a batch of idempotency keys, by key (with their latest Attempt's exit code).
        Raises ValueError for a batch larger than one lookup takes (MAX_KEYS)."""
        ...

    def runs_by_log_refs(self, refs: Sequence[tuple[int, str]]) -> dict[tuple[int, str], list[ReportedRun]]:
        """Shadow Runs of these (cron id, log digest) pairs, by pair: how a task log (before v2.21) finds its Run."""
        ...

    def runs_created_by_origin(self, since_ms: int, until_ms: int) -> dict[str | None, int]:
        """Runs created in the window per origin, imported history left out."""
        ...

    def open_mismatch_counts(self) -> dict[tuple[str | None, str], int]:
        """Open mismatches per (origin, kind)."""
        ...

    def closed_mismatch_counts(self, since_ms: int, until_ms: int) -> dict[tuple[str | None, str, str | None], int]:
        """Mismatches closed in the window per (origin, kind, expired reason): None for resolved ones."""
        ...

    def open_mismatch_examples(self, origin: str | None, kind: str, limit: int) -> list[MismatchExample]:
        """Up to ``limit`` open mismatches of one (origin, kind), newest first."""
        ...

    def stale_mismatch_counts(self, kinds: Sequence[str], before_ms: int) -> dict[str | None, int]:
        """Open mismatches of ``kinds`` first seen before ``before_ms``, per origin."""
        ...

    def callback_counts(self, since_ms: int, until_ms: int) -> dict[tuple[str | None, str], int]:
        """Unmatched / ambiguous callbacks first seen in the window, per (origin, kind)."""
        ...

    def unattributed_callbacks(self, since_ms: int, until_ms: int, after_id: int,
                               limit: int) -> list[UnattributedCallback]:
        """One keyset page (by id) of the window's callback mismatches that carry no origin."""
        ...

    def mismatch_timeline(self, since_ms: int, until_ms: int,
                          origins: Sequence[str | None] | None = None) -> list[tuple[int, str, int]]:
        """(UTC day number, kind, mismatches opened) in the window; ``origins`` limits it (None: no origin)."""
        ...

    def shadow_write_failures(self, since_ms: int, until_ms: int) -> dict[str | None, int]:
        """Failed shadow writes recorded on Runs in the window, per origin."""
        ...

    def origin_modes(self) -> dict[str, str]:
        """The stored mode flag per origin (origins without one are absent)."""
        ...


class ReportArchive(Protocol):
    """The reports built, kept in the bridge store (the cutover gates read the latest)."""

    def save_report(self, body_json: str, window: tuple[int, int], *, created_at_ms: int) -> int:
        """Store a report body for its (since, until) window; returns its id."""
        ...


@dataclass(frozen=True)
class ReportSources:
    """Everything a report reads from the bridge store, and where it keeps the result (built by the
    composition root, bridge.bootstrap.commands.report_sources)."""

    reads: ReportReads
    archive: ReportArchive
    coverage: Callable[[int], list[OriginCoverage]]  # recent executions per origin since an instant (ms)
    outbox_status: Callable[[], dict[str, Any]]  # bridge.jobs.project.projection_status's shape
