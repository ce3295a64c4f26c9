"""2.x v2.17's ``/open/*`` token check (docs/legacy-2x.md#older-releases): no keyv cache, no i18n.

v2.17 has no ``data/db/keyv.sqlite`` (it arrives in v2.18.0). Its token middleware (``back/loaders/express.ts`` at
v2.17.13) finds the App holding the token in the ``Apps`` table (``OpenService.findTokenByValue``: every App, the
first whose ``tokens`` hold the value) and lets the request through when the path's scope is one of the App's and
the token's ``expiration >= Math.round(Date.now() / 1000)``. Anything else falls through to the panel's
``config/auth.json`` (``token``, or ``tokens[platform]`` as one string), and then to express-jwt's
``UnauthorizedError``, answered ``{code: 401, message}`` in English: ``jwt malformed`` with a token,
``No authorization token was found`` without.

Same contract as ``legacy_adapters.auth.LegacyTokenAuthority`` (``legacy_adapters.ports.OpenTokenCheck``); a
database or file that cannot be read raises LegacyDatabaseError with its state, as the reader does.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from legacy_adapters.auth import extract_token, platform_of
from legacy_adapters.database_state import database_state
from legacy_adapters.errors import LegacyAuthError, LegacyDatabaseError

MESSAGE_MALFORMED = "jwt malformed"  # express-jwt's UnauthorizedError('invalid_token') as v2.17 raises it
MESSAGE_NO_TOKEN = "No authorization token was found"
_CACHE_TTL_S = 1.0
_SCOPE = re.compile(r"/open/([a-z]+)/*")


class AppsTableTokenAuthority:
    """Decides ``/open/*`` requests as v2.17 does, reading ``Apps`` and ``auth.json`` at most once a second."""

    def __init__(self, database_path: str | os.PathLike[str], auth_json_path: str | os.PathLike[str], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.database_path = Path(database_path)
        self.auth_json_path = Path(auth_json_path)
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[dict[str, Any]], dict[str, Any]] | None = None

    def check_open_request(self, path: str, authorization: str | None, now_s: float, *,
                           user_agent: str | None = None) -> None:
        """Return if v2.17 would let the request through; else raise LegacyAuthError with its 401 body."""
        token = extract_token(authorization)
        apps, auth = self._snapshot()
        app = next((a for a in apps if token and any(t.get("value") == token for t in a["tokens"])), None)
        if app is not None:
            entry = next(t for t in app["tokens"] if t.get("value") == token)
            scope = _scope_of(path)
            if scope is not None and scope in app["scopes"] and _at_least(entry.get("expiration"), _round(now_s)):
                return
        if token and (token == auth.get("token") or _platform_token(auth, platform_of(user_agent or "")) == token):
            return
        raise LegacyAuthError(MESSAGE_MALFORMED if token else MESSAGE_NO_TOKEN, "unknown" if token else "missing")

    def invalidate(self) -> None:
        with self._lock:
            self._cached = None

    def _snapshot(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= _CACHE_TTL_S:
                self._cached = (now, self._read_apps(), self._read_auth())
            return self._cached[1], self._cached[2]

    def _read_apps(self) -> list[dict[str, Any]]:
        if not self.database_path.is_file():
            return []
        uri = f"{self.database_path.resolve().as_uri()}?mode=ro"
        try:
            with closing(sqlite3.connect(uri, uri=True, timeout=0.3)) as conn:
                rows = conn.execute('SELECT "scopes", "tokens" FROM "Apps" ORDER BY "id"').fetchall()
        except sqlite3.Error as exc:
            raise LegacyDatabaseError(str(self.database_path), database_state(self.database_path, exc).value) from exc
        return [{"scopes": [s for s in _json_list(scopes) if isinstance(s, str)],
                 "tokens": [t for t in _json_list(tokens) if isinstance(t, dict)]} for scopes, tokens in rows]

    def _read_auth(self) -> dict[str, Any]:
        try:
            value = json.loads(self.auth_json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # fs.readFile failing or safeJSONParse of bad text: no panel token matches
        return value if isinstance(value, dict) else {}


def _scope_of(path: str) -> str | None:
    """The group ``req.path.match`` finds with v2.17's scope pattern (``_SCOPE``, unanchored)."""
    match = _SCOPE.search(path)
    return match.group(1) if match else None


def _round(value: float) -> int:
    return math.floor(value + 0.5)  # Math.round


def _at_least(value: Any, number: int) -> bool:
    """JavaScript ``value >= number`` for a JSON value: undefined or a non-numeric string is NaN (false)."""
    if value is None or isinstance(value, bool):
        return int(value or 0) >= number
    if isinstance(value, int | float):
        return value >= number
    if isinstance(value, str):
        try:
            return float(value.strip() or 0) >= number
        except ValueError:
            return False
    return False


def _platform_token(auth: dict[str, Any], platform: str) -> Any:
    tokens = auth.get("tokens")
    return tokens.get(platform) if isinstance(tokens, dict) else None


def _json_list(text: Any) -> list[Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return []
    return value if isinstance(value, list) else []
