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
    from bridge.bootstrap import build_flags
    from bridge.projector import projection_status
    from bridge.storage.summary import summarize

    settings = _settings()
    store = _store(settings)
    modes, outbox = "", None
    try:
        summary = summarize(store.engine)
        if summary.up_to_date:
            modes = ", ".join(f"{o}={m.value}" for o, m in build_flags(store).modes().items() if m.value != "off")
            outbox = projection_status(store.engine)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    console.print(f"store    {safe_url(settings.database_url)} ({summary.backend})")
    state = "up to date" if summary.up_to_date else f"behind head {summary.head}: run `bridge db upgrade`"
    console.print(f"schema   {summary.revision or 'empty'} ({state})")
    console.print(f"modes    {modes or 'every origin off (pure pass-through)'}")
    if outbox is not None:
        console.print(f"projection outbox {outbox['counts'] or 'empty'}")
    table = Table("runs by status", "count")
    for name, count in sorted(summary.runs_by_status.items()):
        table.add_row(name, str(count))
    table.add_row("events", str(summary.events))
    console.print(table)
    if not summary.up_to_date:
        sys.exit(1)


@main.command()
def serve() -> None:
    """Run the bridge in front of 2.x (waitress, one process; configuration: BRIDGE_* variables, see README)."""
    from functools import partial

    from bridge.bootstrap import build_container
    from bridge.web.server import serve as run_server

    settings = _settings()
    modes = _prepare_serving(settings)
    click.echo(f"bridge: listening on {settings.listen_host}:{settings.listen_port}, forwarding to "
               f"{settings.legacy_url}; not off: {modes or 'none (pure pass-through)'}", err=True)
    run_server(settings, partial(build_container, schedule_reconciler=True))


def _prepare_serving(settings: Settings) -> str:
    """Before listening: the store is current, flags are seeded once, unfinished Runs are checked."""
    from bridge.bootstrap import build_flags, build_reconciler
    from bridge.metrics import BridgeMetrics
    from bridge.recovery import recover_on_startup
    from bridge.storage.migrate import current_revision, head_revision
    from bridge.storage.reconcile_queries import ReconcileStore

    store = _store(settings)
    try:
        revision, head = current_revision(store.engine), head_revision()
        if revision != head:
            _fail(f"the bridge store is at revision {revision or 'empty'}, not {head}: run `bridge db upgrade` first")
        flags = build_flags(store)
        flags.seed_once(settings.shadow_origins)
        recording = sorted(o for o, m in flags.modes().items() if m.value != "off")
        if recording and settings.legacy_database_path is None:
            # Serving anyway would record nothing while the flags say otherwise: a silent shadow gap.
            _fail(f"BRIDGE_LEGACY_DATA_DIR is not set, but the flags put {', '.join(recording)} in shadow or "
                  f"primary mode: set it to 2.x's data directory, or `bridge flags set <origin> off`")
        if settings.legacy_database_path is not None:
            reconciler = build_reconciler(settings, store, BridgeMetrics(), flags)  # validates 2.x's files
            outcomes = recover_on_startup(ReconcileStore(store.engine), store.runs, reconciler.reader)
            if outcomes:
                click.echo(f"bridge: startup recovery: {dict(outcomes)}", err=True)
        return ", ".join(f"{o}={m.value}" for o, m in flags.modes().items() if m.value != "off")
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    finally:
        store.close()


@main.command()
@click.option("--once", is_flag=True, required=True, help="Run one reconcile pass and exit.")
def reconcile(once: bool) -> None:
    """Compare 2.x's tables with the shadow store and record every mismatch."""
    from bridge.bootstrap import build_flags, build_reconciler
    from bridge.metrics import BridgeMetrics

    settings = _settings()
    store = _store(settings)
    try:
        reconciler = build_reconciler(settings, store, BridgeMetrics(), build_flags(store))
        result = reconciler.run_once()
    except (BridgeError, ConfigError) as exc:
        _fail(str(exc) if isinstance(exc, ConfigError) else f"{exc.code}: {exc.message}")
        raise
    finally:
        store.close()
    stats = ", ".join(f"{k} {v}" for k, v in sorted(result.stats.items()))
    click.echo(f"reconcile: {result.result}" + (f" ({result.reason})" if result.reason else "")
               + (f"; {stats}" if stats else ""))
    if result.result == "failed":
        sys.exit(1)


