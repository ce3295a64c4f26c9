"""Alembic revisions of the bridge store; the same history runs on SQLite and PostgreSQL."""
