"""WriteLanes: where the shadow writes run, off the serving path, with a time budget and backpressure.

One single-thread lane per cron bucket keeps each cron's commands in arrival order (a start is written before
its end). What a lane runs is a command (bridge.callbacks.commands), handed to the one executor the lanes were
built with. A callback waits for its writes at most the shadow budget, then 2.x's answer goes back and the
writes finish in their lanes; at most ``capacity`` commands may be queued or running, and one more is refused
rather than queued without bound behind a slow store (the caller keeps it for later, or counts it as
``overload``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout

from bridge.callbacks.commands import FactCommand, LaneCommand
from bridge.metrics import BridgeMetrics

log = logging.getLogger("bridge.shadow")
LANE_THREAD_PREFIX = "shadow-"
# The executor: a command and, for an end, the future of the open Runs read ahead of it in the same lane.
LaneExecutor = Callable[[LaneCommand, "Future[object] | None"], object]


class WriteLanes:
    def __init__(self, count: int, execute: LaneExecutor, *, budget_s: float, metrics: BridgeMetrics,
                 capacity: int = 256) -> None:
        self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"{LANE_THREAD_PREFIX}{i}") for i in range(count)]
        self._execute = execute
        self._pending = threading.BoundedSemaphore(capacity)
        self._budget_s = budget_s
        self._metrics = metrics

    def submit(self, command: LaneCommand, read_ahead: Future[object] | None = None) -> Future[object] | None:
        """Queue ``command`` on its cron's lane; None when the lanes are full (the caller decides what that
        means)."""
        if not self._pending.acquire(blocking=False):
            return None
        lane = self._lanes[command.cron_id % len(self._lanes)]
        future = lane.submit(self._execute, command, read_ahead)
        future.add_done_callback(lambda _f: self._pending.release())
        return future

    def write_within_budget(self, commands: Sequence[FactCommand], read_ahead: Future[object] | None = None,
                            on_refused: Callable[[FactCommand], None] = lambda _command: None) -> list[FactCommand]:
        """Run the commands, each on its cron's lane, and wait for them together at most the budget; never
        raises. Returns those a lane took; each one refused (the lanes were full) will never run here, and goes
        to ``on_refused``, the caller's to keep or count.
        """
        accepted: list[FactCommand] = []
        futures = []
        for command in commands:
            future = self.submit(command, read_ahead)
            if future is None:
                on_refused(command)
                continue
            accepted.append(command)
            futures.append(future)
        if len(futures) == 1:  # the shell's one cron id: the cheaper wait
            try:
                futures[0].result(timeout=self._budget_s)
            except FutureTimeout:
                self._overran(1)
            except Exception:  # noqa: BLE001 - the executor counts its own failures; only the wait is ours
                pass
        elif futures:
            _done, overran = wait(futures, timeout=self._budget_s)
            if overran:
                self._overran(len(overran))
        return accepted

    def _overran(self, count: int) -> None:
        """The writes go on in their lanes; the shell is answered now."""
        for _ in range(count):
            self._metrics.shadow_write_failed(None, "timeout")
        log.warning("shadow write overran its %d ms budget", int(self._budget_s * 1000))

    def close(self) -> None:
        """Wait for every queued command: called after the server's drain, before the store closes."""
        for lane in self._lanes:
            lane.shutdown(wait=True)
