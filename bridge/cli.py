"""The `ql-bridge` command line (click; `bridge` is an alias). Any failure: one line on stderr, non-zero exit.

A failure is one line naming its cause and its target, never a traceback: every command runs inside
``_Group.invoke``, which turns bridge errors, configuration errors, store driver errors, Alembic's
refusals and OS errors into that line (``_error_line``). Each command's ``--help`` ends with the
environment variables it reads (``ENVIRONMENT``). Times are shown in the operator's zone with its offset.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from zoneinfo import ZoneInfo

import click
from alembic.util import CommandError
from rich.console import Console
from rich.table import Table

from bridge.config import ConfigError, Settings, local_zone_name
from bridge.domain.errors import BridgeError, StorageError
from bridge.storage.errors import STORE_FAILURES, describe_store_failure, url_without_password

if TYPE_CHECKING:
    from bridge.bootstrap import Store

F = TypeVar("F", bound=Callable[..., Any])
PROG = "ql-bridge"
WIDE = 100_000  # columns of a console that is not a terminal: a line is never wrapped or cut

# What each command reads from the environment, shown at the end of its --help. Settings.from_env checks
# every BRIDGE_* variable for every command (a bad value stops any of them); these are the ones whose
# value changes what the command does. tests/cli/test_help.py holds them to Settings.from_env.
_STORE = ("BRIDGE_DATABASE_URL", "BRIDGE_DATABASE_SCHEMA", "BRIDGE_DATA_DIR")
_WRITER = (*_STORE, "BRIDGE_SQLITE_BUSY_BUDGET_MS", "BRIDGE_PAYLOAD_CAP_BYTES")
_LEGACY = ("BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LEGACY_TZ", "BRIDGE_LEGACY_SCHEDULER")
_RECONCILE = ("BRIDGE_RECONCILE_TOLERANCE_S", "BRIDGE_RECONCILE_GRACE_S", "BRIDGE_RECONCILE_LOOKBACK_S")
_GATES = ("BRIDGE_GATE_MIN_EXECUTIONS", "BRIDGE_GATE_COMPLETENESS", "BRIDGE_GATE_STATUS_AGREEMENT",
          "BRIDGE_GATE_EXIT_CODE_AGREEMENT", "BRIDGE_GATE_MAX_DUPLICATES", "BRIDGE_GATE_STALE_MISMATCH_KINDS")
_SERVING = ("BRIDGE_LISTEN", "BRIDGE_LEGACY_URL", "BRIDGE_SHADOW_ORIGINS", "BRIDGE_SHADOW_BUDGET_MS",
            "BRIDGE_FORWARD_TIMEOUT_S", "BRIDGE_WORKERS", "BRIDGE_THREADS", "BRIDGE_CONNECTION_LIMIT",
            "BRIDGE_IDLE_TIMEOUT_S", "BRIDGE_HEADERS_TIMEOUT_S", "BRIDGE_REQUEST_TIMEOUT_S", "BRIDGE_MAX_BODY_BYTES",
            "BRIDGE_CALLBACK_BODY_CAP_BYTES", "BRIDGE_DRAIN_TIMEOUT_S", "BRIDGE_RECONCILE_INTERVAL_S",
            "BRIDGE_STOP_DECISION_WINDOW_S", "BRIDGE_FLAGS_MAX_STALE_S", "BRIDGE_LOG_FORMAT")
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "db upgrade": _STORE,
    "status": _STORE,
    "serve": (*_WRITER, *_LEGACY, *_RECONCILE, *_SERVING),
    "reconcile": (*_WRITER, *_LEGACY, *_RECONCILE),
    "report": (*_STORE, *_LEGACY, *_GATES),
    "import-legacy": (*_WRITER, *_LEGACY),
    "projection retry": _STORE,
    "flags show": (*_STORE, "BRIDGE_LEGACY_TZ"),
    "flags set": _STORE,
    "flags admin-token": _STORE,
    "demo": ("BRIDGE_DATA_DIR",),
    "doctor": (*_STORE, "BRIDGE_LEGACY_URL", "BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LEGACY_TZ", "BRIDGE_LISTEN"),
}


# What `_error_line` words; anything else is click's own (usage errors) or a bug, and shows as one.
_WORDED_FAILURES: tuple[type[Exception], ...] = (BridgeError, ConfigError, OSError, *STORE_FAILURES)


class _Command(click.Command):
    """A command whose --help ends with the environment variables it reads."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        names = ENVIRONMENT.get(ctx.command_path.partition(" ")[2])
        if names:
            with formatter.section("Environment"):
                formatter.write_text(", ".join(names))


