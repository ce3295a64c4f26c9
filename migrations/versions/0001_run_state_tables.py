"""Run state tables: runs, run_attempts, run_events (docs/run-state.md#records) and task_snapshots.

Revision ID: 0001
Revises: 
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('task_id', sa.String(length=128), nullable=False),
    sa.Column('task_revision', sa.String(length=64), nullable=False),
    sa.Column('legacy_cron_id', sa.BigInteger(), nullable=True),
    sa.Column('parent_run_id', sa.String(length=36), nullable=True),
    sa.Column('retry_of_run_id', sa.String(length=36), nullable=True),
    sa.Column('trigger_id', sa.String(length=128), nullable=True),
    sa.Column('trigger_type', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=24), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('event_sequence', sa.BigInteger(), nullable=False),
    sa.Column('priority', sa.Integer(), server_default='0', nullable=False),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('request_fingerprint', sa.String(length=64), nullable=True),
    sa.Column('input_ref', sa.String(length=200), nullable=True),
    sa.Column('output_ref', sa.String(length=200), nullable=True),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('queued_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('started_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('cancel_requested_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('cancel_reason', sa.String(length=200), nullable=True),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_summary', sa.String(length=500), nullable=True),
    sa.Column('origin', sa.String(length=32), nullable=True),
    sa.Column('origin_evidence', sa.String(length=500), nullable=True),
    sa.Column('mode', sa.String(length=16), nullable=True),
    sa.Column('owner', sa.String(length=16), nullable=True),
    sa.Column('legacy_pid', sa.BigInteger(), nullable=True),
    sa.Column('log_ref', sa.String(length=36), nullable=True),
    sa.Column('synthesized', sa.Boolean(), server_default='0', nullable=False),
    sa.Column('received_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('duration_ms', sa.BigInteger(), nullable=True),
    sa.CheckConstraint("status IN ('created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')", name=op.f('ck_runs_status_known')),
    sa.CheckConstraint('event_sequence >= 0', name=op.f('ck_runs_event_sequence_nonnegative')),
    sa.CheckConstraint('version >= 0', name=op.f('ck_runs_version_nonnegative')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_legacy_cron_status', ['legacy_cron_id', 'status', 'created_at_ms'], unique=False)
        batch_op.create_index('ix_runs_project_created', ['project_id', 'created_at_ms'], unique=False)
        batch_op.create_index('ix_runs_status_cancel_requested', ['status', 'cancel_requested_at_ms'], unique=False)
        batch_op.create_index('ix_runs_status_queued', ['status', 'queued_at_ms'], unique=False)
        batch_op.create_index('ix_runs_task_created', ['task_id', 'created_at_ms'], unique=False)
        batch_op.create_index('ux_runs_project_id_idempotency_key', ['project_id', 'idempotency_key'], unique=True, sqlite_where=sa.text('idempotency_key IS NOT NULL'), postgresql_where=sa.text('idempotency_key IS NOT NULL'))

    op.create_table('task_snapshots',
    sa.Column('task_revision', sa.String(length=64), nullable=False),
    sa.Column('task_id', sa.String(length=128), nullable=False),
    sa.Column('legacy_cron_id', sa.BigInteger(), nullable=True),
    sa.Column('name', sa.Text(), nullable=True),
    sa.Column('command', sa.Text(), nullable=True),
    sa.Column('schedule', sa.String(length=255), nullable=True),
    sa.Column('work_dir', sa.Text(), nullable=True),
    sa.Column('log_name', sa.Text(), nullable=True),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('task_revision', name=op.f('pk_task_snapshots'))
    )
    with op.batch_alter_table('task_snapshots', schema=None) as batch_op:
        batch_op.create_index('ix_task_snapshots_task', ['task_id', 'created_at_ms'], unique=False)

    op.create_table('run_attempts',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('step_run_id', sa.String(length=36), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=24), nullable=False),
    sa.Column('executor_type', sa.String(length=32), nullable=False),
    sa.Column('worker_id', sa.String(length=128), nullable=True),
    sa.Column('executor_handle', sa.String(length=200), nullable=True),
    sa.Column('pid', sa.BigInteger(), nullable=True),
    sa.Column('log_artifact_id', sa.String(length=64), nullable=True),
    sa.Column('lease_token', sa.String(length=64), nullable=True),
    sa.Column('lease_expires_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('deadline_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('callback_token_hash', sa.String(length=128), nullable=True),
    sa.Column('callback_sequence', sa.BigInteger(), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('started_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_summary', sa.String(length=500), nullable=True),
    sa.Column('synthesized', sa.Boolean(), server_default='0', nullable=False),
    sa.CheckConstraint("status IN ('claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')", name=op.f('ck_run_attempts_status_known')),
    sa.CheckConstraint('attempt >= 1', name=op.f('ck_run_attempts_attempt_positive')),
    sa.CheckConstraint('callback_sequence >= 0', name=op.f('ck_run_attempts_callback_sequence_nonnegative')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_attempts_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_attempts')),
    sa.UniqueConstraint('run_id', 'attempt', name=op.f('uq_run_attempts_run_id_attempt'))
    )
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.create_index('ix_run_attempts_status_created', ['status', 'created_at_ms'], unique=False)
        batch_op.create_index('ix_run_attempts_status_deadline', ['status', 'deadline_at_ms', 'id'], unique=False)

    op.create_table('run_events',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('sequence', sa.BigInteger(), nullable=False),
    sa.Column('type', sa.String(length=64), nullable=False),
    sa.Column('dedupe_key', sa.String(length=200), nullable=True),
    sa.Column('actor_type', sa.String(length=32), nullable=False),
    sa.Column('actor_id', sa.String(length=128), nullable=True),
    sa.Column('attempt_id', sa.String(length=36), nullable=True),
    sa.Column('step_run_id', sa.String(length=36), nullable=True),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.CheckConstraint('sequence >= 1', name=op.f('ck_run_events_sequence_positive')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_events_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_events')),
    sa.UniqueConstraint('run_id', 'sequence', name=op.f('uq_run_events_run_id_sequence'))
    )
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.create_index('ix_run_events_type_created', ['type', 'created_at_ms'], unique=False)
        batch_op.create_index('ux_run_events_run_id_dedupe_key', ['run_id', 'dedupe_key'], unique=True, sqlite_where=sa.text('dedupe_key IS NOT NULL'), postgresql_where=sa.text('dedupe_key IS NOT NULL'))



def downgrade() -> None:
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.drop_index('ux_run_events_run_id_dedupe_key', sqlite_where=sa.text('dedupe_key IS NOT NULL'), postgresql_where=sa.text('dedupe_key IS NOT NULL'))
        batch_op.drop_index('ix_run_events_type_created')

    op.drop_table('run_events')
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_run_attempts_status_deadline')
        batch_op.drop_index('ix_run_attempts_status_created')

    op.drop_table('run_attempts')
    with op.batch_alter_table('task_snapshots', schema=None) as batch_op:
        batch_op.drop_index('ix_task_snapshots_task')

    op.drop_table('task_snapshots')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ux_runs_project_id_idempotency_key', sqlite_where=sa.text('idempotency_key IS NOT NULL'), postgresql_where=sa.text('idempotency_key IS NOT NULL'))
        batch_op.drop_index('ix_runs_task_created')
        batch_op.drop_index('ix_runs_status_queued')
        batch_op.drop_index('ix_runs_status_cancel_requested')
        batch_op.drop_index('ix_runs_project_created')
        batch_op.drop_index('ix_runs_legacy_cron_status')

    op.drop_table('runs')
