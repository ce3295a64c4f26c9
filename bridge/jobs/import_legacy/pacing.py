"""Pacing of the import's writes on a store with one writer at a time (SQLite), shared with a serving bridge:
batches sized to a budget of write-lock time, and a gap after each so a waiting shadow write gets in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

# On a store with one writer at a time: how long one batch may hold the write lock. A shadow write that
# arrives meanwhile waits that long plus its busy handler's next poll (1, 3, 8, 18, 33 ms ...), well inside
# its 50 ms budget. The batch size follows the measured hold, between MIN_WRITE_ROWS and batch_size.
IMPORT_WRITE_BUDGET_MS = 15
FIRST_WRITE_ROWS = 32
MIN_WRITE_ROWS = 8
# ... and how long the lock is left free after each batch: longer than the busy handler's poll interval
# for a writer that has waited up to 50 ms (20 ms), so that one gets in. Building the next batch's Runs
# happens in this gap.
IMPORT_GAP_MS = 25


class Pacing:
    """Write batches sized to a budget of write-lock time, with a gap after each: for a store with one
    writer at a time, shared with a serving bridge."""

    def __init__(self, batch_size: int, budget_s: float) -> None:
        self.budget_s = budget_s
        self.most = batch_size
        self.least = min(batch_size, MIN_WRITE_ROWS)
        self.rows = min(batch_size, FIRST_WRITE_ROWS)
        self._free_from = 0.0  # monotonic time before which the next batch does not take the lock

    def batches(self, chunk: list[T]) -> Iterator[list[T]]:
        """``chunk`` in batches of the current size (which each written batch adjusts)."""
        start = 0
        while start < len(chunk):
            batch = chunk[start:start + self.rows]
            start += len(batch)
            yield batch

    def wait_turn(self) -> None:
        """Before taking the write lock: the gap after the last batch, less what building this one took."""
        pause = self._free_from - time.monotonic()
        if pause > 0:
            time.sleep(pause)

    def written(self, rows: int, held_s: float) -> None:
        """A batch of ``rows`` held the lock ``held_s``: size the next one to the budget (at most doubling)."""
        self._free_from = time.monotonic() + IMPORT_GAP_MS / 1000
        fits = rows * self.budget_s / max(held_s, 1e-4)
        self.rows = int(max(self.least, min(self.most, 2 * self.rows, (self.rows + fits) / 2)))
