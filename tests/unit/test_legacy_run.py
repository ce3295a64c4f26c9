"""new_legacy_run: the one shape of a Run made for a 2.x execution (the shadow path and the import)."""

from __future__ import annotations

from bridge.domain.model import CALLBACK_TRIGGER, PROJECT_ID, Origin, Owner, RunMode, RunStatus, new_legacy_run


def test_a_legacy_run_is_created_in_the_2x_project_on_its_crons_task_with_no_events_yet() -> None:
    run = new_legacy_run(run_id="r1", cron_id=5, task_revision="rev", trigger_type=CALLBACK_TRIGGER,
                         created_at_ms=1_000, idempotency_key="legacy:5:9:d:1000", origin="manual",
                         origin_evidence="callback", mode="shadow", owner="legacy", legacy_pid=9, log_ref="d",
                         synthesized=False, received_at_ms=1_001)
    assert (run.project_id, run.task_id, run.legacy_cron_id) == (PROJECT_ID, "legacy-cron:5", 5)
    assert (run.status, run.version, run.event_sequence) == (RunStatus.CREATED, 0, 0)
    assert (run.idempotency_key, run.received_at_ms, run.trigger_type) == ("legacy:5:9:d:1000", 1_001,
                                                                           "legacy_callback")
    assert (run.origin, run.mode, run.owner) == (Origin.MANUAL, RunMode.SHADOW, Owner.LEGACY)
    assert isinstance(run.origin, Origin) and isinstance(run.mode, RunMode) and isinstance(run.owner, Owner)
