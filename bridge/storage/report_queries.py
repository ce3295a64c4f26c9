"""The bridge-store side of the cutover report: bounded, read-only lookups, plus the cutover_reports rows.

Every read is a grouped count, a lookup by a caller-sized batch of keys, or a keyset page; nothing loads a
whole table. Reads run as plain deferred transactions, so on SQLite they never take the write lock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, or_, select
from sqlalchemy.exc import DBAPIError

from bridge.domain.events import EventType
from bridge.domain.mismatches import CALLBACK_MISMATCH_KINDS, stored
from bridge.domain.model import IMPORTED_MODE, PROJECT_ID, RunMode, RunStatus, member
from bridge.service.reports import MAX_KEYS, MismatchExample, ReportedRun, UnattributedCallback
from bridge.storage.engine import READ_ONLY
from bridge.storage.errors import translate_operational_error
from bridge.storage.schema import (
    cutover_reports_table,
    mismatches_table,
    origin_flags_table,
    run_attempts_table,
    run_events_table,
    runs_table,
)

SHADOW_WRITE_FAILED = EventType.COMPAT_SHADOW_WRITE_FAILED.value
_CALLBACK_KINDS = stored(CALLBACK_MISMATCH_KINDS)
DAY_MS = 86_400_000


class ReportQueries:
    """Read-only queries behind ``bridge report``; ``save_report`` is the one write."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect().execution_options(**{READ_ONLY: True}) as conn, conn.begin():
                yield conn
        except DBAPIError as exc:
            raise translate_operational_error(exc) from exc

    def runs_by_keys(self, keys: Sequence[str]) -> dict[str, ReportedRun]:
        """Shadow Runs for a batch of idempotency keys: key, id, origin, mode, status, started/finished_at_ms and
        the exit_code of the latest attempt, in one query. Raises ValueError above MAX_KEYS keys."""
        if not keys:
            return {}
        if len(keys) > MAX_KEYS:
            raise ValueError(f"at most {MAX_KEYS} keys per lookup, got {len(keys)}")
        r, a = runs_table, run_attempts_table
        latest_exit = (select(a.c.exit_code).where(a.c.run_id == r.c.id).order_by(a.c.attempt.desc()).limit(1)
                       .correlate(r).scalar_subquery())
        stmt = (select(r.c.idempotency_key.label("key"), r.c.id, r.c.origin, r.c.mode, r.c.status,
                       latest_exit.label("exit_code"), r.c.started_at_ms, r.c.finished_at_ms)
                .where(r.c.project_id == PROJECT_ID, r.c.idempotency_key.in_(list(dict.fromkeys(keys)))))
        with self._read() as conn:
            return {row.key: ReportedRun(
                key=row.key, id=row.id, status=RunStatus(row.status), origin=row.origin,
                mode=member(RunMode, row.mode), exit_code=row.exit_code, started_at_ms=row.started_at_ms,
                finished_at_ms=row.finished_at_ms) for row in conn.execute(stmt)}

    def runs_by_log_refs(self, refs: Sequence[tuple[int, str]]) -> dict[tuple[int, str], list[ReportedRun]]:
        """Shadow Runs of these (cron, log digest) pairs, with their latest attempt's exit code (ix_runs_cron_pid_log
        leads with the cron)."""
        wanted = set(refs)
        if not wanted:
            return {}
        r, a = runs_table, run_attempts_table
        latest_exit = (select(a.c.exit_code).where(a.c.run_id == r.c.id).order_by(a.c.attempt.desc()).limit(1)
                       .correlate(r).scalar_subquery())
        stmt = (select(r.c.idempotency_key.label("key"), r.c.id, r.c.origin, r.c.mode, r.c.status, r.c.legacy_cron_id,
                       r.c.log_ref, latest_exit.label("exit_code"), r.c.started_at_ms, r.c.finished_at_ms)
                .where(r.c.project_id == PROJECT_ID, r.c.legacy_cron_id.in_(sorted({c for c, _ in wanted})),
                       r.c.log_ref.in_(sorted({ref for _, ref in wanted}))))
        found: dict[tuple[int, str], list[ReportedRun]] = {}
        with self._read() as conn:
            for row in conn.execute(stmt):
                if (row.legacy_cron_id, row.log_ref) in wanted:
                    found.setdefault((row.legacy_cron_id, row.log_ref), []).append(ReportedRun(
                        key=row.key, id=row.id, status=RunStatus(row.status), origin=row.origin,
                        mode=member(RunMode, row.mode), exit_code=row.exit_code, started_at_ms=row.started_at_ms,
                        finished_at_ms=row.finished_at_ms))
        return found

    def runs_created_by_origin(self, since_ms: int, until_ms: int) -> dict[str | None, int]:
        """Runs created in the window per origin, legacy imports left out."""
        r = runs_table
        stmt = (select(r.c.origin, func.count()).where(r.c.created_at_ms >= since_ms, r.c.created_at_ms <= until_ms,
                                                       _not_imported()).group_by(r.c.origin))
        with self._read() as conn:
            return {origin: int(n) for origin, n in conn.execute(stmt)}

    def open_mismatch_counts(self) -> dict[tuple[str | None, str], int]:
        """Open (unresolved) mismatches per (origin, kind)."""
        t = mismatches_table
        stmt = (select(t.c.origin, t.c.kind, func.count()).where(t.c.resolved_at_ms.is_(None))
                .group_by(t.c.origin, t.c.kind))
        with self._read() as conn:
            return {(origin, kind): int(n) for origin, kind, n in conn.execute(stmt)}

    def closed_mismatch_counts(self, since_ms: int, until_ms: int) -> dict[tuple[str | None, str, str | None], int]:
        """Mismatches closed in the window per (origin, kind, expired reason): None for resolved ones."""
        t = mismatches_table
        stmt = (select(t.c.origin, t.c.kind, t.c.expired_reason, func.count())
                .where(t.c.resolved_at_ms >= since_ms, t.c.resolved_at_ms <= until_ms)
                .group_by(t.c.origin, t.c.kind, t.c.expired_reason))
        with self._read() as conn:
            return {(origin, kind, reason): int(n) for origin, kind, reason, n in conn.execute(stmt)}

    def open_mismatch_examples(self, origin: str | None, kind: str, limit: int) -> list[MismatchExample]:
        """Up to ``limit`` open mismatches of one (origin, kind), newest first."""
        t = mismatches_table
        where = t.c.origin.is_(None) if origin is None else t.c.origin == origin
        stmt = (select(t.c.kind, t.c.origin, t.c.legacy_cron_id, t.c.run_id, t.c.first_seen_ms, t.c.last_seen_ms,
                       t.c.occurrences, t.c.diff)
                .where(t.c.resolved_at_ms.is_(None), t.c.kind == kind, where)
                .order_by(t.c.first_seen_ms.desc(), t.c.id.desc()).limit(limit))
        with self._read() as conn:
            return [MismatchExample(**row._mapping) for row in conn.execute(stmt)]

    def stale_mismatch_counts(self, kinds: Sequence[str], before_ms: int) -> dict[str | None, int]:
        """Open mismatches of ``kinds`` first seen before ``before_ms``, per origin."""
        if not kinds:
            return {}
        t = mismatches_table
        stmt = (select(t.c.origin, func.count())
                .where(t.c.resolved_at_ms.is_(None), t.c.kind.in_(list(kinds)), t.c.first_seen_ms < before_ms)
                .group_by(t.c.origin))
        with self._read() as conn:
            return {origin: int(n) for origin, n in conn.execute(stmt)}

    def callback_counts(self, since_ms: int, until_ms: int) -> dict[tuple[str | None, str], int]:
        """Unmatched / ambiguous callbacks first seen in the window (resolved or not), per (origin, kind)."""
        t = mismatches_table
        stmt = (select(t.c.origin, t.c.kind, func.count())
                .where(t.c.kind.in_(_CALLBACK_KINDS), t.c.first_seen_ms >= since_ms,
                       t.c.first_seen_ms <= until_ms)
                .group_by(t.c.origin, t.c.kind))
        with self._read() as conn:
            return {(origin, kind): int(n) for origin, kind, n in conn.execute(stmt)}

    def unattributed_callbacks(self, since_ms: int, until_ms: int, after_id: int,
                               limit: int) -> list[UnattributedCallback]:
        """One keyset page (by id) of the window's callback mismatches that carry no origin."""
        t = mismatches_table
        stmt = (select(t.c.id, t.c.kind, t.c.legacy_cron_id, t.c.diff)
                .where(t.c.kind.in_(_CALLBACK_KINDS), t.c.origin.is_(None), t.c.first_seen_ms >= since_ms,
                       t.c.first_seen_ms <= until_ms, t.c.id > after_id)
                .order_by(t.c.id).limit(limit))
        with self._read() as conn:
            return [UnattributedCallback(**row._mapping) for row in conn.execute(stmt)]

    def mismatch_timeline(self, since_ms: int, until_ms: int,
                          origins: Sequence[str | None] | None = None) -> list[tuple[int, str, int]]:
        """(UTC day number, kind, mismatches opened) for mismatches first seen in the window; ``origins`` limits
        it to those origins (None in the list: mismatches without one)."""
        t = mismatches_table
        day = (t.c.first_seen_ms // DAY_MS).label("day")
        stmt = (select(day, t.c.kind, func.count())
                .where(t.c.first_seen_ms >= since_ms, t.c.first_seen_ms <= until_ms)
                .group_by(day, t.c.kind).order_by(day, t.c.kind))
        if origins is not None:
            named = [o for o in origins if o is not None]
            stmt = stmt.where(or_(t.c.origin.in_(named), t.c.origin.is_(None)) if None in origins
                              else t.c.origin.in_(named))
        with self._read() as conn:
            return [(int(d), kind, int(n)) for d, kind, n in conn.execute(stmt)]

    def shadow_write_failures(self, since_ms: int, until_ms: int) -> dict[str | None, int]:
        """``compat.shadow_write_failed`` events appended in the window, per origin of their Run."""
        e, r = run_events_table, runs_table
        stmt = (select(r.c.origin, func.count()).select_from(e.join(r, r.c.id == e.c.run_id))
                .where(e.c.type == SHADOW_WRITE_FAILED, e.c.created_at_ms >= since_ms, e.c.created_at_ms <= until_ms)
                .group_by(r.c.origin))
        with self._read() as conn:
            return {origin: int(n) for origin, n in conn.execute(stmt)}

    def origin_modes(self) -> dict[str, str]:
        """The stored flag per origin (origins without a row are absent)."""
        t = origin_flags_table
        with self._read() as conn:
            return {row.origin: row.mode for row in conn.execute(select(t.c.origin, t.c.mode))}

    def save_report(self, body_json: str, window: tuple[int, int], *, created_at_ms: int) -> int:
        """Store a report body; returns its id."""
        try:
            with self.engine.begin() as conn:
                result = conn.execute(insert(cutover_reports_table).values(
                    created_at_ms=created_at_ms, window_start_ms=window[0], window_end_ms=window[1], body=body_json))
                key = result.inserted_primary_key
                assert key is not None  # an INSERT of one row always has its key
                return int(key[0])
        except DBAPIError as exc:
            raise translate_operational_error(exc) from exc

    def latest_report(self) -> dict[str, Any] | None:
        """The newest stored report body, parsed; None when there is none or it cannot be read."""
        t = cutover_reports_table
        with self._read() as conn:
            body = conn.execute(select(t.c.body).order_by(t.c.created_at_ms.desc(), t.c.id.desc()).limit(1)).scalar()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            return None  # an unreadable report passes no gate
        return parsed if isinstance(parsed, dict) else None


def _not_imported() -> Any:
    # `mode != 'legacy_import'` alone would also drop Runs whose mode is NULL.
    return or_(runs_table.c.mode.is_(None), runs_table.c.mode != IMPORTED_MODE)