class _Group(click.Group):
    """Every command runs inside ``invoke``: a failure becomes one line on stderr (``_error_line``)."""

    command_class = _Command
    group_class = type  # sub-groups are _Group too

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("prog_name", PROG)  # help and usage say ql-bridge, whichever alias ran
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise  # the reader went away (`| head`): click's own handling
        except _WORDED_FAILURES as exc:
            _fail(_error_line(exc))


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"{PROG}: {message}", err=True)
    sys.exit(code)


def _error_line(exc: BaseException) -> str:
    """One line for a failure: its code or kind, the cause, and the target (the store, a file)."""
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, OSError):
        target = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}{target}"
    if isinstance(exc, BridgeError) and not isinstance(exc, StorageError):
        return f"{exc.code}: {exc.message}"
    failure = describe_store_failure(exc, _settings().database_url)
    return failure.line if failure is not None else f"{type(exc).__name__}: {exc}"


def _store_where(settings: Settings | None = None) -> str:
    from bridge.storage.errors import store_location

    return store_location((settings or _settings()).database_url)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        _fail(str(exc))


def _store(settings: Settings, *, create: bool = False) -> Store:
    """The bridge store. Only `db upgrade` creates one (``create``): for any other command a missing SQLite
    file is refused, and nothing (file or folder) is created."""
    from bridge.bootstrap import build_store
    from bridge.storage.errors import sqlite_file

    path = sqlite_file(settings.database_url) if settings.database_url.startswith("sqlite:") else None
    if not create and path is not None and not path.exists():
        _fail(f"no store at {path}: run `{PROG} db upgrade`")
    return build_store(settings)


def _current_store(settings: Settings) -> Store:
    """The bridge store, refused (one line) unless its schema is this code's: empty, behind or newer."""
    from bridge.storage.migrate import require_current_schema

    store = _store(settings)
    try:
        require_current_schema(store.engine)
    except BaseException:
        store.close()
        raise
    return store


def _check_store(settings: Settings) -> None:
    """For commands that open the store themselves: refuse a missing, unreachable or not-current store first."""
    _current_store(settings).close()


def _console() -> Console:
    """Rich output for stdout. Off a terminal (`docker logs`, a pipe, a file) it never wraps or cuts a line."""
    terminal = Console(markup=False, highlight=False)
    if terminal.is_terminal:
        return terminal
    return Console(markup=False, highlight=False, width=WIDE, soft_wrap=True)


def _local_time(ms: int, zone: str) -> str:
    """Epoch ms as ``2026-12-04 17:03:12 +08:00`` in ``zone``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(zone))
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.isoformat()[-6:]}"


def operator_zone(settings: Settings) -> str:
    """The zone times are shown in: BRIDGE_LEGACY_TZ if set, else the host's."""
    return settings.legacy_tz or local_zone_name()


@click.group(cls=_Group)
@click.version_option(package_name="ql-bridge", prog_name=PROG, message="%(prog)s %(version)s")
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
    store = _store(settings, create=True)
    try:
        reached = upgrade(store.engine, revision)
    except CommandError as exc:  # the target is resolved before anything changes
        from bridge.storage.migrate import head_revision

        _fail(f"--revision {revision}: {exc} (this code's newest is {head_revision()}); the bridge store at "
              f"{_store_where(settings)} is unchanged")
    finally:
        store.close()
    click.echo(f"bridge store {url_without_password(settings.database_url)} is at revision {reached}")


