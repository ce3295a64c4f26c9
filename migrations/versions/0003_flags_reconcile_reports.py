"""Origin flags with their audit, settings, job leases, reconcile passes and cutover reports.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('bridge_settings',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('updated_at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_bridge_settings'))
    )
    op.create_table('cutover_reports',
    sa.Column('id', sa.BigInteger().with_variant(sa.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('window_start_ms', sa.BigInteger(), nullable=False),
    sa.Column('window_end_ms', sa.BigInteger(), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cutover_reports'))
    )
    with op.batch_alter_table('cutover_reports', schema=None) as batch_op:
        batch_op.create_index('ix_cutover_reports_created', ['created_at_ms'], unique=False)

    op.create_table('flag_audit',
    sa.Column('id', sa.BigInteger().with_variant(sa.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('origin', sa.String(length=32), nullable=False),
    sa.Column('old_mode', sa.String(length=16), nullable=True),
    sa.Column('new_mode', sa.String(length=16), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('reason', sa.String(length=500), nullable=False),
    sa.Column('at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_flag_audit'))
    )
    with op.batch_alter_table('flag_audit', schema=None) as batch_op:
        batch_op.create_index('ix_flag_audit_origin_at', ['origin', 'at_ms'], unique=False)

    op.create_table('job_leases',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('holder', sa.String(length=128), nullable=False),
    sa.Column('expires_at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_job_leases'))
    )
    op.create_table('origin_flags',
    sa.Column('origin', sa.String(length=32), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('updated_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('updated_by', sa.String(length=128), nullable=False),
    sa.CheckConstraint("mode IN ('off', 'shadow', 'primary')", name=op.f('ck_origin_flags_mode_known')),
    sa.PrimaryKeyConstraint('origin', name=op.f('pk_origin_flags'))
    )
    op.create_table('reconcile_passes',
    sa.Column('id', sa.BigInteger().with_variant(sa.INTEGER(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('started_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('result', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.String(length=500), nullable=True),
    sa.Column('stats', sa.Text(), server_default='{}', nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reconcile_passes'))
    )
    with op.batch_alter_table('reconcile_passes', schema=None) as batch_op:
        batch_op.create_index('ix_reconcile_passes_started', ['started_at_ms'], unique=False)

    op.create_table('reconcile_seen',
    sa.Column('pass_id', sa.BigInteger(), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.PrimaryKeyConstraint('pass_id', 'run_id', name=op.f('pk_reconcile_seen'))
    )


def downgrade() -> None:
    op.drop_table('reconcile_seen')
    with op.batch_alter_table('reconcile_passes', schema=None) as batch_op:
        batch_op.drop_index('ix_reconcile_passes_started')

    op.drop_table('reconcile_passes')
    op.drop_table('origin_flags')
    op.drop_table('job_leases')
    with op.batch_alter_table('flag_audit', schema=None) as batch_op:
        batch_op.drop_index('ix_flag_audit_origin_at')

    op.drop_table('flag_audit')
    with op.batch_alter_table('cutover_reports', schema=None) as batch_op:
        batch_op.drop_index('ix_cutover_reports_created')

    op.drop_table('cutover_reports')
    op.drop_table('bridge_settings')
