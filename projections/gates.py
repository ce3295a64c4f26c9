"""Cutover-readiness gates (docs/run-state.md#readiness-gates): per-origin figures in, one verdict per gate out.

Pure and standard-library only. A ratio gate whose denominator is below the published minimum fails with
``insufficient_data`` and no value: a ratio over three executions says nothing about a cutover.
``weigh_open_mismatches`` says which open mismatches the gates count and why the others do not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bridge.domain.mismatches import MismatchKind

GATES = ("completeness", "terminal_status_agreement", "exit_code_agreement", "no_unexplained_duplicates",
         "no_stale_mismatches")
INSUFFICIENT_DATA = "insufficient_data"
NOT_REPORTED = "not_reported_by_release"  # the gate's fact is one the release never records
# The kinds of finding the ratio gates judge again themselves, execution by execution, from 2.x's rows and the
# Runs: completeness (missing), status and exit-code agreement.
_JUDGED_AFRESH = frozenset({MismatchKind.MISSING.value, MismatchKind.TERMINAL_STATUS.value,
                            MismatchKind.EXIT_CODE.value})
_KIND = re.compile(r"^[a-z][a-z0-9_.]{0,47}$")


class ThresholdError(ValueError):
    """A BRIDGE_GATE_* value is invalid; ``variable`` names it."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


@dataclass(frozen=True)
class GateThresholds:
    """The published thresholds; every report carries the ones it was judged by."""

    min_executions: int = 20
    completeness: float = 0.99
    status_agreement: float = 0.99
    exit_code_agreement: float = 0.99
    max_duplicates: int = 0
    stale_mismatch_kinds: tuple[str, ...] = (MismatchKind.STUCK.value, MismatchKind.ORPHAN.value)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GateThresholds:
        """Read BRIDGE_GATE_*; raises ThresholdError (a ValueError) naming the bad variable."""
        env = os.environ if environ is None else environ
        return cls(
            min_executions=_count(env, "BRIDGE_GATE_MIN_EXECUTIONS", cls.min_executions, low=1),
            completeness=_ratio(env, "BRIDGE_GATE_COMPLETENESS", cls.completeness),
            status_agreement=_ratio(env, "BRIDGE_GATE_STATUS_AGREEMENT", cls.status_agreement),
            exit_code_agreement=_ratio(env, "BRIDGE_GATE_EXIT_CODE_AGREEMENT", cls.exit_code_agreement),
            max_duplicates=_count(env, "BRIDGE_GATE_MAX_DUPLICATES", cls.max_duplicates, low=0),
            stale_mismatch_kinds=_kinds(env, "BRIDGE_GATE_STALE_MISMATCH_KINDS", cls.stale_mismatch_kinds),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_executions": self.min_executions,
            "completeness": self.completeness,
            "terminal_status_agreement": self.status_agreement,
            "exit_code_agreement": self.exit_code_agreement,
            "max_duplicates": self.max_duplicates,
            "stale_mismatch_kinds": list(self.stale_mismatch_kinds),
        }


@dataclass(frozen=True)
class Window:
    """The measurement window, UTC milliseconds, both ends inclusive, and the IANA zone its times are shown in
    (2.x's: its schedules and logs are local time)."""

    start_ms: int
    end_ms: int
    zone: str = "UTC"


