"""pending_ends: end callbacks with a signal exit that wait for 2.x's evidence of a stop before their Run closes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import sqlite

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'pending_ends',
        sa.Column('id', sa.BigInteger().with_variant(sqlite.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('dedupe_key', sa.String(length=200), nullable=False),
        sa.Column('run_id', sa.String(length=36), nullable=False),
        sa.Column('run_created_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('legacy_cron_id', sa.BigInteger(), nullable=False),
        sa.Column('pid', sa.BigInteger(), nullable=True),
        sa.Column('log_ref', sa.String(length=36), nullable=True),
        sa.Column('started_at_ms', sa.BigInteger(), nullable=True),
        sa.Column('duration_ms', sa.BigInteger(), nullable=True),
        sa.Column('exit_code', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
        sa.Column('received_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('due_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_pending_ends')),
        sa.UniqueConstraint('dedupe_key', name=op.f('uq_pending_ends_dedupe_key')),
    )
    with op.batch_alter_table('pending_ends', schema=None) as batch_op:
        batch_op.create_index('ix_pending_ends_due', ['due_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_pending_ends_cron', ['legacy_cron_id', 'id'], unique=False)
        batch_op.create_index('ix_pending_ends_run', ['run_id'], unique=False)


def downgrade() -> None:
    # Rows still waiting are ends no Run has taken yet: 0009 has nowhere to keep them, so they go with the table
    # (their Runs stay running until startup recovery or the reconciler closes them from 2.x's rows).
    with op.batch_alter_table('pending_ends', schema=None) as batch_op:
        batch_op.drop_index('ix_pending_ends_run')
        batch_op.drop_index('ix_pending_ends_cron')
        batch_op.drop_index('ix_pending_ends_due')
    op.drop_table('pending_ends')
