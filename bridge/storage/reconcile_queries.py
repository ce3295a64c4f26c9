"""The bridge-store side of reconciliation: bounded lookups, the per-pass scratch table, mismatch upkeep,
pass history and the singleton lease (PostgreSQL advisory lock, or a lease row on SQLite)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, func, insert, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from bridge.domain.mismatches import CALLBACK_MISMATCH_KINDS, stored
from bridge.domain.mismatches import RECONCILER_KINDS as _RECONCILER
from bridge.domain.model import IMPORTED_MODE, PROJECT_ID, RUN_TERMINAL
from bridge.service.reconcile import ActiveRun, ComparedRun, DuplicateGroup, OpenMismatch, UnfinishedRun, UnseenRun
from bridge.storage.engine import READ_ONLY
from bridge.storage.rows import (
    active_run_from_row,
    compared_run_from_row,
    duplicate_group_from_row,
    open_mismatch_from_row,
    unfinished_run_from_row,
    unseen_run_from_row,
)
from bridge.storage.schema import (
    job_leases_table,
    mismatches_table,
    reconcile_passes_table,
    reconcile_seen_table,
    run_attempts_table,
    runs_table,
)

_TERMINAL = tuple(s.value for s in RUN_TERMINAL)
# Shadow Runs (2.x is the truth) and primary Runs (2.x's columns are our projection: a difference is drift).
_COMPARED_OWNERS = ("legacy", "bridge")
# pg_try_advisory_lock(class, key): the class says "ql-bridge reconciler", the key is the store's schema, so two
# bridges keeping their stores in different schemas of one database never wait for each other.
_ADVISORY_CLASS = 0x514C42  # "QLB"
_ADVISORY_LOCK = "SELECT pg_try_advisory_lock(:c, hashtext(current_schema()))"
_ADVISORY_UNLOCK = "SELECT pg_advisory_unlock(:c, hashtext(current_schema()))"
RECONCILER_KINDS = stored(_RECONCILER)  # the kinds a pass may close, as stored
_CALLBACK_KINDS = stored(CALLBACK_MISMATCH_KINDS)
_RESOLVE_CHUNK = 500  # mismatch ids per UPDATE: well under any driver's bound-parameter limit


class SqlReconcileStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect().execution_options(**{READ_ONLY: True}) as conn, conn.begin():
            yield conn

    def runs_by_keys(self, keys: Sequence[str]) -> dict[str, ComparedRun]:
        """Runs (with their latest attempt's fields) for a batch of idempotency keys."""
        if not keys:
            return {}
        r, a = runs_table, run_attempts_table
        stmt = (select(r.c.id, r.c.idempotency_key, r.c.origin, r.c.status, r.c.mode, r.c.legacy_cron_id,
                       r.c.created_at_ms, r.c.cancel_requested_at_ms, r.c.error_code, a.c.id.label("attempt_id"),
                       a.c.status.label("attempt_status"), a.c.exit_code, a.c.started_at_ms, a.c.finished_at_ms,
                       a.c.pid, a.c.executor_handle)
                .join(a, and_(a.c.run_id == r.c.id, a.c.attempt == 1), isouter=True)
                .where(r.c.project_id == PROJECT_ID, r.c.idempotency_key.in_(list(keys))))
        with self.read() as conn:
            return {row.idempotency_key: compared_run_from_row(row._mapping) for row in conn.execute(stmt)}

    def runs_by_log_refs(self, refs: Sequence[tuple[int, str]]) -> dict[tuple[int, str], list[ComparedRun]]:
        """Runs of these (cron, log digest) pairs, oldest first (ix_runs_cron_pid_log leads with the cron)."""
        wanted = set(refs)
        if not wanted:
            return {}
        r, a = runs_table, run_attempts_table
        stmt = (select(r.c.id, r.c.idempotency_key, r.c.origin, r.c.status, r.c.mode, r.c.legacy_cron_id,
                       r.c.log_ref, r.c.created_at_ms, r.c.cancel_requested_at_ms, r.c.error_code,
                       a.c.id.label("attempt_id"), a.c.status.label("attempt_status"), a.c.exit_code,
                       a.c.started_at_ms, a.c.finished_at_ms, a.c.pid, a.c.executor_handle)
                .join(a, and_(a.c.run_id == r.c.id, a.c.attempt == 1), isouter=True)
                .where(r.c.project_id == PROJECT_ID, r.c.legacy_cron_id.in_(sorted({c for c, _ in wanted})),
                       r.c.log_ref.in_(sorted({ref for _, ref in wanted})))
                .order_by(r.c.created_at_ms, r.c.id))
        found: dict[tuple[int, str], list[ComparedRun]] = {}
        with self.read() as conn:
            for row in conn.execute(stmt):
                pair = (row.legacy_cron_id, row.log_ref)
                if pair in wanted:
                    found.setdefault(pair, []).append(compared_run_from_row(row._mapping))
        return found

    def mark_seen(self, pass_id: int, run_ids: Sequence[str]) -> set[str]:
        """Note Runs a 2.x instance matched in this pass; returns those an earlier call of the pass had noted.

        A Run matched again is no error: 2.x opens one instance per id sent (``"ids":[c, c, ...]``) and one
        per replayed start, in this batch or a later one; the caller learns which rows came later."""
        unique = sorted(set(run_ids))
        if not unique:
            return set()
        s = reconcile_seen_table
        dialect_insert = postgresql_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.engine.begin() as conn:
            earlier = {row[0] for row in conn.execute(select(s.c.run_id).where(s.c.pass_id == pass_id,
                                                                               s.c.run_id.in_(unique)))}
            fresh = [{"pass_id": pass_id, "run_id": i} for i in unique if i not in earlier]
            if fresh:
                conn.execute(dialect_insert(s).on_conflict_do_nothing(), fresh)
        return earlier

    def unseen_runs(self, pass_id: int, since_ms: int, until_ms: int, after: tuple[int, str],
                    limit: int) -> list[UnseenRun]:
        """Legacy-owned shadow Runs created in the window that no 2.x instance matched, keyset by (created, id)."""
        r, s = runs_table, reconcile_seen_table
        seen = select(s.c.run_id).where(s.c.pass_id == pass_id, s.c.run_id == r.c.id).exists()
        stmt = (select(r.c.id, r.c.origin, r.c.legacy_cron_id, r.c.created_at_ms, r.c.status, r.c.synthesized)
                .where(r.c.owner.in_(_COMPARED_OWNERS), r.c.mode != IMPORTED_MODE, r.c.created_at_ms >= since_ms,
                       r.c.created_at_ms <= until_ms, ~seen,
                       or_(r.c.created_at_ms > after[0], and_(r.c.created_at_ms == after[0], r.c.id > after[1])))
                .order_by(r.c.created_at_ms, r.c.id).limit(limit))
        with self.read() as conn:
            return [unseen_run_from_row(row._mapping) for row in conn.execute(stmt)]

    def duplicate_groups(self, since_ms: int, limit: int) -> list[DuplicateGroup]:
        """(cron, pid, log digest) that more than one shadow Run claims within the window."""
        r = runs_table
        stmt = (select(r.c.legacy_cron_id, r.c.legacy_pid, r.c.log_ref, func.count().label("n"),
                       func.min(r.c.id).label("first_id"), func.max(r.c.id).label("last_id"),
                       func.max(r.c.origin).label("origin"))
                .where(r.c.owner.in_(_COMPARED_OWNERS), r.c.mode != IMPORTED_MODE, r.c.created_at_ms >= since_ms,
                       r.c.legacy_pid.isnot(None))
                .group_by(r.c.legacy_cron_id, r.c.legacy_pid, r.c.log_ref).having(func.count() > 1).limit(limit))
        with self.read() as conn:
            return [duplicate_group_from_row(row._mapping) for row in conn.execute(stmt)]

    def active_by_cron(self, cron_ids: Sequence[int]) -> dict[int, list[ActiveRun]]:
        """Active shadow Runs of these crons with their latest attempt pid, newest first."""
        r, a = runs_table, run_attempts_table
        stmt = (select(r.c.id, r.c.legacy_cron_id, r.c.status, r.c.created_at_ms, r.c.origin, a.c.pid)
                .join(a, and_(a.c.run_id == r.c.id, a.c.attempt == 1), isouter=True)
                .where(r.c.legacy_cron_id.in_(list(cron_ids)), r.c.status.notin_(_TERMINAL),
                       r.c.owner.in_(_COMPARED_OWNERS), r.c.mode != IMPORTED_MODE)
                .order_by(r.c.created_at_ms.desc()))
        out: dict[int, list[ActiveRun]] = {}
        with self.read() as conn:
            for row in conn.execute(stmt):
                out.setdefault(row.legacy_cron_id, []).append(active_run_from_row(row._mapping))
        return out

    def crons_with_runs(self, since_ms: int, after_cron: int, limit: int) -> list[int]:
        r = runs_table
        stmt = (select(r.c.legacy_cron_id).distinct()
                .where(r.c.created_at_ms >= since_ms, r.c.legacy_cron_id > after_cron, r.c.owner.isnot(None),
                       r.c.mode != IMPORTED_MODE)
                .order_by(r.c.legacy_cron_id).limit(limit))
        with self.read() as conn:
            return [row[0] for row in conn.execute(stmt)]

    # -- passes and mismatches -----------------------------------------------------------------------

    def open_pass(self, at_ms: int) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(insert(reconcile_passes_table).values(started_at_ms=at_ms, result="running"))
            key = result.inserted_primary_key
            assert key is not None  # an INSERT of one row always has its key
            return int(key[0])

    def close_pass(self, pass_id: int, at_ms: int, result: str, reason: str | None, stats: Mapping[str, int]) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(reconcile_passes_table).where(reconcile_passes_table.c.id == pass_id).values(
                finished_at_ms=at_ms, result=result, reason=reason, stats=json.dumps(dict(stats), sort_keys=True)))
            conn.execute(delete(reconcile_seen_table).where(reconcile_seen_table.c.pass_id == pass_id))

    def prune_passes(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` passes started before ``before_ms``, oldest first, with any scratch rows a
        pass that died midway left behind. The latest pass always stays: health reads it."""
        t, seen = reconcile_passes_table, reconcile_seen_table
        latest = select(func.max(t.c.id)).scalar_subquery()
        with self.engine.begin() as conn:
            ids = [row[0] for row in conn.execute(select(t.c.id).where(t.c.started_at_ms < before_ms, t.c.id < latest)
                                                  .order_by(t.c.started_at_ms).limit(limit))]
            if not ids:
                return 0
            conn.execute(delete(seen).where(seen.c.pass_id.in_(ids)))
            return conn.execute(delete(t).where(t.c.id.in_(ids))).rowcount

    def last_pass(self) -> dict[str, Any] | None:
        t = reconcile_passes_table
        with self.read() as conn:
            row = conn.execute(select(t).order_by(t.c.id.desc()).limit(1)).first()
        return dict(row._mapping) if row else None

    def open_reconciler_mismatches(self) -> list[OpenMismatch]:
        """Every open reconciler mismatch, by id: what a pass may close."""
        t = mismatches_table
        stmt = (select(t.c.id, t.c.kind, t.c.legacy_cron_id, t.c.dedupe_key)
                .where(t.c.resolved_at_ms.is_(None), t.c.kind.in_(RECONCILER_KINDS)).order_by(t.c.id))
        with self.read() as conn:
            return [open_mismatch_from_row(row._mapping) for row in conn.execute(stmt)]

    def resolve_unseen(self, mismatch_ids: Sequence[int], since_ms: int, at_ms: int, pass_id: int) -> int:
        """Close the mismatches a pass judged again without finding them again since ``since_ms`` (never
        deleted); any other mismatch stays open."""
        return self._close(mismatch_ids, since_ms, {"resolved_at_ms": at_ms, "closed_by_pass": pass_id})

    def expire_unseen(self, reasons: Mapping[int, str], since_ms: int, at_ms: int, pass_id: int) -> int:
        """Close each mismatch the pass can no longer judge, and did not find again since ``since_ms``, as expired
        with its reason (never deleted)."""
        by_reason: dict[str, list[int]] = {}
        for mismatch_id, reason in sorted(reasons.items()):
            by_reason.setdefault(reason, []).append(mismatch_id)
        return sum(self._close(ids, since_ms, {"resolved_at_ms": at_ms, "expired_reason": reason,
                                               "closed_by_pass": pass_id}) for reason, ids in by_reason.items())

    def expire_callback_mismatches(self, before_ms: int, at_ms: int, pass_id: int, reason: str) -> int:
        """A callback the bridge could not place is judged once, when it arrives: expired with ``reason`` once
        last seen before ``before_ms`` (the lookback), never deleted."""
        t = mismatches_table
        with self.engine.begin() as conn:
            return conn.execute(update(t).where(t.c.kind.in_(_CALLBACK_KINDS), t.c.resolved_at_ms.is_(None),
                                                t.c.last_seen_ms < before_ms)
                                .values(resolved_at_ms=at_ms, expired_reason=reason,
                                        closed_by_pass=pass_id)).rowcount

    def runs_created_before(self, run_ids: Sequence[str], before_ms: int) -> set[str]:
        r = runs_table
        found: set[str] = set()
        with self.read() as conn:
            for start in range(0, len(run_ids), _RESOLVE_CHUNK):
                chunk = list(run_ids[start:start + _RESOLVE_CHUNK])
                found.update(row[0] for row in conn.execute(select(r.c.id).where(r.c.id.in_(chunk),
                                                                                 r.c.created_at_ms < before_ms)))
        return found

    def _close(self, mismatch_ids: Sequence[int], since_ms: int, values: dict[str, Any]) -> int:
        """Close open reconciler mismatches of ``mismatch_ids`` not seen since ``since_ms``, in chunks."""
        t = mismatches_table
        closed = 0
        with self.engine.begin() as conn:
            for start in range(0, len(mismatch_ids), _RESOLVE_CHUNK):
                chunk = list(mismatch_ids[start:start + _RESOLVE_CHUNK])
                closed += conn.execute(update(t).where(t.c.id.in_(chunk), t.c.resolved_at_ms.is_(None),
                                                       t.c.kind.in_(RECONCILER_KINDS), t.c.last_seen_ms < since_ms)
                                       .values(**values)).rowcount
        return closed

    def open_mismatches(self, kind: str | None = None) -> list[dict[str, Any]]:
        t = mismatches_table
        stmt = select(t).where(t.c.resolved_at_ms.is_(None)).order_by(t.c.id)
        if kind is not None:
            stmt = stmt.where(t.c.kind == kind)
        with self.read() as conn:
            return [dict(row._mapping) for row in conn.execute(stmt)]

    # -- one reconciler at a time --------------------------------------------------------------------

    @contextmanager
    def singleton(self, holder: str, now_ms: int, lease_ms: int) -> Iterator[bool]:
        """Yields True when this process holds the reconciler lock for the pass, False when another does."""
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect() as conn:
                got = bool(conn.execute(text(_ADVISORY_LOCK), {"c": _ADVISORY_CLASS}).scalar())
                conn.commit()
                try:
                    yield got
                finally:
                    if got:
                        conn.execute(text(_ADVISORY_UNLOCK), {"c": _ADVISORY_CLASS})
                        conn.commit()
            return
        got = self._take_lease(holder, now_ms, lease_ms)
        try:
            yield got
        finally:
            if got:
                with self.engine.begin() as conn:
                    conn.execute(delete(job_leases_table).where(job_leases_table.c.name == "reconciler",
                                                                job_leases_table.c.holder == holder))

    def _take_lease(self, holder: str, now_ms: int, lease_ms: int) -> bool:
        t = job_leases_table
        with self.engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: one taker at a time
            row = conn.execute(select(t.c.holder, t.c.expires_at_ms).where(t.c.name == "reconciler")).first()
            if row is not None and row.expires_at_ms > now_ms and row.holder != holder:
                return False
            conn.execute(delete(t).where(t.c.name == "reconciler"))
            conn.execute(insert(t).values(name="reconciler", holder=holder, expires_at_ms=now_ms + lease_ms))
            return True

    def active_legacy_runs(self, after: tuple[int, str], limit: int) -> list[UnfinishedRun]:
        """Non-terminal legacy-owned shadow Runs with attempt 1, keyset by (created_at_ms, id)."""
        r, a = runs_table, run_attempts_table
        stmt = (select(r.c.id, r.c.legacy_cron_id, r.c.legacy_pid, r.c.log_ref, r.c.started_at_ms, r.c.created_at_ms,
                       r.c.status, r.c.origin, a.c.id.label("attempt_id"), a.c.status.label("attempt_status"),
                       a.c.executor_handle)
                .join(a, and_(a.c.run_id == r.c.id, a.c.attempt == 1), isouter=True)
                .where(r.c.status.notin_(_TERMINAL), r.c.owner == "legacy", r.c.mode != IMPORTED_MODE,
                       or_(r.c.created_at_ms > after[0], and_(r.c.created_at_ms == after[0], r.c.id > after[1])))
                .order_by(r.c.created_at_ms, r.c.id).limit(limit))
        with self.read() as conn:
            return [unfinished_run_from_row(row._mapping) for row in conn.execute(stmt)]
