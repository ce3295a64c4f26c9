"""Alembic revisions of the bridge store; the same history runs on SQLite and PostgreSQL.

Revisions spell out their own DDL (never imported models), so an old revision keeps meaning what it meant;
only ``env.py`` imports ``bridge.storage.schema`` (for autogenerate's comparison). Run by ``bridge.storage.migrate``.
"""
