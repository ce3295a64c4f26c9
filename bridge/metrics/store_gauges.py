"""StoreGauges: the gauges an operator alerts on, read from the bridge store when /metrics is scraped.

Projection outbox depth, its oldest pending row's age and parked rows; open mismatches by kind and origin;
seconds since the last successful reconcile pass; shadow coverage per origin (recorded ÷ executions 2.x
ran, over the seam window). The figures come through one callable (``bridge.storage.gauge_queries.read_gauges``
bound to the store by bootstrap), and a reading is kept for TTL_S seconds: a scrape storm costs one read. A
read that fails never fails the scrape: that group's gauges are left out,
`ql_bridge_store_scrape_errors_total{query}` counts it and `ql_bridge_store_scrape_success` says 0.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bridge.metrics import ORIGINS, PREFIX, bounded
from bridge.storage.gauge_queries import GAUGE_GROUPS, ROW_CAP, GaugeReading
from projections.seam import SEAM_WINDOW_MS

TTL_S = 10.0
# The store's figures: given the start of the coverage window, also the reconcile and coverage groups.
GaugeRead = Callable[[int | None], GaugeReading]


class StoreGauges:
    """A prometheus_client collector over the store's figures. ``reconcile_interval_s`` None: no 2.x to
    reconcile with, so neither the reconcile nor the coverage gauges exist."""

    def __init__(self, read: GaugeRead, *, reconcile_interval_s: int | None, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._read_store = read
        self._interval_s = reconcile_interval_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: tuple[float, GaugeReading] | None = None  # when it was read, and what
        self._errors = dict.fromkeys(GAUGE_GROUPS, 0)

    def describe(self) -> list[Metric]:
        """The families, without reading the store (the registry asks at registration)."""
        return list(self._families(GaugeReading(), 0.0))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._current(), self._clock())

    def _current(self) -> GaugeReading:
        with self._lock:  # concurrent scrapes wait for the one read instead of each reading
            now = self._clock()
            if self._reading is None or now - self._reading[0] >= self._ttl_s:
                since_ms = int(now * 1000) - SEAM_WINDOW_MS if self._interval_s is not None else None
                reading = self._read_store(since_ms)
                for group in reading.failed:
                    self._errors[group] += 1
                self._reading = (now, reading)
            return self._reading[1]

    def _families(self, reading: GaugeReading, now_s: float) -> Iterator[Metric]:
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
        for (kind, origin), n in sorted(_bounded_origins(reading.open_mismatches or {}).items()):
            mismatches.add_metric([kind, origin], n)
        yield mismatches
        if self._interval_s is not None:
            yield from _reconcile_families(reading, self._interval_s, now_s)


def _bounded_origins(counts: Mapping[tuple[str, str | None], int]) -> dict[tuple[str, str], int]:
    """Mismatch counts with each origin as a label may carry it: a known origin, "other", or "unknown" (none)."""
    labelled: dict[tuple[str, str], int] = {}
    for (kind, origin), n in counts.items():
        key = (kind, bounded(origin, ORIGINS) if origin is not None else "unknown")
        labelled[key] = labelled.get(key, 0) + n
    return labelled


def _outbox_families(reading: GaugeReading, now_s: float) -> Iterator[Metric]:
    p, cap = PREFIX, f"counted up to {ROW_CAP}"
    pending = GaugeMetricFamily(p + "outbox_pending_rows", f"Projection outbox rows not yet applied to 2.x ({cap})")
    oldest = GaugeMetricFamily(p + "outbox_oldest_pending_age_seconds", "Age of the oldest pending projection "
                               "outbox row (0 when none is pending)")
    parked = GaugeMetricFamily(p + "outbox_parked_rows", "Projection outbox rows parked after their retries "
                               f"(`ql-bridge projection retry` queues them again; {cap})")
    depth = reading.outbox
    if depth is not None:
        oldest_ms = depth.oldest_pending_created_at_ms
        pending.add_metric([], depth.pending)
        oldest.add_metric([], _seconds_since(oldest_ms, now_s) if oldest_ms is not None else 0.0)
        parked.add_metric([], depth.parked)
    yield from (pending, oldest, parked)


def _seconds_since(ms: int | None, now_s: float) -> float:
    return max(0.0, now_s - ms / 1000) if ms is not None else math.inf


def _reconcile_families(reading: GaugeReading, interval_s: int, now_s: float) -> Iterator[Metric]:
    p = PREFIX
    yield GaugeMetricFamily(p + "reconcile_interval_seconds", "BRIDGE_RECONCILE_INTERVAL_S: a pass is due this "
                            "often", value=interval_s)
    age = GaugeMetricFamily(p + "reconcile_last_success_age_seconds", "Seconds since the last reconcile pass that "
                            "ended ok finished (+Inf when none is recorded)")
    if "reconcile" not in reading.failed:
        age.add_metric([], _seconds_since(reading.last_ok_pass_ms, now_s))
    yield age
    ratio = GaugeMetricFamily(p + "shadow_coverage_ratio", "Recorded ÷ executions 2.x ran, per origin, over the "
                              f"last {SEAM_WINDOW_MS // 3_600_000} h (executions 2.x ran that the store lacks are "
                              "the reconciler's open `missing` rows)", labels=["origin"])
    seen = GaugeMetricFamily(p + "shadow_coverage_executions", "Executions 2.x ran per origin over the same window "
                             "(recorded + missing): the ratio's denominator", labels=["origin"])
    totals: dict[str, tuple[int, int]] = {}
    for c in reading.coverage or ():
        before = totals.get(bounded(c.origin, ORIGINS), (0, 0))
        totals[bounded(c.origin, ORIGINS)] = (before[0] + c.recorded, before[1] + c.recorded + c.missing)
    for origin, (recorded, executions) in sorted(totals.items()):
        if executions:
            ratio.add_metric([origin], recorded / executions)
            seen.add_metric([origin], executions)
    yield from (ratio, seen)
