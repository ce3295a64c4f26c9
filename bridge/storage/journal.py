"""SqliteFactJournal: the fact journal (bridge.service.journal) as a small SQLite file beside the bridge's data.

SQLite, not the bridge store: the journal must work exactly when the store does not (a PostgreSQL failover, a
store file another process holds locked), so it is a file of its own, used by this process only. Every append is
one committed transaction with ``synchronous=FULL``, so an entry survives a crash of the process or the machine
once ``append`` has returned. One connection, serialised by a lock: appends come from the write lanes, reads and
removals from the one replayer, each a few hundred microseconds.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from bridge.service.journal import JournalEntry

_SCHEMA = ("CREATE TABLE IF NOT EXISTS facts (id INTEGER PRIMARY KEY AUTOINCREMENT, kept_at_ms INTEGER NOT NULL, "
           "document TEXT NOT NULL)")


class SqliteFactJournal:
    def __init__(self, path: Path, *, capacity: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.capacity = capacity
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=1.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(_SCHEMA)
        self._size = int(self._conn.execute("SELECT count(*) FROM facts").fetchone()[0])

    def append(self, document: str, kept_at_ms: int) -> bool:
        with self._lock:
            if self._size >= self.capacity:
                return False
            self._conn.execute("INSERT INTO facts (kept_at_ms, document) VALUES (?, ?)", (kept_at_ms, document))
            self._size += 1
            return True

    def oldest(self, limit: int) -> list[JournalEntry]:
        with self._lock:
            rows = self._conn.execute("SELECT id, document, kept_at_ms FROM facts ORDER BY id LIMIT ?",
                                      (limit,)).fetchall()
        return [JournalEntry(int(row[0]), str(row[1]), int(row[2])) for row in rows]

    def remove(self, entry_ids: Sequence[int]) -> None:
        if not entry_ids:
            return
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                for chunk in range(0, len(entry_ids), 500):
                    ids = list(entry_ids[chunk:chunk + 500])
                    self._conn.execute(f"DELETE FROM facts WHERE id IN ({','.join('?' * len(ids))})", ids)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._size = int(self._conn.execute("SELECT count(*) FROM facts").fetchone()[0])

    def size(self) -> int:
        with self._lock:
            return self._size

    def oldest_kept_at_ms(self) -> int | None:
        with self._lock:
            row = self._conn.execute("SELECT kept_at_ms FROM facts ORDER BY id LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
