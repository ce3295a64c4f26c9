"""The admin token of the flag endpoint: created once, stored only as a SHA-256 hash, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from bridge.service.flags import FlagService

ADMIN_TOKEN_KEY = "admin_token_sha256"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_admin_token(flags: FlagService) -> str:
    """A fresh random token; the previous one stops working. The caller shows it once."""
    token = secrets.token_urlsafe(32)
    flags.put_setting(ADMIN_TOKEN_KEY, _digest(token))
    return token


def admin_token_configured(flags: FlagService) -> bool:
    return flags.setting(ADMIN_TOKEN_KEY) is not None


def admin_token_matches(flags: FlagService, presented: str | None) -> bool:
    stored = flags.setting(ADMIN_TOKEN_KEY)
    if stored is None or not presented:
        return False
    return hmac.compare_digest(_digest(presented), stored)
