"""The bridge's HTTP face: the byte-faithful pass-through to 2.x, /healthz and /metrics.

Build it with ``bridge.web.app.create_app(container)``; views reach the container via ``current_container()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import current_app

if TYPE_CHECKING:
    from bridge.bootstrap import Container

EXTENSION = "bridge"


def current_container() -> Container:
    """The Container of the app that is handling the current request."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
