"""The cutover-report document, schema ``ql-bridge/cutover-report@1`` (reports/README.md): assembly and a check.

Pure: figures and gate verdicts in, a JSON-ready dict with a fixed key order out, each origin opening with the
one sentence an operator decides on. Mismatch diffs pass through ``summarize_diff``, which keeps only short
identifier-like values, so no command, token, path or log text can reach a report even if a diff carried one;
``diff_sides`` then says which value is 2.x's and which the shadow's. Times stay UTC (RFC 3339 and ``*_ms``)
with ``*_local`` siblings in 2.x's zone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from bridge.domain.mismatches import CALLBACK_MISMATCH_KINDS, MismatchKind
from projections.gates import (
    INSUFFICIENT_DATA,
    GateThresholds,
    OriginFigures,
    Window,
    evaluate,
    local_time,
    passes_all,
)

SCHEMA = "ql-bridge/cutover-report@1"
DAY_MS = 86_400_000
NOT_OBSERVABLE = "not observable through callbacks"
RATIO_GATES = ("completeness", "terminal_status_agreement", "exit_code_agreement")
GATE_WORDS = {"completeness": "completeness", "terminal_status_agreement": "status agreement",
              "exit_code_agreement": "exit-code agreement", "no_unexplained_duplicates": "no unexplained duplicates",
              "no_stale_mismatches": "no stale mismatches"}
# An origin's overall verdict. The first three are judgements; the others say why there is none, and are shown
# as neutral, never as a failure.
VERDICT_STATES = ("ready", "not_ready", "bypassed", "insufficient_data", "not_observable", "not_promotable")
REDACTED = "[redacted]"
_SENSITIVE_KEY = re.compile(r"command|cmd|token|secret|passw|auth|cookie|path|env|text|body|output|stdout|stderr|"
                            r"content|script|param|header", re.IGNORECASE)
_SAFE_KEY = re.compile(r"[\w.:\[\]'\" -]{1,64}")
# The only strings a summarized diff keeps: vocabulary words (statuses, kinds), evidence codes made of such
# words, hex digests (log_ref), time-ordered UUIDs (run ids; 2.x tokens are v4 and never match) and UTC times.
_SAFE_VALUES = (
    re.compile(r"[a-z][a-z_]{0,31}"),
    re.compile(r"[a-z][a-z_]{0,31}(:[a-z0-9_]{1,16}){1,5}"),
    re.compile(r"[0-9a-f]{16,64}"),
    re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[167][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"),
    re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z"),
)


def rfc3339(ms: int) -> str:
    """UTC milliseconds as ``YYYY-MM-DDTHH:MM:SS.sssZ``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def day_name(day_number: int) -> str:
    """A UTC day number (ms // 86_400_000) as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day_number * 86_400, tz=UTC).strftime("%Y-%m-%d")


def summarize_diff(diff: Any, depth: int = 0) -> Any:
    """A stored diff (JSON text or data) cut down to numbers and identifier-like strings; the rest is redacted.

    Keys naming commands, tokens, paths, env, bodies or output are dropped with their values."""
    if isinstance(diff, (str, bytes)) and depth == 0:
        try:
            diff = json.loads(diff)
        except ValueError:
            return REDACTED
    if diff is None or isinstance(diff, (bool, int, float)):
        return diff
    if isinstance(diff, str):
        return diff if any(p.fullmatch(diff) for p in _SAFE_VALUES) else REDACTED
    if depth >= 3:
        return "..."
    if isinstance(diff, list):
        return [summarize_diff(item, depth + 1) for item in diff[:8]]
    if isinstance(diff, dict):
        out: dict[str, Any] = {}
        for key in sorted(str(k) for k in diff)[:12]:
            if not _SAFE_KEY.fullmatch(key) or _SENSITIVE_KEY.search(key):
                continue
            out[key] = summarize_diff(diff[key], depth + 1)
        return out
    return REDACTED


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


_DEEPDIFF_PAIRS = ("values_changed", "type_changes")
_DEEPDIFF_ONE_SIDE = {"dictionary_item_added": "shadow", "iterable_item_added": "shadow",
                      "dictionary_item_removed": "legacy", "iterable_item_removed": "legacy"}
# Hand-made diffs whose plain fields describe one side (bridge/jobs/reconcile.py, bridge/service/shadow.py): two
# shadow Runs for one 2.x execution; a 2.x value no rule can judge; the shadow Runs an end callback could close
# (its pid and log digest stay context).
_ONE_SIDED_KINDS: dict[str, str] = {MismatchKind.DUPLICATE.value: "shadow",
                                    MismatchKind.INVALID_LEGACY_VALUE.value: "legacy"}
_SHADOW_FIELDS = frozenset({"candidates", "run_ids"})
_PATH_PART = re.compile(r"\[(?:'([^']*)'|\"([^\"]*)\"|(\d+))\]")


def diff_sides(kind: str, diff: Any) -> dict[str, Any]:
    """A summarized diff split into what 2.x holds (``legacy``), what the shadow holds, and ``context``.

    The reconciler diffs (2.x, shadow) in that order (projections/reconcile.py ``structured_diff``), so
    DeepDiff's old values are 2.x's and its new ones the shadow's; ``{"legacy": ..., "shadow": ...}`` diffs name
    their sides, and None there means that side has nothing (no instance, no Run)."""
    sides: dict[str, Any] = {"legacy": {}, "shadow": {}, "context": {}}
    if not isinstance(diff, dict):
        if diff not in (None, [], ""):
            sides["context"]["diff"] = diff
        return sides
    plain = _ONE_SIDED_KINDS.get(kind, "context")
    for key, value in diff.items():
        if key in _DEEPDIFF_PAIRS and isinstance(value, dict):
            for path, change in value.items():
                if isinstance(change, dict):
                    _put(sides, "legacy", _field(path), change.get("old_value"))
                    _put(sides, "shadow", _field(path), change.get("new_value"))
                else:
                    _put(sides, "context", _field(path), change)
        elif key in _DEEPDIFF_ONE_SIDE and isinstance(value, dict):
            for path, item in value.items():
                _put(sides, _DEEPDIFF_ONE_SIDE[key], _field(path), item)
        elif key in ("legacy", "shadow"):
            if value is None:
                sides[key] = None
            elif isinstance(value, dict):
                for name, item in value.items():
                    _put(sides, key, name, item)
            else:
                _put(sides, key, "state", value)
        elif isinstance(value, dict) and value and set(value) <= {"old", "new"}:
            _put(sides, "legacy", key, value.get("old"))
            _put(sides, "shadow", key, value.get("new"))
        elif kind in CALLBACK_MISMATCH_KINDS and key in _SHADOW_FIELDS:
            _put(sides, "shadow", key, value)
        else:
            _put(sides, plain, key, value)
    return sides


def _put(sides: dict[str, Any], side: str, name: str, value: Any) -> None:
    if sides[side] is not None:
        sides[side][name] = value


def _field(path: str) -> str:
    """DeepDiff's ``root['exit_code']`` as ``exit_code``; any other key as it is."""
    parts = [a or b or c for a, b, c in _PATH_PART.findall(path)]
    return ".".join(parts) if path.startswith("root") and parts else path


