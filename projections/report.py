"""The cutover-report document (``projections.report_schema``): figures and gate verdicts in, a JSON-ready dict out.

Pure. Keys keep a fixed order and each origin opens with the one sentence an operator decides on. Mismatch
examples carry their diffs through ``projections.report_redaction``. Times stay UTC (RFC 3339 and ``*_ms``) with
``*_local`` siblings in 2.x's zone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from bridge.domain.mismatches import MismatchKind
from projections.gates import (
    INSUFFICIENT_DATA,
    GateThresholds,
    OpenMismatchWeight,
    OriginFigures,
    Window,
    ended_without_outcome_words,
    evaluate,
    local_time,
    passes_all,
    weigh_open_mismatches,
)
from projections.report_redaction import diff_sides, summarize_diff
from projections.report_schema import RATIO_GATES, SCHEMA

DAY_MS = 86_400_000
NOT_OBSERVABLE = "not observable through callbacks"
GATE_WORDS = {"completeness": "completeness", "terminal_status_agreement": "status agreement",
              "exit_code_agreement": "exit-code agreement", "no_unexplained_duplicates": "no unexplained duplicates",
              "no_stale_mismatches": "no stale mismatches"}


def rfc3339(ms: int) -> str:
    """UTC milliseconds as ``YYYY-MM-DDTHH:MM:SS.sssZ``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def day_name(day_number: int) -> str:
    """A UTC day number (ms // 86_400_000) as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day_number * 86_400, tz=UTC).strftime("%Y-%m-%d")


def example(row: Mapping[str, Any], zone: str = "UTC") -> dict[str, Any]:
    """One mismatch row as a report example: ids, times (UTC, and local to ``zone``), the summarized diff and
    its sides."""
    first = int(row["first_seen_ms"])
    last = int(row.get("last_seen_ms") or first)
    kind, diff = str(row["kind"]), summarize_diff(row.get("diff"))
    return {
        "kind": kind,
        "cron_id": _int_or_none(row.get("legacy_cron_id")),
        "run_id": row.get("run_id"),
        "first_seen_ms": first,
        "last_seen_ms": last,
        "first_seen_local": local_time(first, zone),
        "last_seen_local": local_time(last, zone),
        "occurrences": int(row.get("occurrences") or 1),
        "diff": diff,
        "sides": diff_sides(kind, diff),
    }


def origin_entry(figures: OriginFigures, thresholds: GateThresholds, window: Window, *, mode: str | None,
                 promotable: bool = True, note: str | None = None, seam: str | None = None) -> dict[str, Any]:
    """An observable origin: its verdict sentence, figures, ratios, one verdict per gate, and whether it may go
    primary (never while a seam finding says its callbacks bypass the bridge)."""
    verdicts = evaluate(figures, thresholds, window)
    by_gate = {v.gate: v.value for v in verdicts}
    gates = [v.to_dict() for v in verdicts]
    return {
        "origin": figures.origin,
        "verdict": _verdict(figures, gates, window, thresholds, promotable, seam),
        "mode": mode,
        "observable": True,
        "note": note,
        "figures": figures.to_dict(),
        "ratios": {gate: by_gate[gate] for gate in RATIO_GATES},
        "gates": gates,
        "ready_for_primary": promotable and seam is None and passes_all(verdicts),
        "seam": seam,
    }


def unobservable_entry(origin: str, *, mode: str | None, reason: str = NOT_OBSERVABLE) -> dict[str, Any]:
    """An origin 2.x runs without status callbacks: no figures to judge, never ready for primary."""
    return {
        "origin": origin,
        "verdict": {"state": "not_observable", "sentence": f"{origin}: {reason}, so never promoted"},
        "mode": mode,
        "observable": False,
        "note": reason,
        "figures": OriginFigures(origin).to_dict(),
        "ratios": dict.fromkeys(RATIO_GATES),
        "gates": [],
        "ready_for_primary": False,
        "seam": None,
    }


def _verdict(f: OriginFigures, gates: list[dict[str, Any]], window: Window, thresholds: GateThresholds,
             promotable: bool, seam: str | None) -> dict[str, str]:
    """The one sentence an operator decides on: the state first, then why, then what it rests on."""
    name, minimum = f.origin, thresholds.min_executions
    ran = f"{_many(f.executions_observed, 'execution')} over {span(window)}"
    unknown = ended_without_outcome_words(f.ended_without_outcome)
    ran += f" ({unknown})" if unknown else ""
    problems = open_mismatch_words(f, thresholds)
    unplaced = f.unmatched_callbacks + f.ambiguous_callbacks
    problems += f", {_many(unplaced, 'unplaced callback')}" if unplaced else ""
    failing = [g for g in gates if not g["passed"]]
    judged = [g for g in failing if g["reason"] != INSUFFICIENT_DATA]
    unjudged = [GATE_WORDS.get(g["gate"], g["gate"]) for g in failing if g["reason"] == INSUFFICIENT_DATA]
    if seam:
        lead = seam if seam.startswith(f"{name}: ") else f"{name}: {seam}"
        return {"state": "bypassed", "sentence": f"{lead} — not ready for primary; {ran}, {problems}"}
    if not promotable:
        return {"state": "not_promotable", "sentence": f"{name}: not an origin to promote — {ran}, {problems}"}
    if gates and not failing:
        return {"state": "ready", "sentence": f"{name}: ready for primary — {ran}, {problems}"}
    if judged or not gates:
        why = ", ".join(_failure(g) for g in judged) or "no gate was evaluated"
        why += f"; too little data to judge {', '.join(unjudged)}" if unjudged else ""
        return {"state": "not_ready", "sentence": f"{name}: not ready for primary — {why}; {ran}, {problems}"}
    return {"state": "insufficient_data",
            "sentence": f"{name}: insufficient data — {ran}{_shortfall(f, minimum)}; {problems}"}


def open_mismatch_words(f: OriginFigures, thresholds: GateThresholds) -> str:
    """The open mismatches, how many count against the gates and why the rest do not: ``108 open mismatches,
    none counting against the gates (108 missing, which the gates judge afresh per execution: …)``."""
    w = weigh_open_mismatches(f, thresholds)
    head = _many(w.total, "open mismatch", "open mismatches")
    if not w.total:
        return head
    kinds = "/".join(w.stale_kinds)
    against = []
    if w.duplicates:
        against.append(f"{w.duplicates:,} duplicate")
    if w.stale:
        against.append(f"{w.stale:,} {kinds} first seen before the window")
    spared = []
    if w.judged_afresh:
        spared.append(f"{_by_kind(w.judged_afresh)}, which the gates judge afresh per execution{_missing_now(f, w)}")
    if w.not_yet_stale:
        spared.append(f"{w.not_yet_stale:,} {kinds} first seen inside the window, not yet stale")
    if w.ungated:
        spared.append(f"{_by_kind(w.ungated)}, which no gate reads")
    if not against:
        return f"{head}, none counting against the gates ({'; '.join(spared)})"
    if not spared:
        return f"{head}, all counting against the gates ({', '.join(against)})"
    return (f"{head}, {w.against_gates:,} counting against the gates ({', '.join(against)}) and "
            f"{w.total - w.against_gates:,} not ({'; '.join(spared)})")


def _missing_now(f: OriginFigures, w: OpenMismatchWeight) -> str:
    """What the scan found afresh of the executions ``missing`` findings are about: whether any still lacks a
    Run (completeness counts those), or none does (a reconcile pass that judges them again closes them)."""
    if MismatchKind.MISSING.value not in w.judged_afresh:
        return ""
    without_run = f.executions_observed - f.with_shadow_run
    if without_run:
        return f": completeness counts the {_many(without_run, 'execution')} in the window without a Run"
    imported = f", {f.legacy_import_excluded:,} of them imported from 2.x history" if f.legacy_import_excluded else ""
    return f": no execution in the window lacks a Run now{imported}"


def _by_kind(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n:,} {kind}" for kind, n in counts.items())


def _failure(gate: Mapping[str, Any]) -> str:
    if gate["gate"] in RATIO_GATES and gate["value"] is not None:
        return (f"{GATE_WORDS[gate['gate']]} {percent(gate['value'], gate['threshold'])} is below "
                f"{percent(gate['threshold'])} ({gate['detail']})")
    if gate["reason"] == "duplicates_found":
        return f"{gate['detail']}, at most {gate['threshold']} allowed"
    return gate["detail"] or f"{GATE_WORDS.get(gate['gate'], gate['gate'])} failed"


def _shortfall(f: OriginFigures, minimum: int) -> str:
    if f.executions_observed < minimum:
        return f", fewer than the {minimum} needed to judge"
    if f.terminal_pairs < minimum:
        return f" but only {f.terminal_pairs:,} ended with a shadow Run to compare, fewer than the {minimum} needed"
    return f" but only {f.exit_code_pairs:,} with a 2.x exit code to compare, fewer than the {minimum} needed"


def _many(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def span(window: Window) -> str:
    """The window's length in words: ``7 days``, ``36 hours``, ``90 minutes``."""
    ms = window.end_ms - window.start_ms
    unit_ms, unit = next(((u, name) for u, name in ((DAY_MS, "day"), (3_600_000, "hour")) if ms >= 2 * u),
                         (60_000, "minute"))
    amount = f"{ms / unit_ms:.1f}".removesuffix(".0")
    return f"{amount} {unit}{'' if amount == '1' else 's'}"


