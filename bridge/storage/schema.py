"""The bridge store's tables (SQLAlchemy Core, one MetaData) — the target of every Alembic revision.

Column names are the fields of docs/run-state.md#records, and match the field names of the domain dataclasses so rows
map one to one. Statuses are lowercase strings, checked by a CHECK constraint rather than a database enum.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from bridge.domain.model import RUN_ACTIVE, AttemptStatus, RunStatus
from bridge.domain.step_run import RECORD_KEYS as STEP_RUN_RECORD_KEYS
from bridge.domain.step_run import SCHEMA_ID as STEP_RUN_SCHEMA_ID
from bridge.domain.step_run import STEP_ATTEMPT_LIMIT, StepRunKind, StepRunStatus
from legacy_adapters.callbacks import exit_code_as_given

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING_CONVENTION)

# A portable auto-increment key: INTEGER PRIMARY KEY is the rowid alias on SQLite.
AutoId = BigInteger().with_variant(sqlite.INTEGER(), "sqlite")
Ms = BigInteger  # UTC milliseconds or a duration in milliseconds; never seconds


class ExitCode(TypeDecorator[Any]):
    """An exit code as 2.x keeps it: any safe JS number Joi lets through, fractions included (0.5 is a failure
    2.x stores as 0.5). PostgreSQL: DOUBLE PRECISION, exact for every integer up to 2**53 (revision 0014);
    SQLite: INTEGER, whose affinity keeps a fraction as REAL. Read back, a whole number is an int again."""

    impl = BigInteger
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DOUBLE_PRECISION())
        return dialect.type_descriptor(Integer())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return exit_code_as_given(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return exit_code_as_given(value)



# The open statuses in one fixed order, written out as literals: a partial index is used only when the
# query's predicate reads exactly like the index's, on SQLite and on PostgreSQL alike (with binds, or in
# another order, neither planner can prove the query stays inside the index).
def _status_in(values: list[str]) -> str:
    return "status IN ({})".format(", ".join(f"'{v}'" for v in values))


ACTIVE_STATUS_SQL = _status_in(sorted(s.value for s in RUN_ACTIVE))
# Runs the bridge owns (primary mode), as a literal for the same reason.
BRIDGE_OWNED_SQL = "owner = 'bridge'"


def index_named(table: Table, name: str) -> Index:
    """The table's index of that name (a statement that must read it names it from here, not by a string)."""
    return next(index for index in table.indexes if index.name == name)


def _status_check(name: str, values: list[str]) -> CheckConstraint:
    return CheckConstraint(_status_in(values), name=name)