@main.command()
@click.option("--since", default=None, help="Window start: RFC 3339, YYYY-MM-DD, or 24h / 7d (default 7d).")
@click.option("--origin", default=None, help="Only this origin (default: all).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: reports/).")
def report(since: str | None, origin: str | None, out_dir: Path | None) -> None:
    """Write a cutover-readiness report (JSON and HTML) per origin, with a verdict per gate."""
    from bridge.reporting import run_report

    settings = _settings()
    try:
        json_path, html_path = run_report(settings, since=since, origin=origin, out_dir=out_dir)
    except ConfigError as exc:
        _fail(str(exc))
        raise
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    click.echo(f"report written: {json_path} and {html_path}")


@main.command("import-legacy")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Instances per transaction.")
@click.option("--rescan", is_flag=True, help="Start from the first instance again (what exists is skipped).")
def import_legacy(batch_size: int, rescan: bool) -> None:
    """Import 2.x's RunningInstances history as read-only Runs (re-runnable; resumes where it stopped)."""
    from bridge.importer import print_summary, run_import

    settings = _settings()
    try:
        summary = run_import(settings, batch_size=batch_size, console=console, resume=not rescan)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    print_summary(summary, console)


@main.group()
def projection() -> None:
    """Primary mode: the outbox that keeps 2.x's columns current."""


@projection.command("retry")
def projection_retry() -> None:
    """Put every parked projection row back in the queue with a fresh retry budget."""
    from bridge.projector import requeue_parked

    try:
        count = requeue_parked(_settings())
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    click.echo(f"{count} parked projection row(s) queued again")


@main.group()
def flags() -> None:
    """Per-origin modes: off, shadow, primary (audited)."""


@flags.command("show")
@click.option("--audit", "audit_rows", default=10, show_default=True, help="How many audit rows to show.")
def flags_show(audit_rows: int) -> None:
    """Show each origin's mode and the latest flag changes."""
    from bridge.bootstrap import build_flags

    store = _store(_settings())
    try:
        service = build_flags(store)
        modes, audit = service.modes(), service.audit(limit=audit_rows)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    finally:
        store.close()
    table = Table("origin", "mode")
    for origin, mode in modes.items():
        table.add_row(origin, mode.value)
    console.print(table)
    history = Table("when (UTC ms)", "origin", "change", "actor", "reason", title="audit (newest first)")
    for row in audit:
        history.add_row(str(row.at_ms), row.origin, f"{row.old or '-'} → {row.new}", row.actor, row.reason)
    console.print(history)


@flags.command("set")
@click.argument("origin")
@click.argument("mode")
@click.option("--actor", default="", help="Who makes the change (required; kept in the audit).")
@click.option("--reason", default="", help="Why (required; kept in the audit).")
def flags_set(origin: str, mode: str, actor: str, reason: str) -> None:
    """Set ORIGIN to MODE (off, shadow or primary); primary needs a passing cutover report."""
    from bridge.bootstrap import build_flags

    store = _store(_settings())
    try:
        change = build_flags(store).set_mode(origin, mode, actor=actor, reason=reason)
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    finally:
        store.close()
    click.echo(f"{change.origin}: {change.old or 'off'} → {change.new} (by {change.actor})")


@flags.command("admin-token")
def flags_admin_token() -> None:
    """Create the admin token of the /bridge/flags endpoint; only its hash is stored. Shown once."""
    from bridge.bootstrap import build_flags
    from bridge.service.admin import new_admin_token

    store = _store(_settings())
    try:
        token = new_admin_token(build_flags(store))
    except BridgeError as exc:
        _fail(f"{exc.code}: {exc.message}")
        raise
    finally:
        store.close()
    click.echo(token)


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



@main.command()
def doctor() -> None:
    """Check the install from evidence: the seam (QlPort of 2.x's backend and of its task shells), shadow
    coverage, 2.x's time zone, process identity, the store and 2.x's database. Exit 1 on any failed check."""
    from bridge.doctor import gather, render, run_checks

    checks = run_checks(gather(_settings()))
    for line in render(checks):
        click.echo(line)
    if any(check.verdict == "fail" for check in checks):
        sys.exit(1)

if __name__ == "__main__":
    main()
