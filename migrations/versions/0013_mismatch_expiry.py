"""Mismatch lifecycle: why a mismatch closed without a judgment, and which reconcile pass closed it.

A mismatch is open while ``resolved_at_ms`` is NULL. A pass that judged it again and did not find it closes it
as resolved; a pass that can no longer judge it (its 2.x row or Run past the lookback, its cron deleted in 2.x,
its row gone, a callback older than the lookback) closes it as expired, with ``expired_reason``. Either way
``closed_by_pass`` names the pass (no foreign key: pass records are pruned after seven days, mismatches never).
Seen again, a mismatch is open again and both columns are cleared.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('mismatches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('expired_reason', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('closed_by_pass', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('mismatches', schema=None) as batch_op:
        batch_op.drop_column('closed_by_pass')
        batch_op.drop_column('expired_reason')
