"""The import's pure planner: one 2.x instance becomes the Run it stands for, as a ChangeSet, built with no I/O.

An ended instance becomes a terminal Run + Attempt 1 in mode ``legacy_import``; a running one the active shadow
Run ShadowRecorder would have opened. Every step is marked synthesized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bridge.domain.aggregate import ChangeSet, RunChange
from bridge.domain.events import Actor, ActorType
from bridge.domain.keys import import_key
from bridge.domain.ladder import open_to_running
from bridge.domain.model import (
    IMPORT_TRIGGER,
    IMPORTED_MODE,
    AttemptStatus,
    Mode,
    Owner,
    Run,
    RunAttempt,
    RunStatus,
    new_legacy_run,
)
from bridge.service.callback_facts import CallbackFacts
from bridge.service.ids import new_id
from bridge.service.ports import TaskSnapshot
from legacy_adapters.callbacks import exit_code_as_given, log_path_digest
from legacy_adapters.errors import LegacyTimeError
from legacy_adapters.identity import instance_import_key, speaking_row
from legacy_adapters.origin import OriginDecision
from legacy_adapters.records import LegacyInstance
from legacy_adapters.schema import ENDED_INSTANCE, EndedAs, InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.reconcile import instance_defects

DELETED_CRON_REVISION = "deleted-cron"  # task_revision when the instance's Crontabs row is gone
FINISH_TIME_UNKNOWN = "finish_time_unknown"  # error_code of a stopped row 2.x's boot reset left without finished_at
# origin_evidence of an imported Run (of a still-running one: the prefix of its inferred origin's evidence).
IMPORT_EVIDENCE = "legacy_import"
IMPORTER = Actor(ActorType.SYSTEM, "legacy_import")  # the actor of every step the import writes
_SYNTH = {"synthesized": True}
_SAFE_INTEGER = 2**53 - 1  # what 2.x accepts (Joi: a safe number); kept as given since revision 0014
ENDED = {int(status): ended for status, ended in ENDED_INSTANCE.items()}


@dataclass(frozen=True)
class Planned:
    """What the job decided for one instance (``_Importer._prepare``): an outcome, and for a new Run its
    ChangeSet and key."""

    plan: Plan
    outcome: str  # imported | handed_to_shadow | skipped | unsupported | replayed
    change: ChangeSet | None = None
    key: str | None = None
    status: str | None = None
    snapshot: TaskSnapshot | None = None


@dataclass(frozen=True)
class Builder:
    """Where new Runs are built: RunTransaction.create's work, done before any transaction opens."""

    at_ms: int
    cap: int

    def new_id(self) -> str:
        return new_id()

    def create(self, run: Run, payload: dict[str, Any]) -> RunChange:
        return RunChange.create(run, actor=IMPORTER, at_ms=self.at_ms, new_id=new_id, payload_cap_bytes=self.cap,
                                payload=payload)


def speaking_rows(plans: list[Plan]) -> set[int]:
    """The ids of the rows that speak for their execution, one per execution of the batch."""
    executions: dict[str, list[LegacyInstance]] = {}
    for plan in plans:
        executions.setdefault(plan.import_key, []).append(plan.instance)
    return {speaking_row(rows, {i.id for i in rows if instance_defects(i, math.inf)}).id
            for rows in executions.values()}


@dataclass(frozen=True)
class Plan:
    """One instance with its times in ms (None when unknown or unusable) and the keys a Run of it may have."""

    instance: LegacyInstance
    started_ms: int | None
    finished_ms: int | None
    exit_code: int | float | None
    log_ref: str | None
    unusable: int  # times / exit code that could not be converted

    @property
    def import_key(self) -> str:
        """The key of the execution's one imported Run (the row's own id when it has no execution identity)."""
        return instance_import_key(self.instance)

    @property
    def facts(self) -> CallbackFacts:
        return CallbackFacts(cron_id=self.instance.cron_id or 0, pid=self.instance.pid, log_ref=self.log_ref,
                             started_at_ms=self.started_ms, duration_ms=None, exit_code=None, received_at_ms=0)

    @property
    def execution_key(self) -> str:
        """The execution key its callbacks give a Run (CallbackFacts.execution_key)."""
        return self.facts.execution_key

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key a Run of this execution may already have: imported (also by the row-id key of earlier
        imports) or recorded by the shadow path."""
        return self.import_key, import_key(self.instance.id), self.execution_key

    @classmethod
    def of(cls, instance: LegacyInstance) -> Plan:
        unusable: list[str] = []
        return cls(instance, _ms(instance.started_at, "started_at", unusable),
                   _ms(instance.finished_at, "finished_at", unusable), _exit_code(instance.exit_code, unusable),
                   log_path_digest(instance.log_path), len(unusable))


def _ms(seconds: int | float | None, name: str, unusable: list[str]) -> int | None:
    if seconds is None:
        return None
    try:
        return epoch_seconds_to_ms(seconds, field=name)
    except LegacyTimeError:
        unusable.append(name)
        return None


def _exit_code(value: int | float | None, unusable: list[str]) -> int | float | None:
    """The row's exit code as 2.x keeps it (a fraction stays one); one outside what Joi accepts is unusable."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value) and abs(value) <= _SAFE_INTEGER:
        return exit_code_as_given(value)
    unusable.append("exit_code")
    return None


