"""Primary mode: run_attempts.legacy_log_path, the 2.x log_path the projection writes back.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('legacy_log_path', sa.Text(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.drop_column('legacy_log_path')