@main.command()
def status() -> None:
    """Show the bridge store's schema revision and what it has recorded."""
    from bridge.bootstrap import build_flags
    from bridge.jobs.project import projection_status
    from bridge.storage.summary import summarize

    settings = _settings()
    store = _store(settings)
    modes, outbox, bypassed = "", None, []
    try:
        summary = summarize(store.engine)  # a store newer than the code is refused here
        if summary.up_to_date:
            modes = ", ".join(f"{o}={m.value}" for o, m in build_flags(store).modes().items() if m.value != "off")
            modes = modes or "every origin off (pure pass-through)"
            outbox = projection_status(store.readers.outbox)
            bypassed = _seam_findings(store)
    finally:
        store.close()
    console = _console()
    console.print(f"store    {url_without_password(settings.database_url)} ({summary.backend})")
    state = "up to date" if summary.up_to_date else f"this code is at {summary.head}: run `{PROG} db upgrade`"
    console.print(f"schema   {summary.revision or 'empty'} ({state})")
    console.print(f"modes    {modes or 'not read until the schema is current'}")
    if outbox is not None:
        console.print(f"projection outbox {outbox['counts'] or 'empty'}")
    table = Table("runs by status", "count")
    for name, count in sorted(summary.runs_by_status.items()):
        table.add_row(name, str(count))
    table.add_row("events", str(summary.events))
    console.print(table)
    for finding in bypassed:
        console.print(f"seam     {finding.message}: {finding.as_dict()['fix']}")
    if not summary.up_to_date:
        sys.exit(1)


def _seam_findings(store: Store) -> list[Any]:
    """Origins whose recent executions mostly never reached the bridge (projections/seam.py)."""
    import time

    from projections.seam import SEAM_WINDOW_MS, bypass_findings

    return bypass_findings(store.readers.coverage(int(time.time() * 1000) - SEAM_WINDOW_MS))


@main.command()
def serve() -> None:
    """Run the bridge in front of 2.x (uvicorn, one process)."""
    import logging
    from functools import partial

    from bridge.bootstrap import build_container
    from bridge.logging_setup import configure_logging
    from bridge.web.server import ClientDataFilter
    from bridge.web.server import serve as run_server

    settings = _settings()
    configure_logging(settings.log_format, [ClientDataFilter()])  # one format for every line of the process
    modes, deferred = _prepare_serving(settings)
    logging.getLogger("bridge.cli").info("origins not off: %s", modes or "none (pure pass-through)")
    run_server(settings, partial(build_container, schedule_reconciler=True, recovery_deferred=deferred))


def _prepare_serving(settings: Settings) -> tuple[str, bool]:
    """Before listening: the store is current and writable, flags are seeded once, unfinished Runs are checked.

    Returns the origins not off, and whether recovery left Runs for later (2.x's database did not read)."""
    import logging

    from bridge.bootstrap import build_flags, recover_unfinished_runs
    from bridge.storage.migrate import require_writable

    store = _current_store(settings)
    try:
        # A store that takes no writes would see every callback and record none of them.
        require_writable(store.engine)
        store.uow.probe_write()
        flags = build_flags(store)
        flags.seed_once(settings.shadow_origins)
        recording = sorted(o for o, m in flags.modes().items() if m.value != "off")
        if recording and settings.legacy_database_path is None:
            # Serving anyway would record nothing while the flags say otherwise: a silent shadow gap.
            _fail(f"BRIDGE_LEGACY_DATA_DIR is not set, but the flags put {', '.join(recording)} in shadow or "
                  f"primary mode: set it to 2.x's data directory, or `{PROG} flags set <origin> off`")
        deferred = False
        if settings.legacy_database_path is not None:
            outcomes = recover_unfinished_runs(settings, store)  # refuses a file that is not 2.x's database
            deferred = any(outcome.startswith("deferred:") for outcome in outcomes)
            if outcomes:
                logging.getLogger("bridge.cli").info("startup recovery: %s", dict(outcomes))
        return ", ".join(f"{o}={m.value}" for o, m in flags.modes().items() if m.value != "off"), deferred
    finally:
        store.close()


