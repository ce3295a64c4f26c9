"""Primary mode: the projection outbox and the Attempt → 2.x instance mapping.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('legacy_instance_map',
    sa.Column('attempt_id', sa.String(length=36), nullable=False),
    sa.Column('legacy_instance_id', sa.BigInteger(), nullable=False),
    sa.Column('legacy_cron_id', sa.BigInteger(), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('attempt_id', name=op.f('pk_legacy_instance_map')),
    sa.UniqueConstraint('legacy_instance_id', name=op.f('uq_legacy_instance_map_legacy_instance_id'))
    )
    op.create_table('projection_outbox',
    sa.Column('id', sa.BigInteger().with_variant(sa.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('legacy_cron_id', sa.BigInteger(), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('attempt_id', sa.String(length=36), nullable=True),
    sa.Column('event', sa.String(length=16), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('state', sa.String(length=16), server_default='pending', nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('next_attempt_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('last_error', sa.String(length=200), nullable=True),
    sa.Column('applied_at_ms', sa.BigInteger(), nullable=True),
    sa.CheckConstraint("event IN ('start', 'end', 'cancel')", name=op.f('ck_projection_outbox_event_known')),
    sa.CheckConstraint("state IN ('pending', 'applied', 'parked')", name=op.f('ck_projection_outbox_state_known')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_projection_outbox'))
    )
    with op.batch_alter_table('projection_outbox', schema=None) as batch_op:
        batch_op.create_index('ix_projection_outbox_cron_state', ['legacy_cron_id', 'state', 'id'], unique=False)
        batch_op.create_index('ix_projection_outbox_state_due', ['state', 'next_attempt_at_ms', 'id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('projection_outbox', schema=None) as batch_op:
        batch_op.drop_index('ix_projection_outbox_state_due')
        batch_op.drop_index('ix_projection_outbox_cron_state')

    op.drop_table('projection_outbox')
    op.drop_table('legacy_instance_map')
