"""Identifiers: UUIDv7 strings (docs/run-state.md#identifiers-and-time). Ordering never relies on them."""

from __future__ import annotations

import uuid6


def new_id() -> str:
    return str(uuid6.uuid7())
