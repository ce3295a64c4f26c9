"""The route a task shell's status callback takes, as the front door decides it (bridge.callbacks.routes)."""

from __future__ import annotations

from bridge.callbacks.routes import SHELL_STATUS_PATH, intercepted_route

SHELL_STATUS = intercepted_route("PUT", SHELL_STATUS_PATH)
assert SHELL_STATUS is not None
