"""SqlStepRunRepository: the StepRun storage capability (docs/stepruns.md) on SQLite and PostgreSQL, one code path.

One mutation is one short transaction through SqlUnitOfWork's write path, which on SQLite is BEGIN IMMEDIATE
(this process's writers queue on the writer gate; another process's lock is waited out by the busy retry). On
PostgreSQL the transaction runs SERIALIZABLE with fixed timeouts, and is run again, at most three more times, when
a statement fails with a serialization failure or a deadlock; never once COMMIT was sent (the unit of work
reports a failed COMMIT as it is). Statements go out in two batches, reads then writes: one round trip each on
PostgreSQL (pipeline mode), plus the COMMIT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Connection, Engine, bindparam, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.domain.errors import RunNotFoundError, StoreBusyError
from bridge.domain.model import RunStatus
from bridge.domain.step_run import StepRun
from bridge.domain.step_run_errors import RunFenceConflictError, StepRunVersionConflictError
from bridge.domain.step_run_mutation import (
    CreateStepRun,
    MutationRecord,
    MutationResult,
    RunFence,
    StepRunDecision,
    StepRunMutation,
    check_fence,
    decide,
    validate,
)
from bridge.service.ports import StepRunPage
from bridge.storage.engine import store_capabilities
from bridge.storage.run_fence import advance_run, fence_held, insert_event
from bridge.storage.schema import STEP_RUN_MIRROR, runs_table, step_run_mutations_table, step_runs_table
from bridge.storage.statements import CompiledStatement, Statement, StatementResult, execute_all
from bridge.storage.step_run_queries import SqlStepRunReader, mutation_from_row, step_run_from_record
from bridge.storage.unit_of_work import SqlUnitOfWork, WriteOutcomes

# PostgreSQL: fixed bounds for this short transaction, whatever the session's own settings.
STATEMENT_TIMEOUT_MS = 2000
LOCK_TIMEOUT_MS = 1000
IDLE_IN_TRANSACTION_TIMEOUT_MS = 5000
MAX_SERIALIZATION_RETRIES = 3
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected

Checkpoint = Callable[[str], None]
_r, _s, _m = runs_table, step_runs_table, step_run_mutations_table
_STEP_RUN_COLUMNS = [column for column, _key in STEP_RUN_MIRROR] + ["record"]
# Written once at insert and never again: identity, kind, birth, schema.
_STEP_RUN_FIXED = frozenset({"id", "run_id", "kind", "created_at_ms", "schema_id"})
_LEDGER_COLUMNS = [c.name for c in _m.columns]

_PG_BEGIN = [
    CompiledStatement(text("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")),
    CompiledStatement(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")),
    CompiledStatement(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")),
    CompiledStatement(text(f"SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_TIMEOUT_MS}")),
]
# Serialise on the Run: its row lock on PostgreSQL; on SQLite BEGIN IMMEDIATE already holds the store's lock.
_LOCK_RUN = CompiledStatement(select(_r.c.id, _r.c.status, _r.c.version, _r.c.event_sequence)
                              .where(_r.c.id == bindparam("b_id")).with_for_update())
_SELECT_MUTATION = CompiledStatement(select(_m).where(_m.c.mutation_id == bindparam("b_id")))
_SELECT_STEP_RUN = CompiledStatement(select(_s.c.id, _s.c.record).where(_s.c.id == bindparam("b_id")))
_COUNT_STEP_RUNS = CompiledStatement(select(func.count()).select_from(_s).where(_s.c.run_id == bindparam("b_run_id")))
_INSERT_STEP_RUN = CompiledStatement(insert(_s), _STEP_RUN_COLUMNS)
_CAS_STEP_RUN = CompiledStatement(
    update(_s).where(_s.c.id == bindparam("b_id"), _s.c.version == bindparam("b_version"),
                     _s.c.digest == bindparam("b_digest"), _s.c.status == bindparam("b_status")),
    [c for c in _STEP_RUN_COLUMNS if c not in _STEP_RUN_FIXED])
_INSERT_LEDGER = CompiledStatement(insert(_m), _LEDGER_COLUMNS)


class _Retry(Exception):
    """A statement failed with a serialization failure or deadlock before COMMIT: the whole mutation may run again."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


def _nothing(_step: str) -> None:
    return None


def step_run_values(step_run: StepRun) -> dict[str, Any]:
    """The row of a StepRun: each mirror column from the record's JSON values, and the canonical JSON itself."""
    values = {**step_run.body(), "digest": step_run.digest}
    return {**{column: values[key] for column, key in STEP_RUN_MIRROR}, "record": step_run.to_json()}


def _ledger_values(ledger: MutationRecord) -> dict[str, Any]:
    return {"mutation_id": ledger.mutation_id, "op": ledger.op, "run_id": ledger.run_id,
            "step_run_id": ledger.step_run_id, "request_digest": ledger.request_digest,
            "result_record": ledger.step_run.to_json(), "step_run_version": ledger.step_run.version,
            "run_version": ledger.run_version, "event_sequence": ledger.event_sequence, "event_id": ledger.event_id,
            "created_at_ms": ledger.created_at_ms}


