"""Identifiers: UUIDv7 strings (ADR-0001 5.1). Ordering never relies on them."""

from __future__ import annotations

import uuid6


def new_id() -> str:
    return str(uuid6.uuid7())
