"""Runs and Attempts may be `ended`: the execution finished and nobody reported how (docs/run-state.md#outcome-not-reported).

The status CHECKs of runs and run_attempts take the new value. On PostgreSQL each is dropped and added again.
SQLite cannot alter a CHECK, and batch mode's table copy cannot run here: the upgrade is one transaction on a
connection with foreign_keys=ON (which SQLite will not switch off inside a transaction), so dropping `runs`
with Attempts and events pointing at it fails (FOREIGN KEY constraint failed), and the copy would also drop the
StepRun triggers of run_attempts (0011). The CHECK is only widened, so every row already satisfies it, and
SQLite documents editing the table's text for exactly this (https://sqlite.org/lang_altertable.html#otheralter:
writable_schema, then a new schema_version): no row is copied, no index or trigger touched.

The downgrade is refused, changing nothing, while any run or attempt is `ended`: 0014's CHECKs cannot hold it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

# The lists as revision 0001 wrote them (frozen here: a later status is a later revision's business).
_RUNS_0014 = ("'created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'succeeded', "
              "'failed', 'cancelled', 'timed_out', 'lost'")
_ATTEMPTS_0014 = "'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost'"
# (table, constraint, statuses at 0014, statuses at 0015)
_CHECKS = (
    ('runs', 'ck_runs_status_known', _RUNS_0014, _RUNS_0014 + ", 'ended'"),
    ('run_attempts', 'ck_run_attempts_status_known', _ATTEMPTS_0014, _ATTEMPTS_0014 + ", 'ended'"),
)


def upgrade() -> None:
    _swap_checks({table: (name, before, after) for table, name, before, after in _CHECKS})


def downgrade() -> None:
    bind = op.get_bind()
    for table, *_ in _CHECKS:
        ended = bind.execute(sa.text(f"SELECT count(*) FROM {table} WHERE status = 'ended'")).scalar()
        if ended:
            raise RuntimeError(f"{ended} {table} rows are 'ended'; revision 0014 cannot store that status, so the "
                               "downgrade is refused and nothing was changed")
    _swap_checks({table: (name, after, before) for table, name, before, after in _CHECKS})


def _swap_checks(swaps: dict[str, tuple[str, str, str]]) -> None:
    """Replace each table's status CHECK ``name`` listing ``before`` by one listing ``after``."""
    if op.get_bind().dialect.name == 'sqlite':
        _sqlite_swap_checks(swaps)
        return
    for table, (name, _before, after) in swaps.items():
        op.drop_constraint(op.f(name), table, type_='check')
        op.create_check_constraint(op.f(name), table, sa.text(f'status IN ({after})'))


def _sqlite_swap_checks(swaps: dict[str, tuple[str, str, str]]) -> None:
    """SQLite's documented in-place edit of a table's text; refuses (changing nothing) if a text is not as 0001
    wrote it."""
    bind = op.get_bind()
    texts = {}
    for table, (name, before, after) in swaps.items():
        sql = bind.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                   (table,)).scalar()
        old = f"CONSTRAINT {name} CHECK (status IN ({before}))"
        new = f"CONSTRAINT {name} CHECK (status IN ({after}))"
        if not isinstance(sql, str) or sql.count(old) != 1:
            raise RuntimeError(f'the CHECK {name} of {table} is not the one this revision expects; nothing was '
                               'changed')
        texts[table] = sql.replace(old, new)
    version = bind.exec_driver_sql('PRAGMA schema_version').scalar()
    bind.exec_driver_sql('PRAGMA writable_schema = ON')
    try:
        for table, sql in texts.items():
            bind.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (sql, table))
        # Every connection re-reads the schema when this number changes (step 5 of SQLite's procedure).
        bind.exec_driver_sql(f'PRAGMA schema_version = {int(version) + 1}')
    finally:
        bind.exec_driver_sql('PRAGMA writable_schema = OFF')
