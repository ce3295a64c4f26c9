"""The cutover-report document, schema ``ql-bridge/cutover-report@1`` (reports/README.md): assembly and a check.

Pure: figures and gate verdicts in, a JSON-ready dict with a fixed key order out. Mismatch diffs pass through
``summarize_diff``, which keeps only short identifier-like values, so no command, token, path or log text
can reach a report even if a diff carried one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from projections.gates import GateThresholds, OriginFigures, Window, evaluate, passes_all

SCHEMA = "ql-bridge/cutover-report@1"
DAY_MS = 86_400_000
NOT_OBSERVABLE = "not observable through callbacks"
RATIO_GATES = ("completeness", "terminal_status_agreement", "exit_code_agreement")
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


def example(row: Mapping[str, Any]) -> dict[str, Any]:
    """One mismatch row as a report example: ids, times and the summarized diff only."""
    return {
        "kind": str(row["kind"]),
        "cron_id": _int_or_none(row.get("legacy_cron_id")),
        "run_id": row.get("run_id"),
        "first_seen_ms": int(row["first_seen_ms"]),
        "last_seen_ms": int(row.get("last_seen_ms") or row["first_seen_ms"]),
        "occurrences": int(row.get("occurrences") or 1),
        "diff": summarize_diff(row.get("diff")),
    }


def origin_entry(figures: OriginFigures, thresholds: GateThresholds, window: Window, *, mode: str | None,
                 promotable: bool = True, note: str | None = None) -> dict[str, Any]:
    """An observable origin: figures, ratios, one verdict per gate, and whether it may go primary."""
    verdicts = evaluate(figures, thresholds, window)
    by_gate = {v.gate: v.value for v in verdicts}
    return {
        "origin": figures.origin,
        "mode": mode,
        "observable": True,
        "note": note,
        "figures": figures.to_dict(),
        "ratios": {gate: by_gate[gate] for gate in RATIO_GATES},
        "gates": [v.to_dict() for v in verdicts],
        "ready_for_primary": promotable and passes_all(verdicts),
    }


def unobservable_entry(origin: str, *, mode: str | None, reason: str = NOT_OBSERVABLE) -> dict[str, Any]:
    """An origin 2.x runs without status callbacks: no figures to judge, never ready for primary."""
    return {
        "origin": origin,
        "mode": mode,
        "observable": False,
        "note": reason,
        "figures": OriginFigures(origin).to_dict(),
        "ratios": dict.fromkeys(RATIO_GATES),
        "gates": [],
        "ready_for_primary": False,
    }


def timeline(rows: Iterable[tuple[int, str, int]]) -> list[dict[str, Any]]:
    """(day number, kind, opened) rows as timeline entries, ordered by day then kind."""
    return [{"day": day_name(day), "kind": kind, "opened": int(n)} for day, kind, n in sorted(rows)]


def assemble(*, generated_at_ms: int, window: Window, thresholds: GateThresholds, origins: list[dict[str, Any]],
             mismatch_timeline: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """The whole document, keys in the documented order."""
    return {
        "schema": SCHEMA,
        "generated_at": rfc3339(generated_at_ms),
        "window": {"start": rfc3339(window.start_ms), "end": rfc3339(window.end_ms),
                   "start_ms": window.start_ms, "end_ms": window.end_ms},
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
_FIGURES = {name: int for name in ("executions_observed", "with_shadow_run", "terminal_pairs", "terminal_status_agree",
                                   "exit_code_pairs", "exit_code_agree", "unmatched_callbacks", "ambiguous_callbacks",
                                   "duplicates", "stuck_runs", "stale_mismatches", "shadow_write_failures",
                                   "runs_created", "legacy_import_excluded")}
_FIGURES.update({"open_mismatches_by_kind": dict, "examples": list})
_RATIOS = {gate: (*_NUM, None) for gate in RATIO_GATES}
_GATE = {"gate": str, "passed": bool, "value": (*_NUM, None), "threshold": _NUM, "reason": str, "detail": str}
_EXAMPLE = {"kind": str, "cron_id": (int, None), "run_id": (str, None), "first_seen_ms": int, "last_seen_ms": int,
            "occurrences": int, "diff": (dict, list, str, *_NUM, bool, None)}
_TIMELINE = {"day": str, "kind": str, "opened": int}


def check_report(doc: Any) -> list[str]:
    """Problems with a document's shape (missing keys, wrong types); empty when it is a valid @1 report."""
    top = {"schema": str, "generated_at": str, "window": dict, "thresholds": dict, "origins": list,
           "mismatch_timeline": list, "notes": list}
    errors = _check(doc, top, "$")
    if errors:
        return errors
    if doc["schema"] != SCHEMA:
        errors.append(f"$.schema: expected {SCHEMA!r}, got {doc['schema']!r}")
    errors += _check(doc["window"], _WINDOW, "$.window") + _check(doc["thresholds"], _THRESHOLDS, "$.thresholds")
    errors += [f"$.notes[{i}]: not a string" for i, n in enumerate(doc["notes"]) if not isinstance(n, str)]
    for i, row in enumerate(doc["mismatch_timeline"]):
        errors += _check(row, _TIMELINE, f"$.mismatch_timeline[{i}]")
    for i, entry in enumerate(doc["origins"]):
        errors += _check_origin(entry, f"$.origins[{i}]")
    return errors


def _check_origin(entry: Any, where: str) -> list[str]:
    errors = _check(entry, _ORIGIN, where)
    if errors:
        return errors
    errors += _check(entry["figures"], _FIGURES, f"{where}.figures") + _check(entry["ratios"], _RATIOS,
                                                                              f"{where}.ratios")
    for i, gate in enumerate(entry["gates"]):
        errors += _check(gate, _GATE, f"{where}.gates[{i}]")
    for i, ex in enumerate(entry["figures"].get("examples", []) if isinstance(entry["figures"], dict) else []):
        errors += _check(ex, _EXAMPLE, f"{where}.figures.examples[{i}]")
    counts = entry["figures"].get("open_mismatches_by_kind", {})
    if isinstance(counts, dict):
        errors += [f"{where}.figures.open_mismatches_by_kind.{k}: not a count" for k, v in counts.items()
                   if not _is(v, int)]
    return errors


def _check(value: Any, spec: Mapping[str, Any], where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    errors = [f"{where}.{key}: missing" for key in spec if key not in value]
    for key, expected in spec.items():
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

