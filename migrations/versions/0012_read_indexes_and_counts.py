"""Indexes that end in the v3 list's sort key for each filter; on SQLite, Run counts kept by triggers.

The v3 list orders by (created_at_ms, id) newest first. An index per filter that ends in exactly that key lets
either planner read a page off one index range and stop, whatever its statistics say about the value; before,
a planner that expected a value to be common walked ix_runs_created_id filtering row by row (the whole table
when the value was rare). ix_runs_origin_created and ix_runs_legacy_cron_status keep their names and gain the
id; ix_runs_status_created_id and ix_runs_cron_created_id are new.

run_counts (SQLite only) holds the Runs and their events per (status, origin), kept in the writing transaction
by triggers, so `ql-bridge status` never counts rows. SQLite has one writer at a time, so the counter rows
make no writer wait. Events are counted as the sum of runs.event_sequence (a Run's events are numbered 1..n
without gaps). A later revision that rebuilds `runs` in batch mode ("move and copy") drops these triggers
and must create them again (tests/contract/test_run_counts.py fails otherwise).

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
_ADD = ("INSERT INTO run_counts (status, origin, runs, events) "
        "VALUES (NEW.status, coalesce(NEW.origin, ''), 1, NEW.event_sequence) "
        "ON CONFLICT (status, origin) DO UPDATE SET runs = runs + 1, events = events + excluded.events")
_REMOVE = ("UPDATE run_counts SET runs = runs - 1, events = events - OLD.event_sequence "
           "WHERE status = OLD.status AND origin = coalesce(OLD.origin, '')")
_SAME_GROUP = "NEW.status IS OLD.status AND NEW.origin IS OLD.origin"
SQLITE_TRIGGERS = {
    'tr_runs_counted_insert': f"AFTER INSERT ON runs FOR EACH ROW BEGIN {_ADD}; END",
    'tr_runs_counted_move': (f"AFTER UPDATE OF status, origin ON runs FOR EACH ROW WHEN NOT ({_SAME_GROUP}) "
                             f"BEGIN {_REMOVE}; {_ADD}; END"),
    'tr_runs_counted_events': ("AFTER UPDATE OF event_sequence ON runs FOR EACH ROW "
                               f"WHEN {_SAME_GROUP} AND NEW.event_sequence IS NOT OLD.event_sequence BEGIN "
                               "UPDATE run_counts SET events = events + NEW.event_sequence - OLD.event_sequence "
                               "WHERE status = NEW.status AND origin = coalesce(NEW.origin, ''); END"),
    'tr_runs_counted_delete': f"AFTER DELETE ON runs FOR EACH ROW BEGIN {_REMOVE}; END",
}


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_origin_created')
        batch_op.drop_index('ix_runs_legacy_cron_status')
        batch_op.create_index('ix_runs_origin_created', ['origin', 'created_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_runs_legacy_cron_status', ['legacy_cron_id', 'status', 'created_at_ms', 'id'],
                              unique=False)
        batch_op.create_index('ix_runs_status_created_id', ['status', 'created_at_ms', 'id'], unique=False)
        batch_op.create_index('ix_runs_cron_created_id', ['legacy_cron_id', 'created_at_ms', 'id'], unique=False)
        # The callback path's read of a cron's open Runs sorts like the v3 list: its partial index gains the id
        # too, or the planner would prefer the cron's whole history in the right order to it.
        batch_op.drop_index('ix_runs_active_by_cron')
        batch_op.create_index('ix_runs_active_by_cron', ['legacy_cron_id', 'created_at_ms', 'id'], unique=False,
                              sqlite_where=sa.text(ACTIVE_STATUS_SQL), postgresql_where=sa.text(ACTIVE_STATUS_SQL))
    if op.get_bind().dialect.name != 'sqlite':
        return
    op.create_table(
        'run_counts',
        sa.Column('status', sa.String(length=24), nullable=False),
        sa.Column('origin', sa.String(length=32), nullable=False),
        sa.Column('runs', sa.BigInteger(), nullable=False),
        sa.Column('events', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('status', 'origin', name=op.f('pk_run_counts')),
    )
    op.execute("INSERT INTO run_counts (status, origin, runs, events) "
               "SELECT status, coalesce(origin, ''), count(*), coalesce(sum(event_sequence), 0) FROM runs "
               "GROUP BY status, coalesce(origin, '')")
    for name, body in SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.drop_table('run_counts')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_active_by_cron')
        batch_op.create_index('ix_runs_active_by_cron', ['legacy_cron_id', 'created_at_ms'], unique=False,
                              sqlite_where=sa.text(ACTIVE_STATUS_SQL), postgresql_where=sa.text(ACTIVE_STATUS_SQL))
        batch_op.drop_index('ix_runs_cron_created_id')
        batch_op.drop_index('ix_runs_status_created_id')
        batch_op.drop_index('ix_runs_legacy_cron_status')
        batch_op.drop_index('ix_runs_origin_created')
        batch_op.create_index('ix_runs_legacy_cron_status', ['legacy_cron_id', 'status', 'created_at_ms'],
                              unique=False)
        batch_op.create_index('ix_runs_origin_created', ['origin', 'created_at_ms'], unique=False)
