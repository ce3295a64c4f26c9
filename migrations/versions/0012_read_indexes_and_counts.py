"""Indexes that end in the v3 list's sort key (created_at_ms, id) for each of its filters.

The v3 list orders by (created_at_ms, id) newest first. An index per filter that ends in exactly that key lets
either planner read a page off one index range and stop, whatever its statistics say about the value; before,
a planner that expected a value to be common walked ix_runs_created_id filtering row by row (the whole table
when the value was rare). ix_runs_origin_created, ix_runs_legacy_cron_status and ix_runs_active_by_cron keep
their names and gain the id (the callback path's read of a cron's open Runs sorts the same way: without the
id its partial index would lose to the cron's whole history in order); ix_runs_status_created_id and
ix_runs_cron_created_id are new. The status and origin indexes also let `ql-bridge status` count open Runs
and rare values without walking the table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

# Frozen here as the revision wrote it (bridge.storage.schema.ACTIVE_STATUS_SQL at the time).
ACTIVE_STATUS_SQL = ("status IN ('created', 'dispatching', 'lost', 'queued', 'retry_wait', 'running', "
                     "'waiting_approval')")


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_origin_created')
        batch_op.drop_index('ix_runs_legacy_cron_status')
        batch_op.drop_index('ix_runs_active_by_cron')
        batch_op.create_index('ix_runs_origin_created', ['origin', 'created_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_runs_legacy_cron_status', ['legacy_cron_id', 'status', 'created_at_ms', 'id'],
                              unique=False)
        batch_op.create_index('ix_runs_active_by_cron', ['legacy_cron_id', 'created_at_ms', 'id'], unique=False,
                              sqlite_where=sa.text(ACTIVE_STATUS_SQL), postgresql_where=sa.text(ACTIVE_STATUS_SQL))
        batch_op.create_index('ix_runs_status_created_id', ['status', 'created_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_runs_cron_created_id', ['legacy_cron_id', 'created_at_ms', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_cron_created_id')
        batch_op.drop_index('ix_runs_status_created_id')
        batch_op.drop_index('ix_runs_active_by_cron')
        batch_op.drop_index('ix_runs_legacy_cron_status')
        batch_op.drop_index('ix_runs_origin_created')
        batch_op.create_index('ix_runs_active_by_cron', ['legacy_cron_id', 'created_at_ms'], unique=False,
                              sqlite_where=sa.text(ACTIVE_STATUS_SQL), postgresql_where=sa.text(ACTIVE_STATUS_SQL))
        batch_op.create_index('ix_runs_legacy_cron_status', ['legacy_cron_id', 'status', 'created_at_ms'],
                              unique=False)
        batch_op.create_index('ix_runs_origin_created', ['origin', 'created_at_ms'], unique=False)
