"""Waiting for a condition that a background thread makes true, with a bound."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(check: Callable[[], object], timeout_s: float = 10.0) -> bool:
    """Whether ``check`` came true within ``timeout_s`` (polled every 10 ms)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return bool(check())