def origin_entry(figures: OriginFigures, thresholds: GateThresholds, window: Window, *, mode: str | None,
                 promotable: bool = True, note: str | None = None, seam: str | None = None) -> dict[str, Any]:
    """An observable origin: its verdict sentence, figures, ratios, one verdict per gate, and whether it may go
    primary (never while a seam finding says its callbacks bypass the bridge)."""
    verdicts = evaluate(figures, thresholds, window)
    by_gate = {v.gate: v.value for v in verdicts}
    gates = [v.to_dict() for v in verdicts]
    return {
        "origin": figures.origin,
        "verdict": _verdict(figures, gates, window, thresholds.min_executions, promotable, seam),
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


def _verdict(f: OriginFigures, gates: list[dict[str, Any]], window: Window, minimum: int, promotable: bool,
             seam: str | None) -> dict[str, str]:
    """The one sentence an operator decides on: the state first, then why, then what it rests on."""
    name = f.origin
    ran = f"{_many(f.executions_observed, 'execution')} over {span(window)}"
    problems = _many(sum(f.open_mismatches_by_kind.values()), "open mismatch", "open mismatches")
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
             mismatch_timeline: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """The whole document, keys in the documented order."""
    return {
        "schema": SCHEMA,
        "generated_at": rfc3339(generated_at_ms),
        "generated_at_local": local_time(generated_at_ms, window.zone),
        "time_zone": window.zone,
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


# --- a small structural check (the promotion path and the tests share it) ------------------------------

_NUM = (int, float)
_WINDOW = {"start": str, "end": str, "start_ms": int, "end_ms": int}
_THRESHOLDS = {"min_executions": int, "completeness": _NUM, "terminal_status_agreement": _NUM,
               "exit_code_agreement": _NUM, "max_duplicates": int, "stale_mismatch_kinds": list}
_ORIGIN = {"origin": str, "mode": (str, None), "observable": bool, "note": (str, None), "figures": dict,
           "ratios": dict, "gates": list, "ready_for_primary": bool}
_FIGURES: dict[str, Any] = {
    name: int for name in ("executions_observed", "with_shadow_run", "terminal_pairs", "terminal_status_agree",
                           "exit_code_pairs", "exit_code_agree", "unmatched_callbacks", "ambiguous_callbacks",
                           "duplicates", "stuck_runs", "stale_mismatches", "shadow_write_failures", "runs_created",
                           "legacy_import_excluded")}
_FIGURES.update({"open_mismatches_by_kind": dict, "examples": list})
_COUNTS_BY = ("open_mismatches_by_kind", "resolved_mismatches_by_kind", "expired_mismatches_by_kind",
              "expired_mismatches_by_reason")
_FIGURES_ADDED = dict.fromkeys(_COUNTS_BY[1:], dict)
_RATIOS = {gate: (*_NUM, None) for gate in RATIO_GATES}
_GATE = {"gate": str, "passed": bool, "value": (*_NUM, None), "threshold": _NUM, "reason": str, "detail": str}
_EXAMPLE = {"kind": str, "cron_id": (int, None), "run_id": (str, None), "first_seen_ms": int, "last_seen_ms": int,
            "occurrences": int, "diff": (dict, list, str, *_NUM, bool, None)}
_TIMELINE = {"day": str, "kind": str, "opened": int}
# Fields added within @1: a report written before them lacks them and stays valid; when present they are checked.
_TOP_ADDED = {"generated_at_local": str, "time_zone": str}
_WINDOW_ADDED = {"start_local": str, "end_local": str}
_ORIGIN_ADDED = {"verdict": dict, "seam": (str, None)}
_VERDICT = {"state": str, "sentence": str}
_EXAMPLE_ADDED = {"first_seen_local": str, "last_seen_local": str, "sides": dict}
_SIDES = {"legacy": (dict, None), "shadow": (dict, None), "context": dict}


def check_report(doc: Any) -> list[str]:
    """Problems with a document's shape (missing keys, wrong types); empty when it is a valid @1 report."""
    top = {"schema": str, "generated_at": str, "window": dict, "thresholds": dict, "origins": list,
           "mismatch_timeline": list, "notes": list}
    errors = _check(doc, top, "$", _TOP_ADDED)
    if errors:
        return errors
    if doc["schema"] != SCHEMA:
        errors.append(f"$.schema: expected {SCHEMA!r}, got {doc['schema']!r}")
    errors += _check(doc["window"], _WINDOW, "$.window", _WINDOW_ADDED)
    errors += _check(doc["thresholds"], _THRESHOLDS, "$.thresholds")
    errors += [f"$.notes[{i}]: not a string" for i, n in enumerate(doc["notes"]) if not isinstance(n, str)]
    for i, row in enumerate(doc["mismatch_timeline"]):
        errors += _check(row, _TIMELINE, f"$.mismatch_timeline[{i}]")
    for i, entry in enumerate(doc["origins"]):
        errors += _check_origin(entry, f"$.origins[{i}]")
    return errors


def _check_origin(entry: Any, where: str) -> list[str]:
    errors = _check(entry, _ORIGIN, where, _ORIGIN_ADDED)
    if errors:
        return errors
    if isinstance(entry.get("verdict"), dict):
        errors += _check_verdict(entry["verdict"], entry["ready_for_primary"], f"{where}.verdict")
    errors += _check(entry["figures"], _FIGURES, f"{where}.figures", _FIGURES_ADDED) + _check(
        entry["ratios"], _RATIOS, f"{where}.ratios")
    for i, gate in enumerate(entry["gates"]):
        errors += _check(gate, _GATE, f"{where}.gates[{i}]")
    for i, ex in enumerate(entry["figures"].get("examples", []) if isinstance(entry["figures"], dict) else []):
        errors += _check(ex, _EXAMPLE, f"{where}.figures.examples[{i}]", _EXAMPLE_ADDED)
        if isinstance(ex, dict) and isinstance(ex.get("sides"), dict):
            errors += _check(ex["sides"], _SIDES, f"{where}.figures.examples[{i}].sides")
    for name in _COUNTS_BY:
        counts = entry["figures"].get(name, {})
        if isinstance(counts, dict):
            errors += [f"{where}.figures.{name}.{k}: not a count" for k, v in counts.items() if not _is(v, int)]
    return errors


def _check_verdict(verdict: dict[str, Any], ready: bool, where: str) -> list[str]:
    errors = _check(verdict, _VERDICT, where)
    state = verdict.get("state")
    if isinstance(state, str) and state not in VERDICT_STATES:
        errors.append(f"{where}.state: unknown state {state!r}")
    elif isinstance(state, str) and (state == "ready") != ready:
        errors.append(f"{where}.state: {state!r} while ready_for_primary is {str(ready).lower()}")
    return errors


def _check(value: Any, spec: Mapping[str, Any], where: str, added: Mapping[str, Any] | None = None) -> list[str]:
    """``spec`` keys must be there with their types; ``added`` keys (fields added within @1) may be absent."""
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    errors = [f"{where}.{key}: missing" for key in spec if key not in value]
    for key, expected in {**spec, **(added or {})}.items():
        if key in value and not _is(value[key], expected):
            errors.append(f"{where}.{key}: wrong type {type(value[key]).__name__}")
    return errors


def _is(value: Any, expected: Any) -> bool:
    options = expected if isinstance(expected, tuple) else (expected,)
    for option in options:
        if option is None and value is None:
            return True
        if option is bool and isinstance(value, bool):
            return True
        if option is not None and option is not bool and isinstance(value, option) and not isinstance(value, bool):
            return True
    return False


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)

