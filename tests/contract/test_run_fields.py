"""A Run's origin, mode and owner are their enums on every store, as written and as read back."""

from __future__ import annotations

from bridge.domain.commands import CreateRun
from bridge.domain.model import Origin, Owner, RunMode
from bridge.service.run_service import RunService
from tests.contract.lifecycle import ACTOR
from tests.support.run_commands import create_run


def test_origin_mode_and_owner_come_back_as_their_enums(service: RunService) -> None:
    cmd = CreateRun(project_id="default", task_id="legacy-cron:1", task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key="typed-fields", legacy_cron_id=1, origin="scheduled_node",
                    mode="legacy_import", owner="bridge")
    created = create_run(service, cmd).run
    for run in (created, service.get_run(created.id)):
        assert run.origin is Origin.SCHEDULED_NODE
        assert run.mode is RunMode.IMPORTED
        assert run.owner is Owner.BRIDGE


def test_a_run_without_them_keeps_none(service: RunService) -> None:
    cmd = CreateRun(project_id="default", task_id="legacy-cron:1", task_revision="rev1", trigger_type="manual",
                    actor=ACTOR, idempotency_key="untyped-fields", legacy_cron_id=1)
    run = service.get_run(create_run(service, cmd).run.id)
    assert (run.origin, run.mode, run.owner) == (None, None, None)
