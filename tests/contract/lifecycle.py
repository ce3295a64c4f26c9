"""Small builders for contract tests: a Run taken through its lifecycle with the Run commands only
(tests/support/run_commands.py, over RunService's one write API)."""

from __future__ import annotations

from bridge.domain.commands import CreateAttempt, CreateRun, TransitionAttempt, TransitionRun
from bridge.domain.events import Actor, ActorType
from bridge.domain.model import AttemptStatus, Run, RunAttempt, RunStatus
from bridge.service.run_service import RunService
from tests.support.run_commands import create_attempt, create_run, transition_attempt, transition_run

ACTOR = Actor(ActorType.SYSTEM, "contract-test")


def create(service: RunService, key: str | None = None, task: str = "legacy-cron:1") -> Run:
    cmd = CreateRun(project_id="default", task_id=task, task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key=key, legacy_cron_id=1)
    return create_run(service, cmd).run


def move(service: RunService, run: Run, to: RunStatus, **kw: object) -> Run:
    return transition_run(service, TransitionRun(run.id, to, run.version, ACTOR, **kw)).run  # type: ignore[arg-type]


def dispatching(service: RunService) -> Run:
    run = create(service)
    run = move(service, run, RunStatus.QUEUED)
    return move(service, run, RunStatus.DISPATCHING)


def attempt_to(service: RunService, run: Run, attempt: RunAttempt, to: AttemptStatus,
               run_to: RunStatus | None = None, **kw: object) -> tuple[Run, RunAttempt]:
    result = transition_attempt(service, TransitionAttempt(
        run.id, attempt.id, to, run.version, attempt.status, attempt.callback_sequence, ACTOR,
        run_to=run_to, **kw))  # type: ignore[arg-type]
    assert result.attempt is not None
    return result.run, result.attempt


def running(service: RunService) -> tuple[Run, RunAttempt]:
    """A Run in running with Attempt 1 in running."""
    run = dispatching(service)
    result = create_attempt(service, CreateAttempt(run.id, run.version, ACTOR, pid=4321))
    run, attempt = result.run, result.attempt
    assert attempt is not None
    run, attempt = attempt_to(service, run, attempt, AttemptStatus.STARTING)
    return attempt_to(service, run, attempt, AttemptStatus.RUNNING, run_to=RunStatus.RUNNING)


def sequences(service: RunService, run_id: str) -> list[int]:
    return [e.sequence for e in service.list_events(run_id, 0, 10_000).events]