@dataclass
class OriginFigures:
    """What was counted for one execution origin over one window (no commands, paths or tokens)."""

    origin: str
    executions_observed: int = 0
    with_shadow_run: int = 0
    terminal_pairs: int = 0
    terminal_status_agree: int = 0
    exit_code_pairs: int = 0
    exit_code_agree: int = 0
    # Runs that ended without a reported outcome (docs/run-state.md#outcome-not-reported): unknown, so in neither
    # agreement's pairs, neither agreeing nor disagreeing.
    ended_without_outcome: int = 0
    unmatched_callbacks: int = 0
    ambiguous_callbacks: int = 0
    duplicates: int = 0
    stuck_runs: int = 0
    open_mismatches_by_kind: dict[str, int] = field(default_factory=dict)
    # Closed inside the window: resolved (a pass judged them again and found agreement), or expired (no pass can
    # judge them any more). Neither reaches a gate: the gates read only open ones (weigh_open_mismatches: which).
    resolved_mismatches_by_kind: dict[str, int] = field(default_factory=dict)
    expired_mismatches_by_kind: dict[str, int] = field(default_factory=dict)
    expired_mismatches_by_reason: dict[str, int] = field(default_factory=dict)
    stale_mismatches: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    shadow_write_failures: int = 0
    runs_created: int = 0
    legacy_import_excluded: int = 0
    # False on a release that keeps no exit code (before v2.21): the exit-code gate has nothing to compare, and
    # says so instead of waiting for pairs that can never come. Not a figure: not in to_dict.
    legacy_reports_exit_codes: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "executions_observed": self.executions_observed,
            "with_shadow_run": self.with_shadow_run,
            "terminal_pairs": self.terminal_pairs,
            "terminal_status_agree": self.terminal_status_agree,
            "exit_code_pairs": self.exit_code_pairs,
            "exit_code_agree": self.exit_code_agree,
            "ended_without_outcome": self.ended_without_outcome,
            "unmatched_callbacks": self.unmatched_callbacks,
            "ambiguous_callbacks": self.ambiguous_callbacks,
            "duplicates": self.duplicates,
            "stuck_runs": self.stuck_runs,
            "open_mismatches_by_kind": dict(sorted(self.open_mismatches_by_kind.items())),
            "resolved_mismatches_by_kind": dict(sorted(self.resolved_mismatches_by_kind.items())),
            "expired_mismatches_by_kind": dict(sorted(self.expired_mismatches_by_kind.items())),
            "expired_mismatches_by_reason": dict(sorted(self.expired_mismatches_by_reason.items())),
            "stale_mismatches": self.stale_mismatches,
            "shadow_write_failures": self.shadow_write_failures,
            "runs_created": self.runs_created,
            "legacy_import_excluded": self.legacy_import_excluded,
            "examples": [dict(e) for e in self.examples],
        }


@dataclass(frozen=True)
class GateVerdict:
    gate: str
    passed: bool
    value: float | int | None
    threshold: float | int
    reason: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "passed": self.passed, "value": self.value, "threshold": self.threshold,
                "reason": self.reason, "detail": self.detail}


def ratio(numerator: int, denominator: int, minimum: int) -> float | None:
    """numerator/denominator rounded to 6 places, or None when the denominator is below ``minimum``."""
    if denominator < max(minimum, 1):
        return None
    return round(numerator / denominator, 6)


def evaluate(figures: OriginFigures, thresholds: GateThresholds, window: Window) -> list[GateVerdict]:
    """One verdict per gate in GATES order."""
    f, t = figures, thresholds
    unknown = ended_without_outcome_words(f.ended_without_outcome)
    return [
        _ratio_gate("completeness", f.with_shadow_run, f.executions_observed, t.completeness, t.min_executions,
                    "executions with a shadow Run"),
        _ratio_gate("terminal_status_agreement", f.terminal_status_agree, f.terminal_pairs, t.status_agreement,
                    t.min_executions, "terminal pairs", unknown),
        _ratio_gate("exit_code_agreement", f.exit_code_agree, f.exit_code_pairs, t.exit_code_agreement,
                    t.min_executions, "exit-code pairs", unknown) if f.legacy_reports_exit_codes else
        GateVerdict("exit_code_agreement", True, None, t.exit_code_agreement, NOT_REPORTED,
                    "2.x keeps no exit code before v2.21: there is nothing to agree with (docs/releases.md)"),
        _at_most("no_unexplained_duplicates", f.duplicates, t.max_duplicates, "duplicates_found",
                 f"{f.duplicates} open duplicate-execution mismatch(es)"),
        _at_most("no_stale_mismatches", f.stale_mismatches, 0, "stale_mismatches_found",
                 f"{f.stale_mismatches} open {'/'.join(t.stale_mismatch_kinds) or '(no kinds)'} mismatch(es) "
                 f"first seen before the window start ({local_time(window.start_ms, window.zone, millis=False)})"),
    ]


@dataclass(frozen=True)
class OpenMismatchWeight:
    """How one origin's open mismatches weigh on its gates: the ones a gate counts, and the rest by why not."""

    total: int
    duplicates: int  # every open duplicate: no_unexplained_duplicates counts them
    stale: int  # open findings of a stale kind first seen before the window: no_stale_mismatches counts them
    not_yet_stale: int  # findings of a stale kind first seen inside the window
    judged_afresh: dict[str, int]  # kind -> open findings the ratio gates judge from the executions themselves
    ungated: dict[str, int]  # kind -> open findings of a kind no gate reads
    stale_kinds: tuple[str, ...]  # the stale kinds that have open findings

    @property
    def against_gates(self) -> int:
        return self.duplicates + self.stale


