"""StoreGauges: the gauges an operator alerts on, read from the bridge store when /metrics is scraped.

Projection outbox depth, its oldest pending row's age and parked rows; open mismatches by kind and origin;
seconds since the last successful reconcile pass; shadow coverage per origin (recorded ÷ executions 2.x
ran, over the seam window). Each read is one bounded statement on an index (counts stop at ROW_CAP, so a
value at the cap means "at least"), in a read-only transaction, and the result is kept for TTL_S seconds:
a scrape storm costs one read. A read that fails never fails the scrape: that group's gauges are left out,
`ql_bridge_store_scrape_errors_total{query}` counts it and `ql_bridge_store_scrape_success` says 0.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import Connection, Engine, func, select, union_all

from bridge.domain.mismatches import MismatchKind
from bridge.metrics import ORIGINS, PREFIX, bounded
from bridge.storage.engine import READ_ONLY
from bridge.storage.schema import mismatches_table, projection_outbox_table, reconcile_passes_table
from bridge.storage.seam_queries import recent_coverage
from projections.seam import SEAM_WINDOW_MS

TTL_S = 10.0
ROW_CAP = 10_000
# Every kind: the reconciler's and the shadow path's unplaced callbacks (bridge/service/shadow.py `_unplaced`).
MISMATCH_KINDS = tuple(kind.value for kind in MismatchKind)
QUERIES = ("outbox", "mismatches", "reconcile", "coverage")
T = TypeVar("T")
_o, _m, _p = projection_outbox_table, mismatches_table, reconcile_passes_table


@dataclass
class _Reading:
    """One read of the store: each group's rows, or None when that read failed."""

    at_s: float
    outbox: tuple[int, int | None, int] | None = None  # pending, oldest pending created_at_ms, parked
    mismatches: dict[tuple[str, str], int] | None = None
    last_ok_ms: int | None = None  # None and "reconcile" not failed: no successful pass is recorded
    coverage: list[tuple[str, int, int]] | None = None  # origin, recorded, missing
    failed: list[str] = field(default_factory=list)


def _outbox(conn: Connection) -> tuple[int, int | None, int]:
    # Walks ix_projection_outbox_state_due from the front; applied rows (kept a week) are never read.
    pending = (select(_o.c.created_at_ms).where(_o.c.state == "pending")
               .order_by(_o.c.next_attempt_at_ms, _o.c.id).limit(ROW_CAP).subquery())
    parked = select(_o.c.id).where(_o.c.state == "parked").order_by(_o.c.next_attempt_at_ms, _o.c.id).limit(ROW_CAP)
    depth, oldest = conn.execute(select(func.count(), func.min(pending.c.created_at_ms))).one()
    return int(depth), oldest, int(conn.execute(select(func.count()).select_from(parked.subquery())).scalar_one())


def _mismatches(conn: Connection) -> dict[tuple[str, str], int]:
    # One leg per kind on ix_mismatches_kind_resolved (kind, resolved_at_ms IS NULL), each capped: resolved
    # rows are the record and stay forever, and are never read here.
    legs = [select(_m.c.kind, _m.c.origin).where(_m.c.kind == kind, _m.c.resolved_at_ms.is_(None))
            .limit(ROW_CAP).subquery() for kind in MISMATCH_KINDS]
    both = union_all(*[select(leg) for leg in legs]).subquery()
    counts: dict[tuple[str, str], int] = {}
    for kind, origin, n in conn.execute(select(both.c.kind, both.c.origin, func.count())
                                        .group_by(both.c.kind, both.c.origin)):
        key = (kind, bounded(origin, ORIGINS) if origin is not None else "unknown")
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def _last_ok(conn: Connection) -> int | None:
    # Newest first along the primary key: normally the first row; passes are pruned after a week.
    stmt = select(_p.c.finished_at_ms).where(_p.c.result == "ok").order_by(_p.c.id.desc()).limit(1)
    found = conn.execute(stmt).scalar()
    return int(found) if found is not None else None


def _in_transaction(conn: Connection, query: Callable[[Connection], T]) -> T:
    with conn.begin():
        return query(conn)


