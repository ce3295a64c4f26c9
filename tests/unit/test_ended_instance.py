"""The one table from an ended 2.x instance status to the Run model (legacy_adapters/schema.py ENDED_INSTANCE)."""

from __future__ import annotations

from bridge.domain.model import ATTEMPT_TERMINAL, RUN_TERMINAL
from legacy_adapters.schema import ENDED_INSTANCE, InstanceStatus


def test_every_status_but_running_is_ended_and_ends_a_run_and_its_attempt_alike() -> None:
    assert set(ENDED_INSTANCE) == set(InstanceStatus) - {InstanceStatus.RUNNING}
    for status, ended in ENDED_INSTANCE.items():
        assert ended.run in RUN_TERMINAL and ended.attempt in ATTEMPT_TERMINAL, status
        assert ended.run.value == ended.attempt.value, status  # one outcome, told twice
        assert (ended.error_code is None) == (status is InstanceStatus.FINISHED), status
