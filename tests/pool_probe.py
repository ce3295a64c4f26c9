"""PoolProbe: the most pooled connections an engine had checked out at once (for tests and benchmarks)."""

from __future__ import annotations

import threading

from sqlalchemy import Engine, event


class PoolProbe:
    def __init__(self, engine: Engine) -> None:
        self._out = 0
        self.peak = 0
        self._lock = threading.Lock()
        event.listen(engine, "checkout", lambda *_: self._count(1))
        event.listen(engine, "checkin", lambda *_: self._count(-1))

    def reset(self) -> None:
        with self._lock:
            self.peak = self._out

    def _count(self, delta: int) -> None:
        with self._lock:
            self._out += delta
            self.peak = max(self.peak, self._out)
