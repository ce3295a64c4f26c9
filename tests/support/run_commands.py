"""The six Run commands for tests and benches: the domain's rules (bridge.domain.commands) carried out through
RunService's one write API, each command one ``change`` or ``transaction``, as the service's handlers once did.

Production writes Runs through the shadow recorder and the jobs; these exist so the contract suite can take a
Run through every state with the same transactions, refusals, dedupe keys and metrics the service gives any
caller. A new Attempt's id comes from bridge.service.ids.new_id, RunService's default id factory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bridge.domain import commands
from bridge.domain.aggregate import RunChange
from bridge.domain.commands import (
    CancelOutcome,
    CreateAttempt,
    CreateRun,
    RequestCancel,
    RetryRun,
    TransitionAttempt,
    TransitionRun,
)
from bridge.domain.model import Run
from bridge.service.ids import new_id
from bridge.service.ports import IdempotencyKeyTakenError, RunRepository, RunStore
from bridge.service.run_service import CommandResult, RunService, RunTransaction

Build = Callable[[RunStore, RunChange], None]


@dataclass(frozen=True, slots=True)
class CreateRunResult:
    run: Run
    created: bool  # False: the idempotency key named an existing Run ("existing", HTTP 200)


@dataclass(frozen=True, slots=True)
class CancelResult:
    run: Run
    outcome: CancelOutcome


def create_run(service: RunService, cmd: CreateRun, build: Build | None = None) -> CreateRunResult:
    """Create a Run (status created); an idempotency key already used returns that Run.

    ``build`` may add further steps to the same transaction (queued, dispatching and Attempt 1 at once).
    Raises IdempotencyKeyConflictError when the key names a Run created by a different request.
    """
    def work(tx: RunTransaction) -> CreateRunResult:
        if cmd.idempotency_key is not None:
            existing = tx.store.get_run_by_idempotency_key(cmd.project_id, cmd.idempotency_key)
            if existing is not None:
                return CreateRunResult(commands.replayed(existing, cmd), created=False)
        change = tx.create(commands.new_run(cmd, run_id=tx.new_id(), at_ms=tx.at_ms), actor=cmd.actor,
                           payload=commands.created_payload(cmd))
        if build is not None:
            build(tx.store, change)
        return CreateRunResult(tx.commit(change).run, created=True)

    try:
        return service.transaction(work)
    except IdempotencyKeyTakenError:
        # Lost the race to a twin with the same key: the winner's Run is the answer.
        key = cmd.idempotency_key or ""
        existing = service.read(lambda tx: tx.store.get_run_by_idempotency_key(cmd.project_id, key))
        if existing is None:  # pragma: no cover - the key was committed a moment ago
            raise
        return CreateRunResult(commands.replayed(existing, cmd), created=False)


def retry_run(service: RunService, cmd: RetryRun) -> CreateRunResult:
    """Manual retry: a new Run with retry_of_run_id; the original stays as it was. Raises RetryNotAllowedError."""
    return create_run(service, commands.retry_of(service.get_run(cmd.run_id), cmd))


def transition_run(service: RunService, cmd: TransitionRun) -> CommandResult:
    """Move a Run. Raises InvalidRunTransitionError, RunVersionConflictError, RunNotFoundError."""
    result, _ = service.change(cmd.run_id, lambda store, change: commands.move_run(change, cmd), actor=cmd.actor,
                               command="transition_run", expected_version=cmd.expected_version,
                               dedupe_key=cmd.replay_key)
    return result


def create_attempt(service: RunService, cmd: CreateAttempt) -> CommandResult:
    """Add the next Attempt (claimed). The Run must be dispatching; the previous Attempt terminal."""
    def mutate(store: RunRepository, change: RunChange) -> None:
        commands.add_attempt(change, store.get_attempts(cmd.run_id), cmd, new_id)

    result, _ = service.change(cmd.run_id, mutate, actor=cmd.actor, command="create_attempt",
                               expected_version=cmd.expected_version, dedupe_key=cmd.dedupe_key)
    return result


def transition_attempt(service: RunService, cmd: TransitionAttempt) -> CommandResult:
    """Move an Attempt (CAS on id + status + callback_sequence) and optionally its Run, atomically."""
    def mutate(store: RunRepository, change: RunChange) -> None:
        commands.move_attempt(change, store.get_attempt(cmd.attempt_id), cmd)

    result, _ = service.change(cmd.run_id, mutate, actor=cmd.actor, command="transition_attempt",
                               expected_version=cmd.expected_version, dedupe_key=cmd.replay_key)
    return result


def request_cancel(service: RunService, cmd: RequestCancel) -> CancelResult:
    """Durable cancellation, docs/run-state.md#durable-cancellation: persist the request before any signal."""
    result, outcome = service.change(cmd.run_id, lambda store, change: commands.request_cancel(change, cmd),
                                     actor=cmd.actor, command="request_cancel")
    return CancelResult(result.run, outcome or CancelOutcome.ALREADY_REQUESTED)