class SqlStepRunRepository:
    """StepRunRepository over one engine. ``checkpoint`` is called with each MUTATION_STEPS name before that step
    (a test raises there to prove nothing is committed); ``outcomes`` feeds readiness like every other write."""

    def __init__(self, engine: Engine, *, busy_budget_ms: int = 400, outcomes: WriteOutcomes | None = None,
                 checkpoint: Checkpoint | None = None) -> None:
        self._reader = SqlStepRunReader(engine)
        # The unit of work hands the work its Connection itself (the transaction object of this repository).
        factory = cast(Any, lambda conn: conn)
        self._uow = SqlUnitOfWork(engine, busy_budget_ms=busy_budget_ms, outcomes=outcomes, store_factory=factory)
        # PostgreSQL runs mutations SERIALIZABLE and may fail one to retry; SQLite has one writer.
        self.serializable = store_capabilities(engine).serializable_writes
        self._begin = _PG_BEGIN if self.serializable else []
        self._checkpoint = checkpoint or _nothing
        self.serialization_retries = 0  # how many times a mutation ran again; for tests and diagnostics

    def mutate(self, command: StepRunMutation, *, at_ms: int, new_id: Callable[[], str]) -> MutationResult:
        validate(command)
        failure: DBAPIError | None = None
        for _ in range(1 + MAX_SERIALIZATION_RETRIES):
            try:
                return self._uow.write(lambda conn: self._mutate_once(cast(Connection, conn), command, at_ms,
                                                                      new_id))
            except _Retry as retry:
                failure = retry.error
                self.serialization_retries += 1
        raise StoreBusyError("the bridge store kept failing the step run mutation with serialization failures",
                             attempts=1 + MAX_SERIALIZATION_RETRIES) from failure

    def get(self, step_run_id: str) -> StepRun | None:
        return self._reader.get(step_run_id)

    def get_mutation(self, mutation_id: str) -> MutationRecord | None:
        return self._reader.get_mutation(mutation_id)

    def page(self, run_id: str, after: tuple[int, str] | None, limit: int) -> StepRunPage:
        return self._reader.page(run_id, after, limit)

    def _mutate_once(self, conn: Connection, command: StepRunMutation, at_ms: int,
                     new_id: Callable[[], str]) -> MutationResult:
        step = self._checkpoint
        step("serialise")
        creating = isinstance(command, CreateStepRun)
        reads: list[Statement] = [(statement, {}) for statement in self._begin]
        reads += [(_LOCK_RUN, {"b_id": command.run_id}), (_SELECT_MUTATION, {"b_id": command.mutation_id}),
                  (_COUNT_STEP_RUNS, {"b_run_id": command.run_id}) if isinstance(command, CreateStepRun)
                  else (_SELECT_STEP_RUN, {"b_id": command.step_run_id})]
        run_row, mutation, third = (result.first() for result in _send(conn, reads)[-3:])
        if run_row is None:
            raise RunNotFoundError(command.run_id)
        fence = RunFence(run_row["id"], RunStatus(run_row["status"]), run_row["version"], run_row["event_sequence"])
        step("replay")
        if mutation is not None:
            return mutation_from_row(mutation).replay(command)  # writes nothing
        step("fence")
        check_fence(command, fence)
        count = next(iter(third.values())) if creating and third else 0
        current = None if creating or third is None else step_run_from_record(third["record"], third["id"])
        decision = decide(command, fence, current, count, at_ms=at_ms, new_id=new_id)
        self._write(conn, decision, fence)
        step("commit")
        return decision.result()

    def _write(self, conn: Connection, decision: StepRunDecision, fence: RunFence) -> None:
        step = self._checkpoint
        values = step_run_values(decision.step_run)
        step("write_step_run")
        if decision.expected is None:
            writes: list[Statement] = [(_INSERT_STEP_RUN, values)]
        else:
            expected = decision.expected
            changed = {k: v for k, v in values.items() if k not in _STEP_RUN_FIXED}
            writes = [(_CAS_STEP_RUN, {**changed, "b_id": expected.id, "b_version": expected.version,
                                       "b_digest": expected.digest, "b_status": expected.status.value})]
        step("advance_run")
        writes.append(advance_run(fence.run_id, expected_version=fence.version, expected_sequence=fence.event_sequence,
                                  version=decision.run_version, event_sequence=decision.event_sequence))
        step("append_event")
        writes.append(insert_event(decision.event))
        step("append_ledger")
        writes.append((_INSERT_LEDGER, _ledger_values(decision.ledger)))
        results = _send(conn, writes)
        _check_rowcounts(decision, fence, results)


def _check_rowcounts(decision: StepRunDecision, fence: RunFence, results: list[StatementResult]) -> None:
    """Both compare-and-sets must have hit; a miss (another path changed the rows) rolls the whole mutation back."""
    expected = decision.expected
    if expected is not None and results[0].rowcount != 1:
        raise StepRunVersionConflictError(expected.id, {"version": expected.version, "digest": expected.digest,
                                                        "status": expected.status.value}, {})
    if not fence_held(results[1]):
        raise RunFenceConflictError(fence.run_id, (fence.version, fence.event_sequence), (-1, -1))


def _send(conn: Connection, statements: list[Statement]) -> list[StatementResult]:
    """Run the statements; a serialization failure or deadlock (or a twin's ledger row) becomes a retry."""
    try:
        return execute_all(conn, statements)
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise  # the unit of work retries a dropped connection on a fresh one
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate in _RETRYABLE_SQLSTATES or (isinstance(exc, IntegrityError) and "mutation_id" in str(exc.orig)):
            raise _Retry(exc) from exc
        raise
