"""A fresh, migrated bridge store for a benchmark: a SQLite file, or a new PostgreSQL schema dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade


@contextmanager
def fresh_store(backend: str, root: Path, pg_url: str, name: str = "bridge") -> Iterator[tuple[str, str | None]]:
    """Yields (url, schema); schema is None for SQLite."""
    if backend == "sqlite":
        url = f"sqlite:///{(root / f'{name}.sqlite').resolve()}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url, None
        return
    schema = f"bench_{name}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        try:
            engine = make_engine(pg_url, pg_search_path=schema)
            upgrade(engine)
            engine.dispose()
            yield pg_url, schema
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()
