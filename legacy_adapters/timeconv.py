"""The one place that converts 2.x second values to bridge milliseconds and back.

2.x stores epochs and durations in seconds (docs/legacy-2x.md#time-units); the bridge stores UTC ms.
"""

from __future__ import annotations

import math
from fractions import Fraction

from legacy_adapters.errors import LegacyTimeError

# An epoch above this many seconds is after the year 2286: it is almost certainly a
# millisecond value that someone already multiplied (e.g. Date.now() in Auths.info).
MAX_EPOCH_SECONDS = 10_000_000_000
# last_running_time is a duration; five years of seconds is implausible for one run and
# is the magnitude a millisecond value of a few days would have.
MAX_DURATION_SECONDS = 31_536_000 * 5


def _checked_seconds(value: object, field: str, limit: int) -> int | Fraction:
    # bool is an int subclass; a JSON true must not become 1 second.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LegacyTimeError(field, "not a number", type(value).__name__)
    if isinstance(value, float) and not math.isfinite(value):
        raise LegacyTimeError(field, "not finite", "nan" if math.isnan(value) else "inf")
    if value < 0:
        raise LegacyTimeError(field, "negative", type(value).__name__)
    if value > limit:
        raise LegacyTimeError(field, "looks like milliseconds already", "too_large")
    # Whole seconds (what the task shell sends) are exact as they are; only a float needs a Fraction.
    return value if isinstance(value, int) else Fraction(value)


def _round_half_up(exact: int | Fraction) -> int:
    # Exact rational arithmetic: 1.0005 s is 1000.5 ms exactly as the float holds it,
    # never 1000.4999 from a binary multiply. A whole number of ms is already exact.
    if isinstance(exact, int):
        return exact
    return math.floor(exact + Fraction(1, 2))


def epoch_seconds_to_ms(value: object, *, field: str) -> int | None:
    """Unix seconds to UTC ms; 0 returns None because 2.x writes 0 for "never ran"."""
    seconds = _checked_seconds(value, field, MAX_EPOCH_SECONDS)
    if seconds == 0:
        return None
    return _round_half_up(seconds * 1000)


def duration_seconds_to_ms(value: object, *, field: str) -> int:
    """A 2.x duration in seconds (e.g. last_running_time) to ms; 0 stays 0."""
    return _round_half_up(_checked_seconds(value, field, MAX_DURATION_SECONDS) * 1000)


def _checked_ms(ms: object, field: str) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise LegacyTimeError(field, "not an integer number of ms", type(ms).__name__)
    if ms < 0:
        raise LegacyTimeError(field, "negative", "int")
    return ms


def ms_to_epoch_seconds(ms: int | None, *, field: str = "ms") -> int:
    """UTC ms to 2.x unix seconds (floor, like dayjs().unix()); None projects as 0 ("never")."""
    if ms is None:
        return 0
    return _checked_ms(ms, field) // 1000


def ms_to_duration_seconds(ms: int, *, field: str = "ms") -> int:
    """A duration in ms to whole 2.x seconds, rounding half up."""
    return (_checked_ms(ms, field) + 500) // 1000
