"""2.x's ``/open/*`` token check (docs/legacy-2x.md#authentication), answered from ``data/db/keyv.sqlite``.

2.x reads its Keyv cache, not the ``Apps`` table, so this does too (docs/legacy-2x.md#auth-reads-the-cache: never
diverge from it).

The 401 messages are in 2.x's own language. v2.21.0's ``t()`` (back/shared/i18n.ts) ignores the
request (no Accept-Language): it translates into the HTTP worker's ``currentLang``, which initData sets
before Express listens from the system setting ``lang`` or, when that is unset, ``systemLang()`` (the Node
process's Intl locale: "en" or "zh"), and the language API changes at runtime. Every such ``setLang``
also writes the resolved value to the Keyv row ``keyv:lang``, so that row is what 2.x answers in, the
fallback included; the bridge cannot recompute ``systemLang()`` (it depends on 2.x's Node build and
environment). Without the row (2.x releases before v2.21.0 have no i18n) the answer is 2.x's default,
Chinese. Only exactly "en" translates.

A keyv file that cannot be read (locked, a hot journal a killed writer left, damaged) raises
LegacyDatabaseError with the file's state (``DatabaseState``), as 2.x's database does: the caller decides
what to do without the check (primary mode forwards the callback to 2.x, which checks the token itself).
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

from legacy_adapters.database_state import database_state
from legacy_adapters.errors import LegacyAuthError, LegacyDatabaseError

MESSAGE_LOGIN_FIRST = "请先登录"  # "please log in first"
MESSAGE_TOKEN_EXPIRED = "Token 已失效"  # "token expired"
MESSAGE_NO_PERMISSION = "暂无权限"  # "no permission"
# messages.en of back/shared/i18n.ts for the keys above; t() returns the key itself otherwise.
ENGLISH = {
    MESSAGE_LOGIN_FIRST: "Please login first",
    MESSAGE_TOKEN_EXPIRED: "Token expired",
    MESSAGE_NO_PERMISSION: "Access denied",
}
DEFAULT_LANG = "zh"  # i18n.ts: let currentLang = 'zh'

_SCOPE = re.compile(r"/open/([a-z]+)/*")  # req.path.match(/\/open\/([a-z]+)\/*/), unanchored
_CACHE_TTL_S = 1.0


def extract_token(authorization: str | None) -> str:
    """2.x ``getToken``: only a ``Bearer`` scheme counts; each prefix is removed once (JS replace)."""
    if not authorization or authorization.split(" ")[0] != "Bearer":
        return ""
    return authorization.replace("Bearer ", "", 1).replace("mobile-", "", 1).replace("desktop-", "", 1)


def platform_of(user_agent: str) -> str:
    """2.x ``getPlatform``: "mobile" or "desktop" from a User-Agent, as used for authInfo.tokens."""
    ua = user_agent.lower()
    if re.search(r"windows|win32|win64|wow32|wow64|macintosh|macintel|x11", ua):
        return "desktop"
    if re.search(r"android|adr|ios|iphone|ipad|ipod|iwatch|openharmony|mobile", ua):
        return "mobile"
    return "desktop"


def translate(message: str, lang: str) -> str:
    """2.x ``t(key)`` in the language ``lang``: English only for exactly "en" and a known key."""
    return ENGLISH.get(message, message) if lang == "en" else message


def _js_round(value: float) -> int:
    return math.floor(value + 0.5)  # Math.round: halves go up, also for negatives


_UNDEFINED = object()
_JS_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _js_less_than(value: Any, number: int) -> bool:
    """JavaScript ``value < number`` for a JSON value: null is 0, a numeric string its number, and an
    absent (undefined) or non-numeric value is NaN, which is never less (so such a token never expires)."""
    if value is None or isinstance(value, bool):
        return int(value or 0) < number
    if isinstance(value, (int, float)):
        return value < number
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0 < number
        return bool(_JS_DECIMAL.fullmatch(text)) and float(text) < number
    return False


def _panel_tokens(auth_info: dict[str, Any], platform: str) -> list[str]:
    # authInfo.token is the last login; tokens[platform] is a list (older: one string) whose
    # items are strings or {value, timestamp, ...} objects.
    found = [auth_info.get("token")]
    per_platform = (auth_info.get("tokens") or {}).get(platform)
    items = per_platform if isinstance(per_platform, list) else [per_platform]
    found += [i.get("value") if isinstance(i, dict) else i for i in items]
    return [t for t in found if isinstance(t, str) and t]


class LegacyTokenAuthority:
    """Decides ``/open/*`` requests as 2.x would, reading the keyv file at most once a second."""

    def __init__(self, keyv_path: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.keyv_path = Path(keyv_path)
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Any], dict[str, Any], str] | None = None

    def check_open_request(
        self, path: str, authorization: str | None, now_s: float, *, user_agent: str | None = None
    ) -> None:
        """Return if 2.x would let the request through. Raises LegacyAuthError (2.x's 401 body), or
        LegacyDatabaseError (its ``reason`` a DatabaseState value) when keyv.sqlite cannot be read."""
        token = extract_token(authorization)
        apps, auth_info, lang = self._snapshot()
        app, entry = self._find_app_token(apps, token)
        if app is not None:
            match = _SCOPE.search(path)
            if not match or match.group(1) not in (app.get("scopes") or []):
                raise LegacyAuthError(translate(MESSAGE_NO_PERMISSION, lang), "scope")
            if _js_less_than(entry.get("expiration", _UNDEFINED), _js_round(now_s)):
                raise LegacyAuthError(translate(MESSAGE_TOKEN_EXPIRED, lang), "expired")
            return
        if not token:
            raise LegacyAuthError(translate(MESSAGE_LOGIN_FIRST, lang), "missing")
        # Fall-through: a panel token passes on /open/* too, without JWT verification.
        if token in _panel_tokens(auth_info, platform_of(user_agent or "")):
            return
        raise LegacyAuthError(translate(MESSAGE_TOKEN_EXPIRED, lang), "unknown")

    def language(self) -> str:
        """The language 2.x answers in now ("en", "zh", ...), as its ``keyv:lang`` row says."""
        return self._snapshot()[2]

    @staticmethod
    def _find_app_token(apps: list[Any], token: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        if not token:
            return None, {}
        for app in apps:
            for entry in (app.get("tokens") or []) if isinstance(app, dict) else []:
                if isinstance(entry, dict) and entry.get("value") == token:
                    return app, entry
        return None, {}

    def _snapshot(self) -> tuple[list[Any], dict[str, Any], str]:
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= _CACHE_TTL_S:
                self._cached = (now, *self._read_keyv())
            return self._cached[1], self._cached[2], self._cached[3]

    def _read_keyv(self) -> tuple[list[Any], dict[str, Any], str]:
        # A missing cache file means 2.x would know no token either.
        if not self.keyv_path.is_file():
            return [], {}, DEFAULT_LANG
        uri = f"{self.keyv_path.resolve().as_uri()}?mode=ro"
        try:
            with closing(sqlite3.connect(uri, uri=True, timeout=0.3)) as conn:
                rows = dict(conn.execute(
                    "SELECT key, value FROM keyv WHERE key IN ('keyv:apps', 'keyv:authInfo', 'keyv:lang')"))
        except sqlite3.Error as exc:
            raise LegacyDatabaseError(str(self.keyv_path), database_state(self.keyv_path, exc).value) from exc
        apps = _keyv_value(rows.get("keyv:apps"))
        auth_info = _keyv_value(rows.get("keyv:authInfo"))
        lang = _keyv_value(rows.get("keyv:lang"))
        return (apps if isinstance(apps, list) else [], auth_info if isinstance(auth_info, dict) else {},
                lang if isinstance(lang, str) else DEFAULT_LANG)

    def invalidate(self) -> None:
        """Forget the cached keyv contents so the next check re-reads the file."""
        with self._lock:
            self._cached = None


def _keyv_value(raw: str | None) -> Any:
    # Keyv stores {"value": <data>, "expires": <ms or null>} serialized with json-buffer.
    if not raw:
        return None
    try:
        envelope = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(envelope, dict):
        return None
    expires = envelope.get("expires")
    if isinstance(expires, (int, float)) and expires < time.time() * 1000:
        return None  # Keyv drops an expired entry on read
    return envelope.get("value")
