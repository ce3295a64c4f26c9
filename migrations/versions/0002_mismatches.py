"""Mismatch rows: disagreements between 2.x and the shadow facts, and callbacks that could not be placed.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('mismatches',
    sa.Column('id', sa.BigInteger().with_variant(sa.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=48), nullable=False),
    sa.Column('origin', sa.String(length=32), nullable=True),
    sa.Column('legacy_cron_id', sa.BigInteger(), nullable=True),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('dedupe_key', sa.String(length=200), nullable=False),
    sa.Column('first_seen_ms', sa.BigInteger(), nullable=False),
    sa.Column('last_seen_ms', sa.BigInteger(), nullable=False),
    sa.Column('occurrences', sa.Integer(), server_default='1', nullable=False),
    sa.Column('diff', sa.Text(), nullable=False),
    sa.Column('resolved_at_ms', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_mismatches')),
    sa.UniqueConstraint('dedupe_key', name=op.f('uq_mismatches_dedupe_key'))
    )
    with op.batch_alter_table('mismatches', schema=None) as batch_op:
        batch_op.create_index('ix_mismatches_kind_resolved', ['kind', 'resolved_at_ms'], unique=False)
        batch_op.create_index('ix_mismatches_origin_first_seen', ['origin', 'first_seen_ms'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('mismatches', schema=None) as batch_op:
        batch_op.drop_index('ix_mismatches_origin_first_seen')
        batch_op.drop_index('ix_mismatches_kind_resolved')

    op.drop_table('mismatches')
