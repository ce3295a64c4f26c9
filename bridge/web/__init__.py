"""The bridge's HTTP face: thin views for the byte-faithful pass-through to 2.x, /v3, /livez, /readyz, /metrics,
the admin endpoints, and the uvicorn server that hosts them (ASGI front door: ``bridge.web.asgi``).

Build it with ``bridge.web.app.create_app(container)``; views reach the container (built by
``bridge.bootstrap``) via ``current_container()``. May import everything below it; only ``bridge.cli`` imports
it.
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
