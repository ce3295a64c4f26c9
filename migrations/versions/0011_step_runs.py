"""step_runs and step_run_mutations (docs/stepruns.md); the store refuses cross-Run StepRun references and ledger
changes.

PostgreSQL: composite foreign keys (run_id, step_run_id) -> step_runs (run_id, id) on run_attempts and run_events,
added NOT VALID and then validated (writes go on meanwhile); a trigger keeps the ledger append-only (privileges
come from `ql-bridge db roles`). SQLite: triggers on insert and on update of run_attempts and run_events, which
hold even for a connection with PRAGMA foreign_keys off, and triggers keeping the ledger append-only.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

# Frozen copies of what bridge/storage/schema.py derives from the v1 record (a revision never follows later code).
_MIRROR = ("'attempt_count', attempt_count, 'created_at_ms', created_at_ms, 'digest', digest, "
           "'error_code', error_code, 'finished_at_ms', finished_at_ms, 'id', id, 'input_ref', input_ref, "
           "'kind', kind, 'output_ref', output_ref, 'run_id', run_id, 'schema', schema_id, "
           "'started_at_ms', started_at_ms, 'status', status, 'step_key', step_key, "
           "'updated_at_ms', updated_at_ms, 'version', version")
_RECORD_MIRRORS = {
    'sqlite': f"record = json_object({_MIRROR})",
    'postgresql': f"record::jsonb = jsonb_build_object({_MIRROR})",
}
_RESULT_MIRRORS = {
    'sqlite': ("json_valid(result_record) AND json_extract(result_record, '$.id') = step_run_id "
               "AND json_extract(result_record, '$.run_id') = run_id "
               "AND json_extract(result_record, '$.version') = step_run_version"),
    'postgresql': ("(result_record::jsonb ->> 'id') = step_run_id AND (result_record::jsonb ->> 'run_id') = run_id "
                   "AND (result_record::jsonb ->> 'version')::bigint = step_run_version"),
}
_STATUSES = "'pending', 'ready', 'waiting_approval', 'running', 'lost', 'succeeded', 'failed', 'cancelled', " \
            "'timed_out', 'skipped'"
_KINDS = "'task', 'tool', 'model', 'agent', 'condition', 'approval', 'subworkflow'"
_REFERRING = ('run_attempts', 'run_events')


def _sqlite_triggers() -> list[str]:
    same_run = ("NEW.step_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM step_runs "
                "WHERE step_runs.id = NEW.step_run_id AND step_runs.run_id = NEW.run_id)")
    statements = []
    for table in _REFERRING:
        for when, name in (('INSERT', 'insert'), ('UPDATE OF run_id, step_run_id', 'update')):
            statements.append(
                f"CREATE TRIGGER tr_{table}_step_run_same_run_{name} BEFORE {when} ON {table} "
                f"FOR EACH ROW WHEN {same_run} BEGIN "
                f"SELECT RAISE(ABORT, '{table}.step_run_id must name a StepRun of the same Run'); END")
    for name, when in (('update', 'UPDATE'), ('delete', 'DELETE')):
        statements.append(f"CREATE TRIGGER tr_step_run_mutations_no_{name} BEFORE {when} ON step_run_mutations "
                          "BEGIN SELECT RAISE(ABORT, 'step_run_mutations is append-only'); END")
    statements.append("CREATE TRIGGER tr_step_runs_no_delete BEFORE DELETE ON step_runs "
                      "BEGIN SELECT RAISE(ABORT, 'step_runs are part of their Run and are never deleted'); END")
    statements.append("CREATE TRIGGER tr_step_runs_identity_fixed BEFORE UPDATE OF id, run_id ON step_runs "
                      "FOR EACH ROW WHEN NEW.id IS NOT OLD.id OR NEW.run_id IS NOT OLD.run_id "
                      "BEGIN SELECT RAISE(ABORT, 'a StepRun keeps its id and its Run'); END")
    return statements


_PG_FUNCTIONS = {
    'step_run_mutations_append_only': "RAISE EXCEPTION 'step_run_mutations is append-only' "
                                      "USING ERRCODE = 'integrity_constraint_violation';",
    'step_runs_kept': "IF TG_OP = 'DELETE' THEN RAISE EXCEPTION 'step_runs are part of their Run and are never "
                      "deleted' USING ERRCODE = 'integrity_constraint_violation'; END IF; "
                      "IF NEW.id IS DISTINCT FROM OLD.id OR NEW.run_id IS DISTINCT FROM OLD.run_id THEN "
                      "RAISE EXCEPTION 'a StepRun keeps its id and its Run' "
                      "USING ERRCODE = 'integrity_constraint_violation'; END IF; RETURN NEW;",
}
_PG_TRIGGERS = (
    ('tr_step_run_mutations_append_only', 'step_run_mutations', 'BEFORE UPDATE OR DELETE', 'ROW',
     'step_run_mutations_append_only'),
    ('tr_step_run_mutations_no_truncate', 'step_run_mutations', 'BEFORE TRUNCATE', 'STATEMENT',
     'step_run_mutations_append_only'),
    ('tr_step_runs_kept', 'step_runs', 'BEFORE UPDATE OF id, run_id OR DELETE', 'ROW', 'step_runs_kept'),
)


def _postgresql_guards() -> list[str]:
    statements = []
    for table in _REFERRING:
        name = f'fk_{table}_step_run_same_run'
        statements.append(f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY (run_id, step_run_id) "
                          "REFERENCES step_runs (run_id, id) NOT VALID")
        statements.append(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")
    for function, body in _PG_FUNCTIONS.items():
        statements.append(f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$")
    for name, table, when, level, function in _PG_TRIGGERS:
        statements.append(f"CREATE TRIGGER {name} {when} ON {table} FOR EACH {level} EXECUTE FUNCTION {function}()")
    return statements


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        'step_runs',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('run_id', sa.String(length=36), nullable=False),
        sa.Column('step_key', sa.String(length=128), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('status', sa.String(length=24), nullable=False),
        sa.Column('version', sa.BigInteger(), nullable=False),
        sa.Column('attempt_count', sa.Integer(), nullable=False),
        sa.Column('input_ref', sa.String(length=64), nullable=True),
        sa.Column('output_ref', sa.String(length=64), nullable=True),
        sa.Column('error_code', sa.String(length=64), nullable=True),
        sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('updated_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('started_at_ms', sa.BigInteger(), nullable=True),
        sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('schema_id', sa.String(length=32), nullable=False),
        sa.Column('record', sa.Text(), nullable=False),
        sa.CheckConstraint('version >= 0', name=op.f('ck_step_runs_version_nonnegative')),
        sa.CheckConstraint('attempt_count BETWEEN 0 AND 64', name=op.f('ck_step_runs_attempt_count_limited')),
        sa.CheckConstraint("schema_id = 'qinglong/step-run@v1'", name=op.f('ck_step_runs_schema_known')),
        sa.CheckConstraint(f'status IN ({_STATUSES})', name=op.f('ck_step_runs_status_known')),
        sa.CheckConstraint(f'kind IN ({_KINDS})', name=op.f('ck_step_runs_kind_known')),
        sa.CheckConstraint(_RECORD_MIRRORS[dialect], name=op.f('ck_step_runs_record_mirrors')),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_step_runs_run_id_runs')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_step_runs')),
        sa.UniqueConstraint('run_id', 'id', name=op.f('uq_step_runs_run_id_id')),
    )
    op.create_index('ix_step_runs_run_created', 'step_runs', ['run_id', 'created_at_ms', 'id'], unique=False)
    op.create_table(
        'step_run_mutations',
        sa.Column('mutation_id', sa.String(length=128), nullable=False),
        sa.Column('op', sa.String(length=16), nullable=False),
        sa.Column('run_id', sa.String(length=36), nullable=False),
        sa.Column('step_run_id', sa.String(length=36), nullable=False),
        sa.Column('request_digest', sa.String(length=64), nullable=False),
        sa.Column('result_record', sa.Text(), nullable=False),
        sa.Column('step_run_version', sa.BigInteger(), nullable=False),
        sa.Column('run_version', sa.BigInteger(), nullable=False),
        sa.Column('event_sequence', sa.BigInteger(), nullable=False),
        sa.Column('event_id', sa.String(length=36), nullable=False),
        sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
        sa.CheckConstraint("op IN ('create', 'transition')", name=op.f('ck_step_run_mutations_op_known')),
        sa.CheckConstraint(_RESULT_MIRRORS[dialect], name=op.f('ck_step_run_mutations_result_mirrors')),
        sa.ForeignKeyConstraint(['run_id', 'event_sequence'], ['run_events.run_id', 'run_events.sequence'],
                                name=op.f('fk_step_run_mutations_run_id_run_events')),
        sa.ForeignKeyConstraint(['run_id', 'step_run_id'], ['step_runs.run_id', 'step_runs.id'],
                                name=op.f('fk_step_run_mutations_run_id_step_runs')),
        sa.PrimaryKeyConstraint('mutation_id', name=op.f('pk_step_run_mutations')),
        sa.UniqueConstraint('run_id', 'event_sequence', name=op.f('uq_step_run_mutations_run_id_event_sequence')),
    )
    for statement in _sqlite_triggers() if dialect == 'sqlite' else _postgresql_guards():
        op.execute(statement)


def downgrade() -> None:
    # The StepRuns and their ledger go; step_run_id of attempts and events stays a nullable placeholder, as in 0010.
    if op.get_bind().dialect.name == 'sqlite':
        for statement in _sqlite_triggers():
            op.execute(f"DROP TRIGGER IF EXISTS {statement.split()[2]}")
    else:
        for name, table, *_ in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        for function in _PG_FUNCTIONS:
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
        for table in _REFERRING:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS fk_{table}_step_run_same_run")
    op.drop_table('step_run_mutations')
    op.drop_index('ix_step_runs_run_created', table_name='step_runs')
    op.drop_table('step_runs')
