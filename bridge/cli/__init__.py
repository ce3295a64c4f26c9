"""The `ql-bridge` command line: ``commands`` wires click (the entry point ``main``); each command group's work
is a module of its own beside it. ``ENVIRONMENT`` is what each command reads from the environment."""

from __future__ import annotations

from bridge.cli.commands import main
from bridge.cli.environment import ENVIRONMENT

__all__ = ["ENVIRONMENT", "main"]
