"""`ql-bridge db upgrade | roles`: the bridge store's schema, and its least-privilege PostgreSQL roles."""

from __future__ import annotations

from alembic.util import CommandError

from bridge.cli.failures import CommandFailedError
from bridge.cli.store_access import current_store, open_store
from bridge.config import Settings
from bridge.storage.errors import store_location, url_without_password


def upgrade_store(revision: str) -> str:
    """`db upgrade`: create or upgrade the bridge store to ``revision``; the line saying where it is now."""
    from bridge.storage.migrate import head_revision, upgrade

    settings = Settings.from_env()
    store = open_store(settings, create=True)
    try:
        reached = upgrade(store.engine, revision)
    except CommandError as exc:  # the target is resolved before anything changes
        raise CommandFailedError(f"--revision {revision}: {exc} (this code's newest is {head_revision()}); the "
                                 f"bridge store at {store_location(settings.database_url)} is unchanged") from exc
    finally:
        store.close()
    return f"bridge store {url_without_password(settings.database_url)} is at revision {reached}"


def grant_roles(runtime: str, reader: str) -> list[str]:
    """`db roles`: create or update the two roles on a PostgreSQL store; the lines naming what each may do."""
    from bridge.storage.engine import store_capabilities
    from bridge.storage.roles import apply_roles

    store = current_store(Settings.from_env())
    try:
        if not store_capabilities(store.engine).database_roles:
            raise CommandFailedError("db roles: a SQLite store has no roles; who may write it is the file's "
                                     "permissions")
        try:
            granted = apply_roles(store.engine, runtime=runtime, reader=reader)
        except ValueError as exc:
            raise CommandFailedError(f"db roles: {exc}") from exc
    finally:
        store.close()
    lines = []
    for grant in granted:
        lines.append(f"{grant.role} ({'created' if grant.created else 'updated'}):")
        lines.extend(f"  {table}: {', '.join(privileges)}" for table, privileges in grant.privileges.items())
    return lines