def percent(value: float | None, *neighbours: float | None) -> str:
    """A ratio as a percentage with 2 decimals, or 3–4 where 2 would read as 100% or as a neighbouring figure
    (its threshold) that it is not: 0.98999 against 0.99 is 98.999%, never 99.00%."""
    if value is None:
        return "–"
    others = [n for n in (1.0, *neighbours) if n is not None and n != value]
    for places in (2, 3, 4):
        text = f"{value * 100:.{places}f}"
        if all(text != f"{n * 100:.{places}f}" for n in others):
            break
    return f"{text}%"


def timeline(rows: Iterable[tuple[int, str, int]]) -> list[dict[str, Any]]:
    """(day number, kind, opened) rows as timeline entries, ordered by day then kind."""
    return [{"day": day_name(day), "kind": kind, "opened": int(n)} for day, kind, n in sorted(rows)]


def assemble(*, generated_at_ms: int, window: Window, thresholds: GateThresholds, origins: list[dict[str, Any]],
             mismatch_timeline: list[dict[str, Any]], notes: list[str],
             legacy_release: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole document, keys in the documented order; ``legacy_release``: the 2.x release measured
    (``release_header``), None when it was not decided."""
    return {
        "schema": SCHEMA,
        "generated_at": rfc3339(generated_at_ms),
        "generated_at_local": local_time(generated_at_ms, window.zone),
        "time_zone": window.zone,
        "legacy_release": legacy_release,
        "window": {"start": rfc3339(window.start_ms), "end": rfc3339(window.end_ms),
                   "start_ms": window.start_ms, "end_ms": window.end_ms,
                   "start_local": local_time(window.start_ms, window.zone),
                   "end_local": local_time(window.end_ms, window.zone)},
        "thresholds": thresholds.to_dict(),
        "origins": origins,
        "mismatch_timeline": mismatch_timeline,
        "notes": list(notes),
    }


def to_json(report: Mapping[str, Any]) -> str:
    """Deterministic text: insertion order (the documented order), two-space indent, UTF-8 kept."""
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"



def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)

