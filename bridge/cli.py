"""The `bridge` command line (click). Bad input: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
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


@main.command()
def serve() -> None:
    """Run the bridge in front of 2.x under gunicorn (configuration: BRIDGE_* variables, see README)."""
    from bridge.bootstrap import build_container
    from bridge.storage.migrate import current_revision, head_revision
    from bridge.web.server import serve as run_server
    from legacy_adapters.reader import LegacyReader

    settings = _settings()
    store = _store(settings)
    try:
        revision, head = current_revision(store.engine), head_revision()
        if settings.legacy_database_path is not None:
            LegacyReader(settings.legacy_database_path).check_is_legacy_database()
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    if revision != head:
        _fail(f"the bridge store is at revision {revision or 'empty'}, not {head}: run `bridge db upgrade` first")
    click.echo(f"bridge: listening on {settings.listen_host}:{settings.listen_port}, forwarding to "
               f"{settings.legacy_url}; shadow: {', '.join(sorted(settings.shadow_origins)) or 'off'}", err=True)
    run_server(settings, build_container)


@main.command()
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the demo writes (default: BRIDGE_DATA_DIR/demo, replaced on each run).")
def demo(workdir: Path | None) -> None:
    """Replay realistic 2.x traffic through a real bridge in front of the 2.x test double."""
    from bridge.demo import run_demo

    settings = _settings()
    try:
        run_demo(workdir or settings.data_dir / "demo", console)
    except (BridgeError, RuntimeError, OSError) as exc:
        _fail(f"demo failed: {exc}", code=1)


if __name__ == "__main__":
    main()