def weigh_open_mismatches(figures: OriginFigures, thresholds: GateThresholds) -> OpenMismatchWeight:
    """Which open mismatches the gates count (``evaluate``'s two count gates) and which they do not, by kind.

    The ratio gates read no finding: they set each of 2.x's executions in the window against its Run as the
    report finds them, so a ``missing`` finding whose execution has a Run since (an import, a late callback) weighs
    nothing, and one whose execution still has none weighs through completeness."""
    open_now = {kind: n for kind, n in figures.open_mismatches_by_kind.items() if n > 0}
    duplicates = open_now.pop(MismatchKind.DUPLICATE.value, 0)
    stale_kinds = tuple(k for k in thresholds.stale_mismatch_kinds if k in open_now)
    of_stale_kinds = sum(open_now.pop(k) for k in stale_kinds)
    # With `duplicate` among the stale kinds, the stale figure may include duplicates counted already; bounding it
    # by the other stale kinds' findings errs on the side of counting too many, never too few.
    stale = min(figures.stale_mismatches, of_stale_kinds)
    afresh = {k: n for k, n in sorted(open_now.items()) if k in _JUDGED_AFRESH}
    ungated = {k: n for k, n in sorted(open_now.items()) if k not in _JUDGED_AFRESH}
    return OpenMismatchWeight(duplicates + of_stale_kinds + sum(open_now.values()), duplicates, stale,
                              of_stale_kinds - stale, afresh, ungated, stale_kinds)


def passes_all(verdicts: list[GateVerdict]) -> bool:
    """True when there is at least one verdict and every one passed."""
    return bool(verdicts) and all(v.passed for v in verdicts)


def failing(verdicts: list[GateVerdict]) -> list[str]:
    """Names of the gates that failed, in evaluation order."""
    return [v.gate for v in verdicts if not v.passed]


def ended_without_outcome_words(n: int) -> str:
    """``3 ended without a reported outcome``, or "" for none."""
    return f"{n:,} ended without a reported outcome" if n else ""


def _ratio_gate(gate: str, agree: int, pairs: int, threshold: float, minimum: int, noun: str,
                unknown: str = "") -> GateVerdict:
    """``unknown`` names executions left out of ``pairs`` as neither agreeing nor disagreeing."""
    aside = f"; {unknown}, not counted" if unknown else ""
    value = ratio(agree, pairs, minimum)
    if value is None:
        return GateVerdict(gate, False, None, threshold, INSUFFICIENT_DATA,
                           f"{pairs} {noun}, fewer than {minimum}{aside}")
    passed = value >= threshold
    return GateVerdict(gate, passed, value, threshold, "meets_threshold" if passed else "below_threshold",
                       f"{agree} of {pairs} {noun}{aside}")


def _at_most(gate: str, value: int, limit: int, failure: str, detail: str) -> GateVerdict:
    passed = value <= limit
    return GateVerdict(gate, passed, value, limit, "meets_threshold" if passed else failure, detail)


def local_time(ms: int, zone: str, *, millis: bool = True) -> str:
    """UTC milliseconds as RFC 3339 in ``zone`` with that moment's offset: ``2026-12-02T21:00:00.000+08:00``."""
    moment = datetime.fromtimestamp(ms // 1000, tz=ZoneInfo(zone))
    minutes = int(moment.utcoffset().total_seconds()) // 60  # type: ignore[union-attr]
    offset = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}{f'.{ms % 1000:03d}' if millis else ''}{offset}"


def _raw(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    return None if raw is None or raw.strip() == "" else raw.strip()


def _count(env: Mapping[str, str], name: str, default: int, *, low: int) -> int:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ThresholdError(name, f"must be a whole number, got {raw[:20]!r}") from None
    if value < low:
        raise ThresholdError(name, f"must be at least {low}, got {value}")
    return value


def _ratio(env: Mapping[str, str], name: str, default: float) -> float:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ThresholdError(name, f"must be a number between 0 and 1, got {raw[:20]!r}") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise ThresholdError(name, f"must be between 0 and 1, got {raw[:20]!r}")
    return value


def _kinds(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = _raw(env, name)
    if raw is None:
        return default
    if raw.lower() == "none":
        return ()
    kinds = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    bad = [k for k in kinds if not _KIND.match(k)]
    if bad or not kinds:
        raise ThresholdError(name, f"must be comma-separated mismatch kinds (or 'none'), got {raw[:40]!r}")
    return kinds
