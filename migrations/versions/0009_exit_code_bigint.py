"""run_attempts.exit_code holds any integer 2.x accepts: BIGINT on PostgreSQL.

2.x stores whatever JS number its Joi schema lets through (up to 2**53 - 1 in magnitude); a 32-bit column
failed the whole end transaction on PostgreSQL and left the Run open. SQLite's INTEGER already holds 64
bits, so there the revision changes nothing (no table copy).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.alter_column('run_attempts', 'exit_code', type_=sa.BigInteger(), existing_type=sa.Integer(),
                        existing_nullable=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    # Narrowing would fail on the first wide value anyway; say why instead, and change nothing.
    wide = op.get_bind().execute(
        sa.text('SELECT count(*) FROM run_attempts WHERE exit_code NOT BETWEEN :low AND :high'),
        {'low': _INT32_MIN, 'high': _INT32_MAX}).scalar()
    if wide:
        raise RuntimeError(f'{wide} run_attempts rows hold an exit code outside 32 bits; revision 0008 '
                           'cannot store them, so the downgrade is refused and nothing was changed')
    op.alter_column('run_attempts', 'exit_code', type_=sa.Integer(), existing_type=sa.BigInteger(),
                    existing_nullable=True)
