"""Exit codes as 2.x keeps them: never cut to an integer, and compared like with like by the reconciler."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.domain.model import Origin, RunStatus
from bridge.service.reconcile import ComparedRun
from legacy_adapters.callbacks import exit_code_as_given
from legacy_adapters.records import LegacyInstance
from legacy_adapters.schema import InstanceStatus
from projections.reconcile import compare_ended

SAFE = 2**53 - 1


@pytest.mark.parametrize("value, kept", [(None, None), (0, 0), (0.0, 0), (-0.0, 0), (1000.0, 1000), (0.5, 0.5),
                                         (-1, -1), (float(SAFE), SAFE)])
def test_a_whole_number_is_an_int_and_a_fraction_stays_a_fraction(value: float | None, kept: float | None) -> None:
    assert exit_code_as_given(value) == kept and type(exit_code_as_given(value)) is type(kept)


@given(st.floats(min_value=-SAFE, max_value=SAFE, allow_nan=False))
def test_the_number_is_never_changed(value: float) -> None:
    assert exit_code_as_given(value) == value


def _ended(exit_code: float) -> tuple[LegacyInstance, ComparedRun]:
    instance = LegacyInstance(id=1, cron_id=7, pid=10, log_path="a/b.log", started_at=1_796_216_401,
                              finished_at=1_796_216_403, status=int(InstanceStatus.ERROR), exit_code=exit_code)
    run = ComparedRun(id="r", idempotency_key="k", status=RunStatus.FAILED, created_at_ms=1_796_216_401_000,
                      exit_code=exit_code, origin=Origin.SCRIPT, started_at_ms=1_796_216_401_000,
                      finished_at_ms=1_796_216_403_000)
    return instance, run


@pytest.mark.parametrize("exit_code", [0.5, -1, 1000, -0.25])
def test_the_reconciler_finds_no_exit_code_mismatch_where_both_kept_the_same_number(exit_code: float) -> None:
    instance, run = _ended(exit_code)
    assert [f.kind for f in compare_ended(instance, run, tolerance_s=2)] == []


def test_the_reconciler_tells_a_fraction_from_its_integer_part() -> None:
    instance, run = _ended(0.5)
    run = dataclasses.replace(run, exit_code=0)
    assert [f.kind for f in compare_ended(instance, run, tolerance_s=2)] == ["exit_code"]
