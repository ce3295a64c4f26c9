"""pending_ends keeps the two facts of an end that revision 0010 had no place for: no exit code, and the trap.

Before v2.21 no end callback carries an exit code (docs/legacy-2x.md#no-exit-code-before-v221), and such an end
may wait for 2.x's evidence of a stop like any other (docs/stops.md); the seam block says when task.sh's signal trap
sent the end (legacy_adapters/shell_report.py). So `exit_code` may be NULL, and `trapped` says the trap sent it.
The table is small and nothing refers to it: on SQLite batch mode copies it.

The downgrade is refused, changing nothing, while a waiting end has no exit code or was trapped: 0015's table
cannot hold it (the end would be decided wrongly). Such ends wait seconds; downgrade once they are decided.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def _exit_code_type() -> sa.types.TypeEngine:
    # As revision 0014 left it: DOUBLE PRECISION on PostgreSQL, INTEGER affinity on SQLite.
    return postgresql.DOUBLE_PRECISION() if op.get_bind().dialect.name == 'postgresql' else sa.BigInteger()


def upgrade() -> None:
    with op.batch_alter_table('pending_ends', schema=None) as batch_op:
        batch_op.alter_column('exit_code', existing_type=_exit_code_type(), nullable=True)
        batch_op.add_column(sa.Column('trapped', sa.Boolean(), server_default='0', nullable=False))


def downgrade() -> None:
    waiting = op.get_bind().execute(
        sa.text('SELECT count(*) FROM pending_ends WHERE exit_code IS NULL OR trapped')).scalar()
    if waiting:
        raise RuntimeError(f'{waiting} waiting end(s) have no exit code or were sent by the shell\'s trap; revision '
                           '0015 cannot keep them, so the downgrade is refused and nothing was changed (they are '
                           'decided within seconds: try again)')
    with op.batch_alter_table('pending_ends', schema=None) as batch_op:
        batch_op.drop_column('trapped')
        batch_op.alter_column('exit_code', existing_type=_exit_code_type(), nullable=False)
