"""The `bridge` command line (click). Bad input: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from bridge.config import ConfigError, Settings
from bridge.domain.errors import BridgeError

if TYPE_CHECKING:
    from bridge.bootstrap import Store

F = TypeVar("F", bound=Callable[..., Any])
console = Console()


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"bridge: {message}", err=True)
    sys.exit(code)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        _fail(str(exc))
        raise  # unreachable; keeps type checkers honest


def _store(settings: Settings) -> Store:
    from bridge.bootstrap import build_store

    try:
        return build_store(settings)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise


def safe_url(url: str) -> str:
    """The store URL without its password, for output."""
    return make_url(url).render_as_string(hide_password=True)


@click.group()
def main() -> None:
    """ql-bridge: run QingLong 2.x executions through the 3.0 run-state model, side by side."""


@main.group()
def db() -> None:
    """The bridge store's schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Alembic revision to reach.")
def db_upgrade(revision: str) -> None:
    """Create or upgrade the bridge store (never 2.x's database)."""
    from bridge.storage.migrate import upgrade

    settings = _settings()
    store = _store(settings)
    try:
        reached = upgrade(store.engine, revision)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    click.echo(f"bridge store {safe_url(settings.database_url)} is at revision {reached}")


@main.command()
def status() -> None:
    """Show the bridge store's schema revision and what it has recorded."""
    from bridge.storage.summary import summarize

    settings = _settings()
    store = _store(settings)
    try:
        summary = summarize(store.engine)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    console.print(f"store    {safe_url(settings.database_url)} ({summary.backend})")
    state = "up to date" if summary.up_to_date else f"behind head {summary.head}: run `bridge db upgrade`"
    console.print(f"schema   {summary.revision or 'empty'} ({state})")
    console.print(f"shadow   {', '.join(sorted(settings.shadow_origins)) or 'no origin (pure pass-through)'}")
    table = Table("runs by status", "count")
    for name, count in sorted(summary.runs_by_status.items()):
        table.add_row(name, str(count))
    table.add_row("events", str(summary.events))
    console.print(table)
    if not summary.up_to_date:
        sys.exit(1)
