"""A SQLite file held by another process: an operator's sqlite3 shell, a backup tool, with an exclusive
transaction open until the test lets go."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held_by_another_process(database: str | Path) -> Iterator[None]:
    """Another Python process holds ``database`` in `BEGIN EXCLUSIVE` while the block runs."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         f"c = sqlite3.connect({str(database)!r}, isolation_level=None)\n"
         "c.execute('BEGIN EXCLUSIVE')\nprint('held', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder ends, and its transaction with it
        holder.wait(timeout=10)