class StoreGauges:
    """A prometheus_client collector over one engine. ``reconcile_interval_s`` None: no 2.x to reconcile
    with, so neither the reconcile nor the coverage gauges exist."""

    def __init__(self, engine: Engine, *, reconcile_interval_s: int | None, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._interval_s = reconcile_interval_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: _Reading | None = None
        self._errors = dict.fromkeys(QUERIES, 0)

    def describe(self) -> list[Metric]:
        """The families, without reading the store (the registry asks at registration)."""
        return list(self._families(_Reading(at_s=0.0), 0.0))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._current(), self._clock())

    def _current(self) -> _Reading:
        with self._lock:  # concurrent scrapes wait for the one read instead of each reading
            now = self._clock()
            if self._reading is None or now - self._reading.at_s >= self._ttl_s:
                self._reading = self._read(now)
            return self._reading

    def _read(self, now_s: float) -> _Reading:
        """Each group in its own read-only transaction on one connection: a store that cannot be reached
        costs one connect timeout, and a failed statement does not take the other groups with it."""
        reading = _Reading(at_s=now_s)
        groups = QUERIES if self._interval_s is not None else QUERIES[:2]
        try:
            conn = self._engine.connect().execution_options(**{READ_ONLY: True})
        except Exception:  # noqa: BLE001 - a scrape answers whatever the store does; the count says so
            for query in groups:
                self._failed(reading, query)
            return reading
        with conn:
            reading.outbox = self._guarded(reading, "outbox", lambda: _in_transaction(conn, _outbox))
            reading.mismatches = self._guarded(reading, "mismatches", lambda: _in_transaction(conn, _mismatches))
            if self._interval_s is not None:
                reading.last_ok_ms = self._guarded(reading, "reconcile", lambda: _in_transaction(conn, _last_ok))
        if self._interval_s is not None:
            since_ms = int(now_s * 1000) - SEAM_WINDOW_MS
            reading.coverage = self._guarded(reading, "coverage", lambda: [
                (c.origin, c.recorded, c.missing) for c in recent_coverage(self._engine, since_ms)])
        return reading

    def _guarded(self, reading: _Reading, query: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except Exception:  # noqa: BLE001 - a scrape answers whatever the store does; the count says so
            self._failed(reading, query)
            return None

    def _failed(self, reading: _Reading, query: str) -> None:
        reading.failed.append(query)
        self._errors[query] += 1

    def _families(self, reading: _Reading, now_s: float) -> Iterator[Metric]:
        p = PREFIX
        errors = CounterMetricFamily(p + "store_scrape_errors", "Reads of the store for these gauges that "
                                     "failed, by query (the gauges of that query are left out)", labels=["query"])
        for name, n in self._errors.items():
            errors.add_metric([name], n)
        yield errors
        yield GaugeMetricFamily(p + "store_scrape_success", "1 when the latest read of the store for these gauges "
                                f"succeeded (read at most every {self._ttl_s:g} s)", value=0 if reading.failed else 1)
        yield from _outbox_families(reading, now_s)
        mismatches = GaugeMetricFamily(p + "open_mismatches", "Open (unresolved) mismatch rows, by kind and origin; "
                                       f"counted up to {ROW_CAP} per kind", labels=["kind", "origin"])
        for (kind, origin), n in sorted((reading.mismatches or {}).items()):
            mismatches.add_metric([kind, origin], n)
        yield mismatches
        if self._interval_s is not None:
            yield from _reconcile_families(reading, self._interval_s, now_s)


def _outbox_families(reading: _Reading, now_s: float) -> Iterator[Metric]:
    p, cap = PREFIX, f"counted up to {ROW_CAP}"
    pending = GaugeMetricFamily(p + "outbox_pending_rows", f"Projection outbox rows not yet applied to 2.x ({cap})")
    oldest = GaugeMetricFamily(p + "outbox_oldest_pending_age_seconds", "Age of the oldest pending projection "
                               "outbox row (0 when none is pending)")
    parked = GaugeMetricFamily(p + "outbox_parked_rows", "Projection outbox rows parked after their retries "
                               f"(`ql-bridge projection retry` queues them again; {cap})")
    if reading.outbox is not None:
        depth, oldest_ms, parked_n = reading.outbox
        pending.add_metric([], depth)
        oldest.add_metric([], _seconds_since(oldest_ms, now_s) if oldest_ms is not None else 0.0)
        parked.add_metric([], parked_n)
    yield from (pending, oldest, parked)


def _seconds_since(ms: int | None, now_s: float) -> float:
    return max(0.0, now_s - ms / 1000) if ms is not None else math.inf


def _reconcile_families(reading: _Reading, interval_s: int, now_s: float) -> Iterator[Metric]:
    p = PREFIX
    yield GaugeMetricFamily(p + "reconcile_interval_seconds", "BRIDGE_RECONCILE_INTERVAL_S: a pass is due this "
                            "often", value=interval_s)
    age = GaugeMetricFamily(p + "reconcile_last_success_age_seconds", "Seconds since the last reconcile pass that "
                            "ended ok finished (+Inf when none is recorded)")
    if "reconcile" not in reading.failed:
        age.add_metric([], _seconds_since(reading.last_ok_ms, now_s))
    yield age
    ratio = GaugeMetricFamily(p + "shadow_coverage_ratio", "Recorded ÷ executions 2.x ran, per origin, over the "
                              f"last {SEAM_WINDOW_MS // 3_600_000} h (executions 2.x ran that the store lacks are "
                              "the reconciler's open `missing` rows)", labels=["origin"])
    seen = GaugeMetricFamily(p + "shadow_coverage_executions", "Executions 2.x ran per origin over the same window "
                             "(recorded + missing): the ratio's denominator", labels=["origin"])
    totals: dict[str, tuple[int, int]] = {}
    for origin, recorded, missing in reading.coverage or []:
        before = totals.get(bounded(origin, ORIGINS), (0, 0))
        totals[bounded(origin, ORIGINS)] = (before[0] + recorded, before[1] + recorded + missing)
    for origin, (recorded, executions) in sorted(totals.items()):
        if executions:
            ratio.add_metric([origin], recorded / executions)
            seen.add_metric([origin], executions)
    yield from (ratio, seen)
