"""`/bridge/flags`: the operator's flag endpoint, behind the admin token (hashed at rest, constant-time compare)."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, jsonify, request

from bridge.domain.errors import BridgeError
from bridge.service.admin import admin_token_configured, admin_token_matches
from bridge.service.flags import FlagService
from bridge.service.queries import InvalidQueryError
from bridge.web import current_container

admin = Blueprint("admin", __name__, url_prefix="/bridge")
AUDIT_DEFAULT, AUDIT_MAX = 20, 200
_WHOLE = re.compile(r"[0-9]{1,9}")


class AdminDisabledError(BridgeError):
    code = "ADMIN_DISABLED"


class AdminUnauthorizedError(BridgeError):
    code = "ADMIN_UNAUTHORIZED"


def _flags() -> FlagService:
    flags = current_container().flags
    if flags is None or not admin_token_configured(flags):
        raise AdminDisabledError("the admin endpoint is off until `bridge flags admin-token` creates a token")
    presented = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not admin_token_matches(flags, presented):
        raise AdminUnauthorizedError("a valid admin token is required")
    return flags


@admin.get("/flags")
def show_flags() -> Response:
    flags = _flags()
    audit = [_change(c) for c in flags.audit(limit=_audit_limit(request.args.get("audit")))]
    return jsonify({"modes": {o: m.value for o, m in flags.modes().items()}, "audit": audit})


@admin.put("/flags/<origin>")
def set_flag(origin: str) -> Response:
    flags = _flags()
    body = _json_object()
    change = flags.set_mode(origin, str(body.get("mode", "")), actor=str(body.get("actor", "")),
                            reason=str(body.get("reason", "")))
    return jsonify(_change(change))


def _json_object() -> dict[str, Any]:
    """The body if it is a JSON object, else {} (which set_mode then refuses, naming the missing field)."""
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than Python's parser goes: no flag change either
        body = None
    return body if isinstance(body, dict) else {}


def _audit_limit(raw: str | None) -> int:
    """``?audit=N``: how many audit rows, newest first. Raises InvalidQueryError outside 1..AUDIT_MAX."""
    if raw is None or raw == "":
        return AUDIT_DEFAULT
    if not _WHOLE.fullmatch(raw) or not 1 <= int(raw) <= AUDIT_MAX:
        raise InvalidQueryError("audit", f"must be a whole number from 1 to {AUDIT_MAX}")
    return int(raw)


def _change(change: Any) -> dict[str, Any]:
    return {"origin": change.origin, "old": change.old, "new": change.new, "actor": change.actor,
            "reason": change.reason, "at_ms": change.at_ms}