@main.command()
@click.option("--once", is_flag=True, help="No effect, kept for old scripts: reconcile always runs one pass.")
def reconcile(once: bool) -> None:
    """Run one reconcile pass: compare 2.x's tables with the shadow store and record every mismatch."""
    from bridge.bootstrap import build_flags, build_reconciler
    from bridge.metrics import BridgeMetrics

    settings = _settings()
    store = _current_store(settings)
    try:
        reconciler = build_reconciler(settings, store, BridgeMetrics(), build_flags(store))
        result = reconciler.run_once()
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
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Output folder (default: reports/).")
def report(since: str | None, origin: str | None, out_dir: Path | None) -> None:
    """Write a cutover-readiness report (JSON and HTML) per origin, with a verdict per gate."""
    from bridge.bootstrap import write_cutover_report

    settings = _settings()
    _check_store(settings)
    json_path, html_path = write_cutover_report(settings, since=since, origin=origin, out_dir=out_dir)
    click.echo(f"report written: {json_path} and {html_path}")


@main.command("import-legacy")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Instances per transaction.")
@click.option("--rescan", is_flag=True, help="Start from the first instance again (what exists is skipped).")
def import_legacy(batch_size: int, rescan: bool) -> None:
    """Import 2.x's RunningInstances history as read-only Runs (re-runnable; resumes where it stopped)."""
    from bridge.bootstrap import run_legacy_import
    from bridge.jobs.import_legacy.summary import print_summary

    settings = _settings()
    _check_store(settings)
    console = _console()
    summary = run_legacy_import(settings, batch_size=batch_size, console=console, resume=not rescan)
    print_summary(summary, console)


@main.group()
def projection() -> None:
    """Primary mode: the outbox that keeps 2.x's columns current."""


@projection.command("retry")
def projection_retry() -> None:
    """Put every parked projection row back in the queue with a fresh retry budget."""
    from bridge.bootstrap import requeue_parked_projections

    settings = _settings()
    _check_store(settings)
    count = requeue_parked_projections(settings)
    click.echo(f"{count} parked projection row(s) queued again")


@main.group()
def flags() -> None:
    """Per-origin modes: off, shadow, primary (audited)."""


@flags.command("show")
@click.option("--audit", "audit_rows", default=10, show_default=True, help="How many audit rows to show.")
def flags_show(audit_rows: int) -> None:
    """Show each origin's mode and the latest flag changes."""
    from bridge.bootstrap import build_flags

    settings = _settings()
    store = _current_store(settings)
    try:
        service = build_flags(store)
        modes, audit = service.modes(), service.audit(limit=audit_rows)
    finally:
        store.close()
    console, zone = _console(), operator_zone(settings)
    table = Table("origin", "mode")
    for origin, mode in modes.items():
        table.add_row(origin, mode.value)
    console.print(table)
    history = Table(f"when ({zone})", "origin", "change", "actor", "reason", title="audit (newest first)")
    for row in audit:
        history.add_row(_local_time(row.at_ms, zone), row.origin, f"{row.old or '-'} → {row.new}", row.actor,
                        row.reason)
    console.print(history)


@flags.command("set")
@click.argument("origin")
@click.argument("mode")
@click.option("--actor", default="", help="Who makes the change (required; kept in the audit).")
@click.option("--reason", default="", help="Why (required; kept in the audit).")
def flags_set(origin: str, mode: str, actor: str, reason: str) -> None:
    """Set ORIGIN to MODE (off, shadow or primary); primary needs a passing cutover report."""
    from bridge.bootstrap import build_flags

    store = _current_store(_settings())
    try:
        change = build_flags(store).set_mode(origin, mode, actor=actor, reason=reason)
    finally:
        store.close()
    click.echo(f"{change.origin}: {change.old or 'off'} → {change.new} (by {change.actor})")


