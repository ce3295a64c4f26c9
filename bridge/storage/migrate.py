"""Schema upgrades of the bridge store through Alembic, with the refusals that keep the wrong file safe.

`ql-bridge db upgrade` refuses (changing nothing) when the database is newer than this code, or when it is
QingLong 2.x's own database.sqlite, which the bridge never migrates. Every other command uses the store
only at this code's head revision (`require_current_schema`): an empty store, one behind and one newer
than the code (a revision this code does not know) are each refused with what to do.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

import migrations
from bridge.domain.errors import SchemaMismatchError, StoreUnavailableError
from bridge.storage.errors import store_location, translate_operational_error

# Tables that only a QingLong 2.x database has (docs/legacy-2x.md#connection-and-locking).
_LEGACY_SENTINELS = frozenset({"Crontabs", "RunningInstances", "Apps", "Auths", "Envs"})


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@cache
def known_revisions() -> frozenset[str]:
    return frozenset(rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions())


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@dataclass(frozen=True)
class SchemaState:
    """The store's Alembic revision against this code's: empty, behind, current or newer."""

    revision: str | None
    head: str

    @property
    def state(self) -> str:
        if self.revision is None:
            return "empty"
        if self.revision == self.head:
            return "current"
        return "behind" if self.revision in known_revisions() else "newer"


def schema_state(engine: Engine) -> SchemaState:
    """Raises StoreUnavailableError / StorageError when the store cannot be read."""
    try:
        return SchemaState(current_revision(engine), head_revision())
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc


def schema_refusal(engine: Engine, state: SchemaState) -> SchemaMismatchError | None:
    """Why a command must not use a store in ``state`` (None at head), naming the store and both revisions."""
    where = store_location(engine.url)
    if state.state == "newer":
        return SchemaMismatchError(
            f"the bridge store at {where} is at revision {state.revision}, newer than this code (whose newest "
            f"revision is {state.head}): run the ql-bridge that upgraded it, or upgrade ql-bridge",
            revision=state.revision, head=state.head, state="newer")
    if state.state == "empty":
        return SchemaMismatchError(f"the bridge store at {where} is empty: run `ql-bridge db upgrade`",
                                   revision=None, head=state.head, state="empty")
    if state.state == "behind":
        return SchemaMismatchError(
            f"the bridge store at {where} is at revision {state.revision}, behind this code's {state.head}: "
            "run `ql-bridge db upgrade`", revision=state.revision, head=state.head, state="behind")
    return None


def require_writable(engine: Engine) -> None:
    """Raise StoreUnavailableError unless the store takes a write, changing nothing.

    SQLite opens a read-only file (immutable, or a ``mode=ro`` URL) without complaint and even lets BEGIN
    IMMEDIATE pass; only a write statement is refused. So the schema's own row is set to itself and the
    transaction rolled back. PostgreSQL refuses it on a standby or a read-only default (SQLSTATE 25006).
    """
    try:
        with engine.connect() as conn, conn.begin() as transaction:
            conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
            transaction.rollback()
    except DBAPIError as exc:
        raise translate_operational_error(exc) from exc


def refuse_newer_schema(engine: Engine, state: SchemaState) -> None:
    """Raise SchemaMismatchError if the store is newer than this code (an empty or older one is upgradable)."""
    refusal = schema_refusal(engine, state) if state.state == "newer" else None
    if refusal is not None:
        raise refusal


def require_current_schema(engine: Engine) -> None:
    """Raise SchemaMismatchError unless the store is at this code's head revision."""
    refusal = schema_refusal(engine, schema_state(engine))
    if refusal is not None:
        raise refusal


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Bring the store to ``revision``; returns the revision reached. Raises SchemaMismatchError, and Alembic's
    CommandError for a revision it cannot reach (an unknown one before the store is even opened)."""
    if not revision.startswith(("+", "-")) and "@" not in revision:  # relative targets need the current one
        ScriptDirectory.from_config(alembic_config()).get_revisions(revision)
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
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:  # a WAL store in a read-only folder, a damaged file, not a database
        raise StoreUnavailableError("the bridge store is unavailable", driver_error=type(exc).__name__) from exc


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
    if "alembic_version" in tables:
        refuse_newer_schema(engine, SchemaState(current_revision(engine), head_revision()))
