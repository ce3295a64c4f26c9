"""A partial index of each cron's open Runs, for callback correlation.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# Frozen here as the revision wrote it (bridge.storage.schema.ACTIVE_STATUS_SQL at the time).
ACTIVE_STATUS_SQL = ("status IN ('created', 'dispatching', 'lost', 'queued', 'retry_wait', 'running', "
                     "'waiting_approval')")


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_active_by_cron', ['legacy_cron_id', 'created_at_ms'], unique=False,
                              sqlite_where=sa.text(ACTIVE_STATUS_SQL), postgresql_where=sa.text(ACTIVE_STATUS_SQL))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_active_by_cron')
