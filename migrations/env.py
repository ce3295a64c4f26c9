"""Alembic environment: runs on a connection handed in by bridge.storage.migrate (never on 2.x's database)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from bridge.storage.schema import metadata

config = context.config


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite ALTERs go through batch mode
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)
