"""A partial index of each cron's bridge-owned Runs by status, for the projector.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

# Frozen here as the revision wrote it (bridge.storage.schema.BRIDGE_OWNED_SQL at the time).
BRIDGE_OWNED_SQL = "owner = 'bridge'"


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_bridge_owned_by_cron', ['legacy_cron_id', 'status', 'created_at_ms'],
                              unique=False, sqlite_where=sa.text(BRIDGE_OWNED_SQL),
                              postgresql_where=sa.text(BRIDGE_OWNED_SQL))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_bridge_owned_by_cron')
