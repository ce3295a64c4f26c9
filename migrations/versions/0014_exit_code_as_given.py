"""Exit codes as 2.x keeps them: DOUBLE PRECISION on PostgreSQL, so a fraction (0.5) is kept, not rounded.

2.x's Joi schema takes any safe JS number and stores it as given; BIGINT could not hold 0.5. DOUBLE PRECISION
holds every integer up to 2**53 exactly, which is every integer Joi accepts. SQLite's INTEGER affinity already
keeps a fraction as REAL, so there the revision changes nothing (no table copy).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

_COLUMNS = (('run_attempts', True), ('pending_ends', False))  # (table, nullable)


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    for table, nullable in _COLUMNS:
        op.alter_column(table, 'exit_code', type_=postgresql.DOUBLE_PRECISION(), existing_type=sa.BigInteger(),
                        existing_nullable=nullable, postgresql_using='exit_code::double precision')


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    for table, _nullable in _COLUMNS:
        fractions = op.get_bind().execute(
            sa.text(f'SELECT count(*) FROM {table} WHERE exit_code <> trunc(exit_code)')).scalar()
        if fractions:
            raise RuntimeError(f'{fractions} {table} rows hold a fractional exit code; revision 0013 cannot store '
                               'them, so the downgrade is refused and nothing was changed')
    for table, nullable in _COLUMNS:
        op.alter_column(table, 'exit_code', type_=sa.BigInteger(), existing_type=postgresql.DOUBLE_PRECISION(),
                        existing_nullable=nullable, postgresql_using='exit_code::bigint')