@flags.command("admin-token")
def flags_admin_token() -> None:
    """Create the admin token of the /bridge/flags endpoint; only its hash is stored. Shown once."""
    from bridge.bootstrap import build_flags
    from bridge.service.admin import new_admin_token

    store = _current_store(_settings())
    try:
        token = new_admin_token(build_flags(store))
    finally:
        store.close()
    click.echo(token)


@main.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path), default=None,
              help="Where the demo writes (default: BRIDGE_DATA_DIR/demo): a new or empty folder, or one an "
                   "earlier demo made, which is emptied first. Any other folder is refused, never deleted.")
def demo(workdir: Path | None) -> None:
    """Replay realistic 2.x traffic through a real bridge in front of the 2.x test double."""
    from bridge.demo import run_demo

    settings = _settings()
    try:
        run_demo(workdir or settings.data_dir / "demo", _console())
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


_SEAM = ("BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LISTEN", "BRIDGE_LEGACY_URL")
ENVIRONMENT |= {"seam install": _SEAM, "seam remove": _SEAM, "seam status": ("BRIDGE_LEGACY_DATA_DIR",)}


@main.group()
def seam() -> None:
    """Put the bridge on 2.x's task shells' path (a fail-safe block in config.sh) and take it off again."""


@seam.command("install")
@click.option("--dry-run", is_flag=True, help="Print the change to config.sh as a diff; change nothing.")
def seam_install(dry_run: bool) -> None:
    """Point task shells at the bridge (BRIDGE_LISTEN's port) while it answers /livez; then the doctor's seam
    lines. Exit 1 when task shells still do not reach the bridge."""
    from bridge.seam_command import SeamRefusedError, install

    try:
        sys.exit(install(_settings(), click.echo, dry_run=dry_run))
    except SeamRefusedError as exc:
        _fail(str(exc))


@seam.command("remove")
@click.option("--dry-run", is_flag=True, help="Print the change to config.sh as a diff; change nothing.")
def seam_remove(dry_run: bool) -> None:
    """Take the ql-bridge block out of config.sh (edits elsewhere stay); then the doctor's seam lines. Exit 1
    when task shells still call the bridge."""
    from bridge.seam_command import SeamRefusedError, remove

    try:
        sys.exit(remove(_settings(), click.echo, dry_run=dry_run))
    except SeamRefusedError as exc:
        _fail(str(exc))


@seam.command("status")
def seam_status() -> None:
    """Whether the block is installed, the port task shells call now (bash sources config.sh as they do), and
    whether a ql-bridge answers there."""
    from bridge.seam_command import SeamRefusedError, status

    try:
        sys.exit(status(_settings(), click.echo))
    except SeamRefusedError as exc:
        _fail(str(exc))


ENVIRONMENT["db roles"] = _STORE


@db.command("roles")
@click.option("--runtime", "runtime", default="ql_bridge_runtime", show_default=True,
              help="The role `serve` connects as.")
@click.option("--reader", "reader", default="ql_bridge_reader", show_default=True,
              help="The read-only role for reports and the v3 API.")
def db_roles(runtime: str, reader: str) -> None:
    """PostgreSQL: create or update the least-privilege roles (run it as the owner of the bridge's tables).

    RUNTIME may read and write what `serve` writes, but StepRuns are never deleted, and the StepRun mutation ledger
    and run_events are append-only; READER may only read. Neither may change the schema. New roles can log in but
    have no password: set one with ALTER ROLE, or authenticate them in pg_hba.conf."""
    from bridge.storage.engine import store_capabilities
    from bridge.storage.roles import apply_roles

    settings = _settings()
    store = _current_store(settings)
    try:
        if not store_capabilities(store.engine).database_roles:
            _fail("db roles: a SQLite store has no roles; who may write it is the file's permissions")
        try:
            granted = apply_roles(store.engine, runtime=runtime, reader=reader)
        except ValueError as exc:
            _fail(f"db roles: {exc}")
    finally:
        store.close()
    for grant in granted:
        click.echo(f"{grant.role} ({'created' if grant.created else 'updated'}):")
        for table, privileges in grant.privileges.items():
            click.echo(f"  {table}: {', '.join(privileges)}")


if __name__ == "__main__":
    main()
