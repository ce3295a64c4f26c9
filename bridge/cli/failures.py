"""How a command fails: one line naming its cause and its target, never a traceback.

`CommandFailedError` is a refusal a command words itself. `failure_line` words the rest: a configuration
error, an OS error (with its file), a bridge error (with its code) and a failure of the bridge store
(`bridge.storage.errors.describe_store_failure`, which names the store and the driver's cause).
"""

from __future__ import annotations

from bridge.config import ConfigError, Settings
from bridge.domain.errors import BridgeError, StorageError
from bridge.storage.errors import STORE_FAILURES, describe_store_failure


class CommandFailedError(Exception):
    """A refusal a command words itself: ``line`` is all that is printed, ``exit_code`` the exit status."""

    def __init__(self, line: str, exit_code: int = 2) -> None:
        super().__init__(line)
        self.line = line
        self.exit_code = exit_code


# What `failure_line` words; anything else is click's own (a usage error) or a bug, and shows as one.
WORDED_FAILURES: tuple[type[Exception], ...] = (BridgeError, ConfigError, OSError, *STORE_FAILURES)


def failure_line(exc: BaseException) -> str:
    """One line for a failure: its code or kind, the cause, and the target (the store, a file)."""
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, OSError):
        target = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}{target}"
    if isinstance(exc, BridgeError) and not isinstance(exc, StorageError):
        return f"{exc.code}: {exc.message}"
    try:
        database_url = Settings.from_env().database_url
    except ConfigError as unreadable:  # the line names the store, so it needs the settings that name it
        return str(unreadable)
    failure = describe_store_failure(exc, database_url)
    return failure.line if failure is not None else f"{type(exc).__name__}: {exc}"