def begin_seconds(instance: LegacyInstance) -> int | None:
    value = instance.started_at
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def import_ended(build: Builder, plan: Plan, revision: str, ended: EndedAs) -> tuple[ChangeSet, RunStatus]:
    """A terminal Run + Attempt 1 up the opening ladder and on to the end, each step marked synthesized, and the
    status reached."""
    instance, started, finished = plan.instance, plan.started_ms, plan.finished_ms
    cron_id = instance.cron_id or 0
    error_code = ended.error_code.value if ended.error_code is not None else None
    if instance.status == InstanceStatus.STOPPED and instance.finished_at is None:
        # 2.x's boot reset (docs/legacy-2x.md#startup-reset): when it ended is not known
        error_code = FINISH_TIME_UNKNOWN
    created = started if started is not None else build.at_ms
    duration = finished - started if started is not None and finished is not None and finished >= started else None
    run = new_legacy_run(
        run_id=build.new_id(), cron_id=cron_id, task_revision=revision, trigger_type=IMPORT_TRIGGER,
        created_at_ms=created, idempotency_key=plan.import_key, origin=None, origin_evidence=IMPORT_EVIDENCE,
        mode=IMPORTED_MODE, owner=Owner.LEGACY.value, legacy_pid=instance.pid, log_ref=plan.log_ref, synthesized=True,
    )
    change = build.create(run, {"evidence": IMPORT_EVIDENCE, "legacy_status": instance.status, **_SYNTH})
    attempt = open_to_running(change, _attempt_1(build, run, created, plan), started_at_ms=started)
    end: dict[str, Any] = {k: v for k, v in (("exit_code", plan.exit_code), ("finished_at_ms", finished),
                                             ("duration_ms", duration), ("error_code", error_code)) if v is not None}
    errors = {"error_code": error_code} if error_code else {}
    change.move_attempt(attempt, ended.attempt, payload={**end, **_SYNTH}, finished_at_ms=finished,
                        exit_code=plan.exit_code, **errors)
    reached = change.move_run(ended.run, payload={**end, **_SYNTH}, finished_at_ms=finished, duration_ms=duration,
                              **errors)
    return change.result(), reached


def open_shadow(build: Builder, plan: Plan, revision: str, decision: OriginDecision) -> ChangeSet:
    """A still-running instance as the shadow path opens one (bridge/service/shadow.py ``_open_run`` with a
    synthesized start, up the same ladder): same key, owner legacy, mode shadow, Run and Attempt 1 running, so
    the shell's end callback closes it through ShadowRecorder.record_end."""
    instance, facts = plan.instance, plan.facts
    started = plan.started_ms if plan.started_ms is not None else build.at_ms
    evidence = f"{IMPORT_EVIDENCE}:{decision.evidence}"
    run = new_legacy_run(
        run_id=build.new_id(), cron_id=facts.cron_id, task_revision=revision, trigger_type=IMPORT_TRIGGER,
        created_at_ms=started, idempotency_key=facts.execution_key, origin=decision.origin, origin_evidence=evidence,
        mode=Mode.SHADOW.value, owner=Owner.LEGACY.value, legacy_pid=instance.pid, log_ref=plan.log_ref,
        synthesized=True, received_at_ms=build.at_ms,
    )
    change = build.create(run, {"origin": decision.origin, "evidence": evidence, "legacy_status": instance.status,
                                **_SYNTH})
    open_to_running(change, _attempt_1(build, run, started, plan), started_at_ms=started)
    return change.result()


def _attempt_1(build: Builder, run: Run, created_at_ms: int, plan: Plan) -> RunAttempt:
    """The instance's Attempt 1, claimed (the ladder takes it up), synthesized like every imported step."""
    return RunAttempt(id=build.new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED,
                      executor_type="legacy_shell", callback_sequence=0, created_at_ms=created_at_ms,
                      pid=plan.instance.pid, log_artifact_id=plan.log_ref, synthesized=True)
