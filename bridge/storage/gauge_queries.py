"""The store's figures behind the scrape-time gauges (``bridge.metrics.store_gauges``): the projection outbox,
open mismatches, the last successful reconcile pass and recent shadow coverage.

Each group is one bounded statement on an index (counts stop at ROW_CAP, so a value at the cap means "at
least") in a read-only transaction of its own. A group whose read fails is named in the reading instead of
raising: a scrape answers whatever the store does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Connection, Engine, func, select, union_all

from bridge.domain.mismatches import MismatchKind
from bridge.service.seam import OriginCoverage
from bridge.storage.engine import READ_ONLY
from bridge.storage.schema import mismatches_table, projection_outbox_table, reconcile_passes_table
from bridge.storage.seam_queries import recent_coverage

ROW_CAP = 10_000
# Every kind: the reconciler's and the shadow path's unplaced callbacks (bridge/service/shadow.py `_unplaced`).
MISMATCH_KINDS = tuple(kind.value for kind in MismatchKind)
GAUGE_GROUPS = ("outbox", "mismatches", "reconcile", "coverage")
T = TypeVar("T")
_o, _m, _p = projection_outbox_table, mismatches_table, reconcile_passes_table


@dataclass(frozen=True)
class OutboxDepth:
    """Projection outbox rows not yet applied and parked ones, each counted up to ROW_CAP."""

    pending: int
    oldest_pending_created_at_ms: int | None  # None: nothing is pending
    parked: int


@dataclass(frozen=True)
class GaugeReading:
    """One read of the store: each group's figures, or None when that group was not read or its read failed
    (then it is named in ``failed``)."""

    outbox: OutboxDepth | None = None
    open_mismatches: Mapping[tuple[str, str | None], int] | None = None  # (kind, origin as stored) → rows
    last_ok_pass_ms: int | None = None  # None and "reconcile" not failed: no successful pass is recorded
    coverage: tuple[OriginCoverage, ...] | None = None
    failed: tuple[str, ...] = ()


def read_gauges(engine: Engine, coverage_since_ms: int | None) -> GaugeReading:
    """Every group's figures; with ``coverage_since_ms`` None (no 2.x to reconcile with) only the outbox and
    the mismatches. Each group reads in its own read-only transaction on one connection, so a store that cannot
    be reached costs one connect timeout, and a failed statement does not take the other groups with it."""
    groups = GAUGE_GROUPS if coverage_since_ms is not None else GAUGE_GROUPS[:2]
    failed: list[str] = []

    def guarded(group: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except Exception:  # noqa: BLE001 - a scrape answers whatever the store does; `failed` says so
            failed.append(group)
            return None

    try:
        conn = engine.connect().execution_options(**{READ_ONLY: True})
    except Exception:  # noqa: BLE001 - as above
        return GaugeReading(failed=groups)
    with conn:
        outbox = guarded("outbox", lambda: _in_transaction(conn, outbox_depth))
        mismatches = guarded("mismatches", lambda: _in_transaction(conn, open_mismatches))
        last_ok = None
        if coverage_since_ms is not None:
            last_ok = guarded("reconcile", lambda: _in_transaction(conn, last_ok_pass_ms))
    coverage = None
    if coverage_since_ms is not None:
        coverage = guarded("coverage", lambda: tuple(recent_coverage(engine, coverage_since_ms)))
    return GaugeReading(outbox, mismatches, last_ok, coverage, tuple(failed))


def _in_transaction(conn: Connection, query: Callable[[Connection], T]) -> T:
    with conn.begin():
        return query(conn)


def outbox_depth(conn: Connection) -> OutboxDepth:
    """The outbox's pending rows, the oldest one's creation time, and its parked rows."""
    # Walks ix_projection_outbox_state_due from the front; applied rows (kept a week) are never read.
    pending = (select(_o.c.created_at_ms).where(_o.c.state == "pending")
               .order_by(_o.c.next_attempt_at_ms, _o.c.id).limit(ROW_CAP).subquery())
    parked = select(_o.c.id).where(_o.c.state == "parked").order_by(_o.c.next_attempt_at_ms, _o.c.id).limit(ROW_CAP)
    depth, oldest = conn.execute(select(func.count(), func.min(pending.c.created_at_ms))).one()
    return OutboxDepth(int(depth), oldest,
                       int(conn.execute(select(func.count()).select_from(parked.subquery())).scalar_one()))


def open_mismatches(conn: Connection) -> dict[tuple[str, str | None], int]:
    """Open mismatch rows by kind and origin (as stored: any text, or None), up to ROW_CAP per kind."""
    # One leg per kind on ix_mismatches_kind_resolved (kind, resolved_at_ms IS NULL), each capped: resolved
    # rows are the record and stay forever, and are never read here.
    legs = [select(_m.c.kind, _m.c.origin).where(_m.c.kind == kind, _m.c.resolved_at_ms.is_(None))
            .limit(ROW_CAP).subquery() for kind in MISMATCH_KINDS]
    both = union_all(*[select(leg) for leg in legs]).subquery()
    return {(kind, origin): int(n) for kind, origin, n in conn.execute(
        select(both.c.kind, both.c.origin, func.count()).group_by(both.c.kind, both.c.origin))}


def last_ok_pass_ms(conn: Connection) -> int | None:
    """When the newest reconcile pass that ended ok finished; None when none is recorded."""
    # Newest first along the primary key: normally the first row; passes are pruned after a week.
    stmt = select(_p.c.finished_at_ms).where(_p.c.result == "ok").order_by(_p.c.id.desc()).limit(1)
    found = conn.execute(stmt).scalar()
    return int(found) if found is not None else None
