"""Schema upgrades of the bridge store through Alembic, with the refusals that keep the wrong file safe.

`bridge db upgrade` refuses (changing nothing) when the database is newer than this code, or when it is
QingLong 2.x's own database.sqlite, which the bridge never migrates.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import DBAPIError

import migrations
from bridge.domain.errors import SchemaMismatchError
from bridge.storage.errors import translate_operational_error

# Tables that only a QingLong 2.x database has (legacy-2x.md 2.1).
_LEGACY_SENTINELS = frozenset({"Crontabs", "RunningInstances", "Apps", "Auths", "Envs"})


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Bring the store to ``revision``; returns the revision reached. Raises SchemaMismatchError."""
    try:
        _refuse_foreign_database(engine)
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        reached = current_revision(engine)
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc
    return reached or "base"


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def _sqlite_tables_read_only(engine: Engine) -> set[str] | None:
    """Table names of an existing SQLite file, read without the engine's pragmas.

    The engine switches a file to WAL on connect; doing that to 2.x's database would change how 2.x
    runs, so the file is looked at read-only first.
    """
    path = engine.url.database
    if engine.dialect.name != "sqlite" or not path or path == ":memory:" or not Path(path).exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def refuse_legacy_database(engine: Engine, tables: set[str] | None = None) -> None:
    """Raise SchemaMismatchError if the engine points at QingLong 2.x's database (checked read-only)."""
    if tables is None:
        tables = _sqlite_tables_read_only(engine)
    legacy = sorted((tables or set()) & _LEGACY_SENTINELS)
    if legacy:
        raise SchemaMismatchError(
            "this looks like QingLong 2.x's own database (it has " + ", ".join(legacy) +
            "); the bridge never migrates it. Point BRIDGE_DATABASE_URL at the bridge's own store.",
            tables=legacy)


def _refuse_foreign_database(engine: Engine) -> None:
    tables = _sqlite_tables_read_only(engine)
    if tables is None:
        tables = set(inspect(engine).get_table_names())
    refuse_legacy_database(engine, tables)
    current = current_revision(engine) if "alembic_version" in tables else None
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current is not None and current not in known:
        raise SchemaMismatchError(
            f"the store is at revision {current}, which this version of ql-bridge does not know "
            "(it is newer); upgrade ql-bridge instead", revision=current)
