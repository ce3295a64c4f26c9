"""MismatchKind: every kind of disagreement the bridge records, the one list every other list derives from.

The reconciler's kinds compare 2.x's tables with the store; the ``compat.*`` kinds are callbacks the shadow
path could not place on one Run (they share the name of the event type that says so).
"""

from __future__ import annotations

from enum import StrEnum

from bridge.domain.events import EventType


class MismatchKind(StrEnum):
    MISSING = "missing"  # 2.x ran an execution the store holds no Run for
    ORPHAN = "orphan"  # a shadow Run 2.x holds no row for
    DUPLICATE = "duplicate"  # two shadow Runs for one 2.x execution
    STUCK = "stuck"  # 2.x says running, its process is provably gone
    ACTIVE_STATE = "active_state"  # Crontabs.status against the cron's active Runs
    PID = "pid"  # Crontabs.pid against the running Run's pid
    TERMINAL_STATUS = "terminal_status"
    EXIT_CODE = "exit_code"
    START_TIME = "start_time"
    FINISH_TIME = "finish_time"
    INVALID_LEGACY_VALUE = "invalid_legacy_value"  # a 2.x value no rule can judge
    LEGACY_DUPLICATE_INSTANCE = "legacy_duplicate_instance"  # one execution 2.x holds more than one row for
    UNMATCHED_CALLBACK = EventType.COMPAT_UNMATCHED_CALLBACK.value
    AMBIGUOUS_CALLBACK = EventType.COMPAT_AMBIGUOUS_CALLBACK.value


# The mismatch kinds of a callback the shadow path could not place on one Run (unmatched first).
CALLBACK_MISMATCH_KINDS: tuple[MismatchKind, ...] = (MismatchKind.UNMATCHED_CALLBACK, MismatchKind.AMBIGUOUS_CALLBACK)
# The kinds a reconcile pass opens and closes: all the others.
RECONCILER_KINDS: tuple[MismatchKind, ...] = tuple(k for k in MismatchKind if k not in CALLBACK_MISMATCH_KINDS)
# Kinds about a cron (its Crontabs row), whatever Run they name.
CRON_KINDS: frozenset[MismatchKind] = frozenset({MismatchKind.ACTIVE_STATE, MismatchKind.PID})


def stored(kinds: tuple[MismatchKind, ...]) -> tuple[str, ...]:
    """The kinds as the store's ``mismatches.kind`` column holds them."""
    return tuple(kind.value for kind in kinds)
