from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from legacy_adapters.errors import LegacyTimeError
from legacy_adapters.timeconv import (
    duration_seconds_to_ms,
    epoch_seconds_to_ms,
    ms_to_duration_seconds,
    ms_to_epoch_seconds,
)


def test_epoch_seconds_become_milliseconds() -> None:
    assert epoch_seconds_to_ms(1784340000, field="last_execution_time") == 1784340000000


def test_zero_epoch_means_never_and_becomes_none() -> None:
    assert epoch_seconds_to_ms(0, field="last_execution_time") is None
    assert ms_to_epoch_seconds(None) == 0


def test_durations_keep_zero_and_convert_to_milliseconds() -> None:
    assert duration_seconds_to_ms(0, field="last_running_time") == 0
    assert duration_seconds_to_ms(7, field="last_running_time") == 7000


def test_floats_convert_exactly_and_round_half_up_to_whole_milliseconds() -> None:
    assert epoch_seconds_to_ms(1784340000.5, field="started_at") == 1784340000500
    assert duration_seconds_to_ms(0.0015, field="d") == 2  # 1.5 ms as the float holds it
    assert duration_seconds_to_ms(2.25, field="d") == 2250


@given(st.integers(min_value=0, max_value=10_000_000_000))
def test_whole_seconds_and_the_same_value_as_a_float_give_the_same_integer_milliseconds(seconds: int) -> None:
    expected = math.floor(Fraction(seconds) * 1000 + Fraction(1, 2))
    as_int = epoch_seconds_to_ms(seconds, field="e")
    as_float = epoch_seconds_to_ms(float(seconds), field="e")
    assert as_int == as_float == (expected or None)
    assert type(as_int) is int or as_int is None
    if seconds <= 31_536_000 * 5:
        as_duration = duration_seconds_to_ms(seconds, field="d")
        assert as_duration == duration_seconds_to_ms(float(seconds), field="d") == expected


@pytest.mark.parametrize("value", [1784340000000, 10_000_000_001])
def test_epoch_values_that_already_look_like_milliseconds_are_rejected(value: int) -> None:
    with pytest.raises(LegacyTimeError) as caught:
        epoch_seconds_to_ms(value, field="last_execution_time")
    assert caught.value.kind == "too_large" and str(value) not in caught.value.message


def test_durations_above_five_years_look_like_milliseconds_and_are_rejected() -> None:
    assert duration_seconds_to_ms(31_536_000 * 5, field="d") == 31_536_000 * 5000
    with pytest.raises(LegacyTimeError):
        duration_seconds_to_ms(31_536_000 * 5 + 1, field="last_running_time")


@pytest.mark.parametrize("value", [-1, -0.5])
def test_negative_seconds_are_rejected(value: float) -> None:
    with pytest.raises(LegacyTimeError) as caught:
        epoch_seconds_to_ms(value, field="started_at")
    assert caught.value.reason == "negative" and caught.value.code == "INVALID_LEGACY_TIME"
    with pytest.raises(LegacyTimeError):
        duration_seconds_to_ms(value, field="last_running_time")


@pytest.mark.parametrize("value", [True, False, "1784340000", None, [1]])
def test_non_numbers_including_bool_and_numeric_strings_are_rejected(value: object) -> None:
    with pytest.raises(LegacyTimeError) as caught:
        epoch_seconds_to_ms(value, field="last_execution_time")
    assert caught.value.field == "last_execution_time"


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_and_infinity_are_rejected(value: float) -> None:
    with pytest.raises(LegacyTimeError):
        duration_seconds_to_ms(value, field="last_running_time")


def test_milliseconds_project_back_to_floored_epoch_and_rounded_duration_seconds() -> None:
    assert ms_to_epoch_seconds(1784340000999) == 1784340000
    assert ms_to_duration_seconds(6499) == 6
    assert ms_to_duration_seconds(6500) == 7
    with pytest.raises(LegacyTimeError):
        ms_to_duration_seconds(-1)
    with pytest.raises(LegacyTimeError):
        ms_to_epoch_seconds(True)  # type: ignore[arg-type]
