"""Least privilege on PostgreSQL (docs/run-state.md#stepruns-on-both-stores): a runtime role for `ql-bridge serve` and a
read-only role for reports and the v3 API, created or brought up to date by `ql-bridge db roles`, run as the owner of
the bridge's tables.

Neither role may change the schema (no CREATE on it, not the tables' owner, so `db upgrade` stays the owner's).
The runtime role may SELECT, INSERT and UPDATE step_runs, and only SELECT and INSERT step_run_mutations and
run_events: the ledger and the Events are append-only for it. The reader may only SELECT, and not the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, inspect, text

from bridge.storage.schema import metadata

RUNTIME_ROLE = "ql_bridge_runtime"
READER_ROLE = "ql_bridge_reader"
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Tables whose rows the runtime role may not change or delete; every other bridge table gets RUNTIME_DEFAULT.
RUNTIME_PRIVILEGES: Mapping[str, tuple[str, ...]] = {
    "step_runs": ("SELECT", "INSERT", "UPDATE"),
    "step_run_mutations": ("SELECT", "INSERT"),  # the mutation ledger: append-only
    "run_events": ("SELECT", "INSERT"),  # append-only facts (docs/run-state.md#records)
    "runs": ("SELECT", "INSERT", "UPDATE"),  # never deleted
    "run_attempts": ("SELECT", "INSERT", "UPDATE"),
    "flag_audit": ("SELECT", "INSERT"),  # the flag history: append-only
    "alembic_version": ("SELECT",),  # serve checks the schema revision; only `db upgrade` moves it
}
RUNTIME_DEFAULT = ("SELECT", "INSERT", "UPDATE", "DELETE")  # scratch, leases, outbox, pending ends
READER_HIDDEN = frozenset({"step_run_mutations"})  # no report or v3 view reads the ledger


@dataclass(frozen=True)
class RoleGrants:
    role: str
    created: bool  # False: the role existed; its privileges were replaced, its attributes and password kept
    privileges: Mapping[str, tuple[str, ...]]  # table -> privileges now granted in the store's schema


def role_privileges(tables: list[str]) -> dict[str, dict[str, tuple[str, ...]]]:
    """What each role gets on each of ``tables`` (the reader: SELECT on all but the ledger)."""
    return {
        "runtime": {t: RUNTIME_PRIVILEGES.get(t, RUNTIME_DEFAULT) for t in tables},
        "reader": {t: ("SELECT",) for t in tables if t not in READER_HIDDEN},
    }


def apply_roles(engine: Engine, *, runtime: str = RUNTIME_ROLE, reader: str = READER_ROLE) -> list[RoleGrants]:
    """Create the roles (LOGIN, no password: set one with ALTER ROLE, or authenticate them in pg_hba.conf) or
    keep existing ones, and replace their privileges in the store's schema, in one transaction.

    Raises ValueError for a role name that is not a plain lowercase identifier, or on a store without roles.
    """
    if engine.dialect.name != "postgresql":
        raise ValueError("only a PostgreSQL store has roles")
    for name in (runtime, reader):
        if not ROLE_NAME.fullmatch(name):
            raise ValueError(f"role name {name!r} must be lowercase letters, digits and _ (at most 63)")
    if runtime == reader:
        raise ValueError("the runtime and reader roles must differ")
    with engine.begin() as conn:
        schema = conn.execute(text("SELECT current_schema()")).scalar_one()
        existing = set(inspect(conn).get_table_names(schema=schema))
        tables = sorted(existing & ({t.name for t in metadata.sorted_tables} | {"alembic_version"}))
        grants = role_privileges(tables)
        return [_grant(conn, schema, name, grants[kind], sequences=kind == "runtime")
                for kind, name in (("runtime", runtime), ("reader", reader))]


def _grant(conn: Connection, schema: str, role: str, privileges: Mapping[str, tuple[str, ...]], *,
           sequences: bool) -> RoleGrants:
    created = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is None
    if created:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
    q = f'"{schema}"'
    for statement in (f'REVOKE ALL ON ALL TABLES IN SCHEMA {q} FROM "{role}"',
                      f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA {q} FROM "{role}"',
                      f'REVOKE ALL ON SCHEMA {q} FROM "{role}"',
                      f'GRANT USAGE ON SCHEMA {q} TO "{role}"'):
        conn.execute(text(statement))
    for table, granted in privileges.items():
        conn.execute(text(f'GRANT {", ".join(granted)} ON {q}."{table}" TO "{role}"'))
    if sequences:  # the auto-increment ids of the tables it inserts into
        conn.execute(text(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA {q} TO "{role}"'))
    return RoleGrants(role, created, dict(privileges))
