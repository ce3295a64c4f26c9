"""The import's private copy of 2.x's database: taken by legacy_adapters.online_backup, checked to be a 2.x
database, and removed afterwards; a file that is none refuses the import."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from bridge.domain.errors import BridgeError
from legacy_adapters.database_state import DatabaseState
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.online_backup import backup_copy
from legacy_adapters.ports import LegacyRecords


class ImportRefusedError(BridgeError):
    """The import did not start: no 2.x database is configured, or the file is not one. Nothing was written."""

    code = "LEGACY_IMPORT_REFUSED"

    def __init__(self, message: str, *, reason: str, path: str | None = None) -> None:
        super().__init__(message, reason=reason, path=path)
        self.reason = reason
        self.path = path


def private_copy(source: Path, copy: Path) -> None:
    """Copy 2.x's database at ``source`` to ``copy`` while 2.x keeps writing (legacy_adapters.online_backup).
    Raises ImportRefusedError when the source is missing or is not an SQLite database."""
    try:
        backup_copy(source, copy)
    except LegacyDatabaseError as exc:
        if exc.reason == DatabaseState.MISSING:
            raise ImportRefusedError(f"2.x's database {source} does not exist", reason="missing",
                                     path=str(source)) from exc
        refusal = exc.__cause__ or exc  # SQLite's own words on the file, as the operator would look them up
        raise ImportRefusedError(f"{source} is not a QingLong 2.x database ({type(refusal).__name__}: {refusal})",
                                 reason="not_legacy", path=str(source)) from exc


def temp_copy_path(data_dir: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=".legacy-import-", suffix=".sqlite", dir=data_dir)
    os.close(fd)
    return Path(name)


def remove_copy(copy: Path) -> None:
    for path in (copy, copy.with_name(copy.name + "-journal")):
        path.unlink(missing_ok=True)


def checked_reader(source: Path, copy: Path, open_reader: Callable[[Path], LegacyRecords]) -> LegacyRecords:
    """A reader of the private ``copy`` (``open_reader``, given by the composition root), once it reads as 2.x's."""
    reader = open_reader(copy)
    try:
        reader.check_is_legacy_database()
    except LegacyDatabaseError as exc:
        detail = {"not_legacy": "it has no Crontabs(id, command, schedule) table",
                  "unsupported": "it already holds QingLong 3.0 tables"}.get(exc.reason, exc.reason)
        raise ImportRefusedError(f"{source} is not a QingLong 2.x database: {detail}", reason=exc.reason,
                                 path=str(source)) from exc
    return reader