runs_table = Table(
    "runs", metadata,
    Column("id", String(36), primary_key=True),
    Column("project_id", String(64), nullable=False),
    Column("task_id", String(128), nullable=False),
    Column("task_revision", String(64), nullable=False),
    Column("legacy_cron_id", BigInteger),
    Column("parent_run_id", String(36)),
    Column("retry_of_run_id", String(36)),
    Column("trigger_id", String(128)),
    Column("trigger_type", String(32), nullable=False),
    Column("status", String(24), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("event_sequence", BigInteger, nullable=False),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("idempotency_key", String(200)),
    Column("request_fingerprint", String(64)),
    Column("input_ref", String(200)),
    Column("output_ref", String(200)),
    Column("created_at_ms", Ms, nullable=False),
    Column("queued_at_ms", Ms),
    Column("started_at_ms", Ms),
    Column("finished_at_ms", Ms),
    Column("cancel_requested_at_ms", Ms),
    Column("cancel_reason", String(200)),
    Column("error_code", String(64)),
    Column("error_summary", String(500)),
    # Bridge columns (docs/shadow-recording.md): how the execution reached us and who owns it.
    Column("origin", String(32)),
    Column("origin_evidence", String(500)),
    Column("mode", String(16)),
    Column("owner", String(16)),
    Column("legacy_pid", BigInteger),
    Column("log_ref", String(36)),  # digest of 2.x's log_path, never the path itself
    Column("synthesized", Boolean, nullable=False, server_default="0"),
    Column("received_at_ms", Ms),
    Column("duration_ms", Ms),
    CheckConstraint("version >= 0", name="version_nonnegative"),
    CheckConstraint("event_sequence >= 0", name="event_sequence_nonnegative"),
    _status_check("status_known", [s.value for s in RunStatus]),
    Index("ix_runs_project_created", "project_id", "created_at_ms"),
    Index("ix_runs_task_created", "task_id", "created_at_ms"),
    Index("ix_runs_status_queued", "status", "queued_at_ms"),
    Index("ix_runs_status_cancel_requested", "status", "cancel_requested_at_ms"),
    # Keyset pages of the v3 API and the reconciler, and its duplicate check. Each v3 filter (none, status,
    # origin, cron, cron and status) has an index ending in the list's sort key (created_at_ms, id), so a page
    # is one range of one index whatever the planner's statistics say (revision 0012).
    Index("ix_runs_created_id", "created_at_ms", "id"),
    Index("ix_runs_status_created_id", "status", "created_at_ms", "id"),
    Index("ix_runs_origin_created", "origin", "created_at_ms", "id"),
    Index("ix_runs_cron_created_id", "legacy_cron_id", "created_at_ms", "id"),
    Index("ix_runs_legacy_cron_status", "legacy_cron_id", "status", "created_at_ms", "id"),
    Index("ix_runs_cron_pid_log", "legacy_cron_id", "legacy_pid", "log_ref"),
    # A cron's open Runs for callback correlation: holds only open Runs, so a lookup never walks history.
    Index("ix_runs_active_by_cron", "legacy_cron_id", "created_at_ms", "id",
          sqlite_where=text(ACTIVE_STATUS_SQL), postgresql_where=text(ACTIVE_STATUS_SQL)),
    # A cron's bridge-owned Runs by status for the projector: after a promotion it reads only those, however
    # long the cron's shadow history, and shadow writes (owner legacy) never touch this index.
    Index("ix_runs_bridge_owned_by_cron", "legacy_cron_id", "status", "created_at_ms",
          sqlite_where=text(BRIDGE_OWNED_SQL), postgresql_where=text(BRIDGE_OWNED_SQL)),
    Index("ux_runs_project_id_idempotency_key", "project_id", "idempotency_key", unique=True,
          sqlite_where=Column("idempotency_key").isnot(None),
          postgresql_where=Column("idempotency_key").isnot(None)),
)

run_attempts_table = Table(
    "run_attempts", metadata,
    Column("id", String(36), primary_key=True),
    Column("run_id", String(36), ForeignKey("runs.id"), nullable=False),
    Column("step_run_id", String(36)),
    Column("attempt", Integer, nullable=False),
    Column("status", String(24), nullable=False),
    Column("executor_type", String(32), nullable=False),
    Column("worker_id", String(128)),
    Column("executor_handle", String(200)),
    Column("pid", BigInteger),
    Column("log_artifact_id", String(64)),
    Column("lease_token", String(64)),
    Column("lease_expires_at_ms", Ms),
    Column("deadline_at_ms", Ms),
    Column("callback_token_hash", String(128)),
    Column("callback_sequence", BigInteger, nullable=False),
    Column("created_at_ms", Ms, nullable=False),
    Column("started_at_ms", Ms),
    Column("finished_at_ms", Ms),
    Column("exit_code", ExitCode()),
    Column("error_code", String(64)),
    Column("error_summary", String(500)),
    Column("synthesized", Boolean, nullable=False, server_default="0"),
    # Primary mode only: 2.x's log_path, which the projection writes back. Shadow attempts keep the digest.
    Column("legacy_log_path", Text),
    UniqueConstraint("run_id", "attempt"),
    CheckConstraint("attempt >= 1", name="attempt_positive"),
    CheckConstraint("callback_sequence >= 0", name="callback_sequence_nonnegative"),
    _status_check("status_known", [s.value for s in AttemptStatus]),
    Index("ix_run_attempts_status_created", "status", "created_at_ms"),
    Index("ix_run_attempts_status_deadline", "status", "deadline_at_ms", "id"),
)

run_events_table = Table(
    "run_events", metadata,
    Column("id", String(36), primary_key=True),
    Column("run_id", String(36), ForeignKey("runs.id"), nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("type", String(64), nullable=False),
    Column("dedupe_key", String(200)),
    Column("actor_type", String(32), nullable=False),
    Column("actor_id", String(128)),
    Column("attempt_id", String(36)),
    Column("step_run_id", String(36)),
    Column("payload", Text, nullable=False),
    Column("created_at_ms", Ms, nullable=False),
    UniqueConstraint("run_id", "sequence"),
    CheckConstraint("sequence >= 1", name="sequence_positive"),
    Index("ux_run_events_run_id_dedupe_key", "run_id", "dedupe_key", unique=True,
          sqlite_where=Column("dedupe_key").isnot(None),
          postgresql_where=Column("dedupe_key").isnot(None)),
    Index("ix_run_events_type_created", "type", "created_at_ms"),
)

# StepRuns (docs/stepruns.md): every field of the qinglong/step-run@v1 record is a column, and the record's canonical
# JSON is kept whole beside them. One CHECK per dialect binds the JSON to the columns both ways: on SQLite the JSON
# must be byte for byte what json_object makes of the columns (its output is canonical JSON: sorted keys given
# in order, no whitespace, UTF-8 kept), on PostgreSQL it must be the same JSON value as jsonb_build_object's.
STEP_RUN_MIRROR = tuple(("schema_id" if key == "schema" else key, key) for key in sorted(STEP_RUN_RECORD_KEYS))


def _json_object(function: str) -> str:
    return "{}({})".format(function, ", ".join(f"'{key}', {column}" for column, key in STEP_RUN_MIRROR))


STEP_RUN_RECORD_CHECK = {
    "sqlite": f"record = {_json_object('json_object')}",
    "postgresql": f"record::jsonb = {_json_object('jsonb_build_object')}",
}
STEP_RUN_LEDGER_CHECK = {
    "sqlite": ("json_valid(result_record) AND json_extract(result_record, '$.id') = step_run_id "
               "AND json_extract(result_record, '$.run_id') = run_id "
               "AND json_extract(result_record, '$.version') = step_run_version"),
    "postgresql": ("(result_record::jsonb ->> 'id') = step_run_id AND (result_record::jsonb ->> 'run_id') = run_id "
                   "AND (result_record::jsonb ->> 'version')::bigint = step_run_version"),
}


def _per_dialect(name: str, texts: dict[str, str]) -> list[CheckConstraint]:
    return [CheckConstraint(text_, name=name).ddl_if(dialect=dialect) for dialect, text_ in texts.items()]


step_runs_table = Table(
    "step_runs", metadata,
    Column("id", String(36), primary_key=True),  # UUIDv7, the identity; step_key is only a display name
    Column("run_id", String(36), ForeignKey("runs.id"), nullable=False),
    Column("step_key", String(128), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(24), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("input_ref", String(64)),
    Column("output_ref", String(64)),
    Column("error_code", String(64)),
    Column("created_at_ms", Ms, nullable=False),
    Column("updated_at_ms", Ms, nullable=False),
    Column("started_at_ms", Ms),
    Column("finished_at_ms", Ms),
    Column("digest", String(64), nullable=False),
    Column("schema_id", String(32), nullable=False),
    Column("record", Text, nullable=False),
    UniqueConstraint("run_id", "id"),  # what the same-Run references of attempts, events and the ledger point at
    CheckConstraint("version >= 0", name="version_nonnegative"),
    CheckConstraint(f"attempt_count BETWEEN 0 AND {STEP_ATTEMPT_LIMIT}", name="attempt_count_limited"),
    CheckConstraint(f"schema_id = '{STEP_RUN_SCHEMA_ID}'", name="schema_known"),
    _status_check("status_known", [s.value for s in StepRunStatus]),
    CheckConstraint("kind IN ({})".format(", ".join(f"'{k.value}'" for k in StepRunKind)), name="kind_known"),
    *_per_dialect("record_mirrors", STEP_RUN_RECORD_CHECK),
    Index("ix_step_runs_run_created", "run_id", "created_at_ms", "id"),  # keyset pages of a Run's StepRuns
)

# The mutation ledger: append-only (a trigger on each store, and privileges on PostgreSQL). Each row is the
# request's digest, the StepRun as that mutation committed it, and the Run's version and Event sequence after.
step_run_mutations_table = Table(
    "step_run_mutations", metadata,
    Column("mutation_id", String(128), primary_key=True),
    Column("op", String(16), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("step_run_id", String(36), nullable=False),
    Column("request_digest", String(64), nullable=False),
    Column("result_record", Text, nullable=False),
    Column("step_run_version", BigInteger, nullable=False),
    Column("run_version", BigInteger, nullable=False),
    Column("event_sequence", BigInteger, nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("created_at_ms", Ms, nullable=False),
    ForeignKeyConstraint(["run_id", "step_run_id"], ["step_runs.run_id", "step_runs.id"]),
    ForeignKeyConstraint(["run_id", "event_sequence"], ["run_events.run_id", "run_events.sequence"]),
    UniqueConstraint("run_id", "event_sequence"),
    CheckConstraint("op IN ('create', 'transition')", name="op_known"),
    *_per_dialect("result_mirrors", STEP_RUN_LEDGER_CHECK),
)

# PostgreSQL refuses an Attempt or Event naming a StepRun of another Run with composite foreign keys; SQLite does
# it with triggers (revision 0011), which also hold when a connection leaves PRAGMA foreign_keys off. Marked
# "dialects" so the Alembic check compares them only where they exist (migrations/env.py).
for _referring in (run_attempts_table, run_events_table):
    _referring.append_constraint(ForeignKeyConstraint(
        ["run_id", "step_run_id"], ["step_runs.run_id", "step_runs.id"],
        name=f"fk_{_referring.name}_step_run_same_run", info={"dialects": ("postgresql",)},
    ).ddl_if(dialect="postgresql"))


# One row per task revision, so history survives a deleted or edited 2.x cron.
task_snapshots_table = Table(
    "task_snapshots", metadata,
    Column("task_revision", String(64), primary_key=True),
    Column("task_id", String(128), nullable=False),
    Column("legacy_cron_id", BigInteger),
    Column("name", Text),
    Column("command", Text),
    Column("schedule", String(255)),
    Column("work_dir", Text),
    Column("log_name", Text),
    Column("created_at_ms", Ms, nullable=False),
    Index("ix_task_snapshots_task", "task_id", "created_at_ms"),
)

# Disagreements between 2.x and the shadow facts, and callbacks the bridge could not place. Closed by
# setting resolved_at_ms, never deleted; dedupe_key makes "seen again" update the same row (and open it again).
# A closed row with an expired_reason expired (no pass could judge it any more); without one it was resolved.
# closed_by_pass: the reconcile pass that closed it (revision 0013).
mismatches_table = Table(
    "mismatches", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("kind", String(48), nullable=False),
    Column("origin", String(32)),
    Column("legacy_cron_id", BigInteger),
    Column("run_id", String(36)),
    Column("dedupe_key", String(200), nullable=False),
    Column("first_seen_ms", Ms, nullable=False),
    Column("last_seen_ms", Ms, nullable=False),
    Column("occurrences", Integer, nullable=False, server_default="1"),
    Column("diff", Text, nullable=False),
    Column("resolved_at_ms", Ms),
    Column("expired_reason", String(32)),
    Column("closed_by_pass", BigInteger),
    UniqueConstraint("dedupe_key"),
    Index("ix_mismatches_kind_resolved", "kind", "resolved_at_ms"),
    Index("ix_mismatches_origin_first_seen", "origin", "first_seen_ms"),
)

# One row per execution origin; anything missing or unreadable means "off" (docs/cutover.md#flags-one-origin-at-a-time).
origin_flags_table = Table(
    "origin_flags", metadata,
    Column("origin", String(32), primary_key=True),
    Column("mode", String(16), nullable=False),
    Column("updated_at_ms", Ms, nullable=False),
    Column("updated_by", String(128), nullable=False),
    CheckConstraint("mode IN ('off', 'shadow', 'primary')", name="mode_known"),
)

# Append-only: every flag change, who made it and why. Rows are never updated or deleted.
flag_audit_table = Table(
    "flag_audit", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("origin", String(32), nullable=False),
    Column("old_mode", String(16)),
    Column("new_mode", String(16), nullable=False),
    Column("actor", String(128), nullable=False),
    Column("reason", String(500), nullable=False),
    Column("at_ms", Ms, nullable=False),
    Index("ix_flag_audit_origin_at", "origin", "at_ms"),
)

# Small key/value facts of the bridge itself (the admin token's hash, when the flags were seeded).
bridge_settings_table = Table(
    "bridge_settings", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at_ms", Ms, nullable=False),
)

# Leases that keep singleton jobs (the reconciler) to one process; PostgreSQL uses an advisory lock instead.
job_leases_table = Table(
    "job_leases", metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at_ms", Ms, nullable=False),
)

# One row per reconcile pass: when, how it ended, and why if it stopped early.
reconcile_passes_table = Table(
    "reconcile_passes", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("started_at_ms", Ms, nullable=False),
    Column("finished_at_ms", Ms),
    Column("result", String(16), nullable=False),
    Column("reason", String(500)),
    Column("stats", Text, nullable=False, server_default="{}"),
    Index("ix_reconcile_passes_started", "started_at_ms"),
)

# Runs a reconcile pass matched to a 2.x instance; what is left over is an orphan. Scratch, per pass.
reconcile_seen_table = Table(
    "reconcile_seen", metadata,
    Column("pass_id", BigInteger, primary_key=True),
    Column("run_id", String(36), primary_key=True),
)

# Cutover reports as written to reports/, kept so a promotion can be checked against the latest one.
cutover_reports_table = Table(
    "cutover_reports", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("created_at_ms", Ms, nullable=False),
    Column("window_start_ms", Ms, nullable=False),
    Column("window_end_ms", Ms, nullable=False),
    Column("body", Text, nullable=False),
    Index("ix_cutover_reports_created", "created_at_ms"),
)

# Primary mode: one row per Run change that 2.x's columns must follow, written in the same transaction as
# the change. The projector applies rows in order per cron; a row that keeps failing is parked, never
# dropped (docs/primary-mode.md).
projection_outbox_table = Table(
    "projection_outbox", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("legacy_cron_id", BigInteger, nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("attempt_id", String(36)),
    Column("event", String(16), nullable=False),
    Column("created_at_ms", Ms, nullable=False),
    Column("state", String(16), nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at_ms", Ms, nullable=False),
    Column("last_error", String(200)),
    Column("applied_at_ms", Ms),
    CheckConstraint("state IN ('pending', 'applied', 'parked')", name="state_known"),
    CheckConstraint("event IN ('start', 'end', 'cancel')", name="event_known"),
    Index("ix_projection_outbox_state_due", "state", "next_attempt_at_ms", "id"),
    Index("ix_projection_outbox_cron_state", "legacy_cron_id", "state", "id"),
)

# Which 2.x RunningInstances row stands for which Attempt: found again by this mapping, never by pid.
legacy_instance_map_table = Table(
    "legacy_instance_map", metadata,
    Column("attempt_id", String(36), primary_key=True),
    Column("legacy_instance_id", BigInteger, nullable=False),
    Column("legacy_cron_id", BigInteger, nullable=False),
    Column("created_at_ms", Ms, nullable=False),
    UniqueConstraint("legacy_instance_id"),
)

# End callbacks whose signal exit (128 + N) waits out the stop-decision window for 2.x's evidence of a stop,
# with everything needed to close the Run once decided: the observed end and the execution's identity. A row
# is deleted once its Run is decided; deciding again is a no-op (the end's dedupe key), so a crash between
# the two only repeats a no-op.
pending_ends_table = Table(
    "pending_ends", metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("dedupe_key", String(200), nullable=False),  # cron id + the end's own key: a repeated end adds none
    Column("run_id", String(36), nullable=False),
    Column("run_created_at_ms", Ms, nullable=False),  # when 2.x inserted the instance row, near enough
    Column("legacy_cron_id", BigInteger, nullable=False),
    Column("pid", BigInteger),
    Column("log_ref", String(36)),
    Column("started_at_ms", Ms),
    Column("duration_ms", Ms),
    Column("exit_code", ExitCode()),  # NULL: the end carried none (before v2.21, revision 0016)
    Column("trapped", Boolean, nullable=False, server_default="0"),  # the shell's signal trap sent it
    Column("received_at_ms", Ms, nullable=False),
    Column("due_at_ms", Ms, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),  # decisions put off (2.x unreadable)
    UniqueConstraint("dedupe_key"),
    Index("ix_pending_ends_due", "due_at_ms", "id"),
    Index("ix_pending_ends_cron", "legacy_cron_id", "id"),
    Index("ix_pending_ends_run", "run_id"),
)
