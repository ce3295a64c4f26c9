"""What of a stored mismatch diff a cutover report may show, and which side of it each value belongs to.

``summarize_diff`` keeps only numbers and short identifier-like strings, so no command, token, path or log text
can reach a report even if a diff carried one; ``diff_sides`` then says which value is 2.x's and which the
shadow's. Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bridge.domain.mismatches import CALLBACK_MISMATCH_KINDS, MismatchKind

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
