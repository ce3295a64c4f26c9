"""The cutover report's schema name, ``ql-bridge/cutover-report@1`` (reports/README.md), and a structural check of a
document against it (the promotion path and the tests share it). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA = "ql-bridge/cutover-report@1"
RATIO_GATES = ("completeness", "terminal_status_agreement", "exit_code_agreement")
# An origin's overall verdict. The first three are judgements; the others say why there is none, and are shown
# as neutral, never as a failure.
VERDICT_STATES = ("ready", "not_ready", "bypassed", "insufficient_data", "not_observable", "not_promotable")

# The document's shape: key -> type (a tuple: any of them; None: null).
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
_FIGURES_ADDED: dict[str, Any] = {**dict.fromkeys(_COUNTS_BY[1:], dict), "ended_without_outcome": int}
_RATIOS = {gate: (*_NUM, None) for gate in RATIO_GATES}
_GATE = {"gate": str, "passed": bool, "value": (*_NUM, None), "threshold": _NUM, "reason": str, "detail": str}
_EXAMPLE = {"kind": str, "cron_id": (int, None), "run_id": (str, None), "first_seen_ms": int, "last_seen_ms": int,
            "occurrences": int, "diff": (dict, list, str, *_NUM, bool, None)}
_TIMELINE = {"day": str, "kind": str, "opened": int}
# Fields added within @1: a report written before them lacks them and stays valid; when present they are checked.
_TOP_ADDED = {"generated_at_local": str, "time_zone": str, "legacy_release": (dict, None)}
_RELEASE = {"name": str, "line": str, "patch": (int, None), "evidence": str}
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
    if isinstance(doc.get("legacy_release"), dict):
        errors += _check(doc["legacy_release"], _RELEASE, "$.legacy_release")
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
