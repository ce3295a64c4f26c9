"""The bridge store as the commands open it: only `db upgrade` creates one, and a store whose schema is not
this code's is refused (one line) before a command reads or writes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.cli.failures import CommandFailedError
from bridge.cli.output import PROG
from bridge.config import Settings

if TYPE_CHECKING:
    from bridge.bootstrap import Store


def open_store(settings: Settings, *, create: bool = False) -> Store:
    """The bridge store. Only `db upgrade` creates one (``create``): for any other command a missing SQLite
    file is refused, and nothing (file or folder) is created."""
    from bridge.bootstrap import build_store
    from bridge.storage.errors import sqlite_file

    path = sqlite_file(settings.database_url) if settings.database_url.startswith("sqlite:") else None
    if not create and path is not None and not path.exists():
        raise CommandFailedError(f"no store at {path}: run `{PROG} db upgrade`")
    return build_store(settings)


def current_store(settings: Settings) -> Store:
    """The bridge store, refused (one line) unless its schema is this code's: empty, behind or newer."""
    from bridge.storage.migrate import require_current_schema

    store = open_store(settings)
    try:
        require_current_schema(store.engine)
    except BaseException:
        store.close()
        raise
    return store


def check_store(settings: Settings) -> None:
    """For commands that open the store themselves: refuse a missing, unreachable or not-current store first."""
    current_store(settings).close()
