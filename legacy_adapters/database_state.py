"""What 2.x's database file is, as the bridge sees it: a ``DatabaseState``, and the state an SQLite error reveals.

Readers and writers of 2.x's database share these codes (error reasons, metric labels).
"""

from __future__ import annotations

import os
import sqlite3
from enum import StrEnum
from pathlib import Path


class DatabaseState(StrEnum):
    """What 2.x's database is, as the bridge sees it; each value is a stable code (error reason, metric label).

    Only the foreign states may stop the bridge: a database that is positively something else. Every other
    state passes (a killed writer, a restore, 2.x's first boot): the bridge keeps forwarding and reads again.
    """

    OK = "ok"
    LOCKED = "locked"  # another connection holds the lock longer than the busy timeout
    HOT_JOURNAL = "hot_journal"  # a writer died mid-transaction: only a connection with write access rolls it back
    MISSING = "missing"  # no file at the path
    EMPTY = "empty"  # an SQLite file without a single table: emptied, or 2.x has not created its tables yet
    UNREADABLE = "unreadable"  # there, but it cannot be opened or read (permissions, not a regular file, I/O)
    CORRUPT = "corrupt"  # an SQLite file that is truncated or malformed
    READ_ONLY = "read_only"  # readable, but it takes no writes (the projector's view of a read-only mount)
    NOT_LEGACY = "not_legacy"  # foreign: an SQLite database without 2.x's Crontabs table, or not SQLite at all
    UNSUPPORTED = "unsupported"  # foreign: a 2.x database a QingLong 3.0 migration has already changed


FOREIGN_STATES = frozenset({DatabaseState.NOT_LEGACY, DatabaseState.UNSUPPORTED})
TRANSIENT_STATES = frozenset(DatabaseState) - FOREIGN_STATES - {DatabaseState.OK}
STATE_DETAIL = {
    DatabaseState.LOCKED: "another connection holds its lock",
    DatabaseState.HOT_JOURNAL: "a writer died mid-transaction and left a hot rollback journal; it reads again once "
                               "a connection with write access (2.x's next one) has rolled it back",
    DatabaseState.MISSING: "no such file",
    DatabaseState.EMPTY: "it holds no table: emptied, or 2.x has not created its tables yet",
    DatabaseState.UNREADABLE: "it cannot be opened or read",
    DatabaseState.CORRUPT: "truncated or malformed",
    DatabaseState.READ_ONLY: "attempt to write a readonly database",
    DatabaseState.NOT_LEGACY: "not an SQLite database with 2.x's Crontabs(id, command, schedule) table",
}
# sqlite3 result codes (sqlite3.h). 776 is SQLITE_READONLY_ROLLBACK: a hot journal a read-only connection met.
_BUSY, _LOCKED, _CORRUPT, _CANTOPEN, _NOTADB, _READONLY_ROLLBACK = 5, 6, 11, 14, 26, 776
_SQLITE_MAGIC = b"SQLite format 3\x00"


def database_state(path: str | os.PathLike[str], exc: sqlite3.Error) -> DatabaseState:
    """The state an SQLite error raised while reading or writing ``path`` reveals."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if code == _READONLY_ROLLBACK:
        return DatabaseState.HOT_JOURNAL
    if primary in (_BUSY, _LOCKED) or "database is locked" in str(exc).lower():
        return DatabaseState.LOCKED
    if primary == _CORRUPT:
        return DatabaseState.CORRUPT
    if primary == _NOTADB:
        return _not_a_database(Path(path))
    if primary == _CANTOPEN and not os.path.lexists(path):
        return DatabaseState.MISSING
    return DatabaseState.UNREADABLE


def _not_a_database(path: Path) -> DatabaseState:
    """SQLite refused the file: foreign only when its first bytes are positively something else.

    Read only once SQLite has refused the file, so no connection of this process holds a lock on it (closing
    any descriptor of a file drops the process's POSIX locks on it).
    """
    try:
        with path.open("rb") as file:
            head = file.read(16)
    except FileNotFoundError:
        return DatabaseState.MISSING
    except OSError:
        return DatabaseState.UNREADABLE
    if len(head) < len(_SQLITE_MAGIC) or not head.strip(b"\0") or head == _SQLITE_MAGIC:
        return DatabaseState.CORRUPT  # cut inside the header, zeroed, or an SQLite header with broken fields
    return DatabaseState.NOT_LEGACY
