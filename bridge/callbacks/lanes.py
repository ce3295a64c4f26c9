"""WriteLanes: where the shadow writes run, off the serving path, with a time budget and backpressure.

One single-thread lane per cron bucket keeps each cron's callbacks in arrival order (a start is written before
its end). A callback waits for its write at most the shadow budget, then 2.x's answer goes back and the write
finishes in its lane; at most ``capacity`` writes and reads may be queued or running, and one more is refused
(counted as ``overload``) rather than queued without bound behind a slow store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from bridge.metrics import BridgeMetrics

log = logging.getLogger("bridge.shadow")
LANE_THREAD_PREFIX = "shadow-"
T = TypeVar("T")


class WriteLanes:
    def __init__(self, count: int, *, budget_s: float, metrics: BridgeMetrics, capacity: int = 256) -> None:
        self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"{LANE_THREAD_PREFIX}{i}") for i in range(count)]
        self._pending = threading.BoundedSemaphore(capacity)
        self._budget_s = budget_s
        self._metrics = metrics

    def submit(self, cron_id: int, work: Callable[..., T], *args: Any) -> Future[T] | None:
        """Queue ``work`` on the cron's lane; None when the lanes are full (the caller decides what that means)."""
        if not self._pending.acquire(blocking=False):
            return None
        future = self._lanes[cron_id % len(self._lanes)].submit(work, *args)
        future.add_done_callback(lambda _f: self._pending.release())
        return future

    def write_within_budget(self, cron_id: int, work: Callable[..., object], *args: Any) -> bool:
        """Run a shadow write on the cron's lane and wait for it at most the budget; never raises. False: the
        lanes were full and the write was refused (it will never run)."""
        future = self.submit(cron_id, work, *args)
        if future is None:
            self._metrics.shadow_write_failed(None, "overload")
            return False
        try:
            future.result(timeout=self._budget_s)
        except FutureTimeout:
            # The write goes on in its lane; the shell is answered now.
            self._metrics.shadow_write_failed(None, "timeout")
            log.warning("shadow write overran its %d ms budget", int(self._budget_s * 1000))
        return True

    def close(self) -> None:
        """Wait for every queued write: called after the server's drain, before the store closes."""
        for lane in self._lanes:
            lane.shutdown(wait=True)
