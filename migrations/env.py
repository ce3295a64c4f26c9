"""Alembic environment: runs on a connection handed in by bridge.storage.migrate (never on 2.x's database)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from bridge.storage.schema import metadata

config = context.config


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    def only_where_it_exists(obj, name, type_, reflected, compare_to) -> bool:  # type: ignore[no-untyped-def]
        # A constraint schema.py marks with info["dialects"] exists on those stores only (the StepRun same-Run
        # foreign keys are PostgreSQL's; SQLite has triggers instead), so it is compared only there.
        dialects = getattr(obj, "info", {}).get("dialects")
        return reflected or dialects is None or connection.dialect.name in dialects

    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite ALTERs go through batch mode
        compare_type=True,
        include_object=only_where_it_exists,
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
