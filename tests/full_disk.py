"""FullDisk: a SQLite store whose disk is full, injected through the sqlite3 connection class."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Engine, event


class FullDisk:
    """While ``on``, every commit that would write pages fails with the error SQLite raises on a full disk
    ("database or disk is full"), and leaves its transaction open, as SQLite may after SQLITE_FULL. BEGIN
    IMMEDIATE, SELECT 1 and an empty commit still succeed, as they do on a full disk in WAL mode.
    """

    def __init__(self, engine: Engine) -> None:
        self.on = True
        disk = self

        class Connection(sqlite3.Connection):
            committed_changes = 0

            def commit(self) -> None:
                if disk.on and self.total_changes != self.committed_changes:
                    raise sqlite3.OperationalError("database or disk is full")
                super().commit()
                self.committed_changes = self.total_changes

            def rollback(self) -> None:
                super().rollback()
                self.committed_changes = self.total_changes

        event.listen(engine, "do_connect", lambda _d, _r, _a, params: params.update(factory=Connection))
        engine.dispose()  # connections opened before this point would not fail
