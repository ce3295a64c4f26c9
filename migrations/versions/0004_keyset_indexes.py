"""Indexes for keyset pages over runs (v3 API, reconciler) and the duplicate check.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_created_id', ['created_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_runs_cron_pid_log', ['legacy_cron_id', 'legacy_pid', 'log_ref'], unique=False)
        batch_op.create_index('ix_runs_origin_created', ['origin', 'created_at_ms'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_origin_created')
        batch_op.drop_index('ix_runs_cron_pid_log')
        batch_op.drop_index('ix_runs_created_id')

