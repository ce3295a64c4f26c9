"""The `ql-bridge` command line (click; `bridge` is an alias): the group, each command's name, options and help,
and the one line printed when a command fails. The work is done in the command group's own module
(``bridge.cli.db``, ``status``, ``serve``, ``jobs``, ``flags``, ``demo``, ``doctor``, ``seam``), imported when
its command runs, so `--help` stays quick.

A failure is one line on stderr naming its cause and its target, never a traceback, and a non-zero exit:
every command runs inside ``_Group.invoke``, which prints a command's own refusal (``CommandFailedError``) and
words bridge errors, configuration errors, store failures, Alembic's refusals and OS errors
(``failure_line``). Each command's ``--help`` ends with the environment variables it reads (``ENVIRONMENT``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from bridge.cli.environment import ENVIRONMENT
from bridge.cli.failures import WORDED_FAILURES, CommandFailedError, failure_line
from bridge.cli.output import PROG, console
from bridge.config import Settings


class _Command(click.Command):
    """A command whose --help ends with the environment variables it reads."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        names = ENVIRONMENT.get(ctx.command_path.partition(" ")[2])
        if names:
            with formatter.section("Environment"):
                formatter.write_text(", ".join(names))


class _Group(click.Group):
    """Every command runs inside ``invoke``: a failure becomes one line on stderr."""

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
        except CommandFailedError as exc:
            _fail(exc.line, exc.exit_code)
        except WORDED_FAILURES as exc:
            _fail(failure_line(exc))


def _fail(line: str, code: int = 2) -> NoReturn:
    click.echo(f"{PROG}: {line}", err=True)
    sys.exit(code)


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
    from bridge.cli.db import upgrade_store

    click.echo(upgrade_store(revision))


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
    from bridge.cli.db import grant_roles

    for line in grant_roles(runtime, reader):
        click.echo(line)


@main.command()
def status() -> None:
    """Show the bridge store's schema revision and what it has recorded."""
    from bridge.cli.status import show_status

    sys.exit(show_status(console()))


@main.command()
def serve() -> None:
    """Run the bridge in front of 2.x (uvicorn, one process)."""
    from bridge.cli.serve import serve as serve_bridge

    serve_bridge()


@main.command()
@click.option("--once", is_flag=True, help="No effect, kept for old scripts: reconcile always runs one pass.")
def reconcile(once: bool) -> None:
    """Run one reconcile pass: compare 2.x's tables with the shadow store and record every mismatch."""
    from bridge.cli.jobs import reconcile_once

    line, code = reconcile_once()
    click.echo(line)
    sys.exit(code)


@main.command()
@click.option("--since", default=None, help="Window start: RFC 3339, YYYY-MM-DD, or 24h / 7d (default 7d).")
@click.option("--origin", default=None, help="Only this origin (default: all).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Output folder (default: reports/).")
def report(since: str | None, origin: str | None, out_dir: Path | None) -> None:
    """Write a cutover-readiness report (JSON and HTML) per origin, with a verdict per gate."""
    from bridge.cli.jobs import write_report

    click.echo(write_report(since, origin, out_dir))


@main.command("import-legacy")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Instances per transaction.")
@click.option("--rescan", is_flag=True, help="Start from the first instance again (what exists is skipped).")
def import_legacy(batch_size: int, rescan: bool) -> None:
    """Import 2.x's RunningInstances history as read-only Runs (re-runnable; resumes where it stopped)."""
    from bridge.cli.jobs import import_history

    import_history(batch_size, rescan, console())


@main.group()
def projection() -> None:
    """Primary mode: the outbox that keeps 2.x's columns current."""


@projection.command("retry")
def projection_retry() -> None:
    """Put every parked projection row back in the queue with a fresh retry budget."""
    from bridge.cli.jobs import retry_parked_projections

    click.echo(retry_parked_projections())


@main.group()
def flags() -> None:
    """Per-origin modes: off, shadow, primary (audited)."""


@flags.command("show")
@click.option("--audit", "audit_rows", default=10, show_default=True, help="How many audit rows to show.")
def flags_show(audit_rows: int) -> None:
    """Show each origin's mode and the latest flag changes."""
    from bridge.cli.flags import show_flags

    show_flags(console(), audit_rows)


@flags.command("set")
@click.argument("origin")
@click.argument("mode")
@click.option("--actor", default="", help="Who makes the change (required; kept in the audit).")
@click.option("--reason", default="", help="Why (required; kept in the audit).")
def flags_set(origin: str, mode: str, actor: str, reason: str) -> None:
    """Set ORIGIN to MODE (off, shadow or primary); primary needs a passing cutover report."""
    from bridge.cli.flags import set_flag

    click.echo(set_flag(origin, mode, actor, reason))


@flags.command("admin-token")
def flags_admin_token() -> None:
    """Create the admin token of the /bridge/flags endpoint; only its hash is stored. Shown once."""
    from bridge.cli.flags import new_flags_admin_token

    click.echo(new_flags_admin_token())


@main.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path), default=None,
              help="Where the demo writes (default: BRIDGE_DATA_DIR/demo): a new or empty folder, or one an "
                   "earlier demo made, which is emptied first. Any other folder is refused, never deleted.")
def demo(workdir: Path | None) -> None:
    """Replay realistic 2.x traffic through a real bridge in front of the 2.x test double."""
    from bridge.cli.demo import show_demo

    settings = Settings.from_env()
    show_demo(workdir or settings.data_dir / "demo", console())


@main.command()
def doctor() -> None:
    """Check the install from evidence: the seam (QlPort of 2.x's backend and of its task shells), shadow
    coverage, 2.x's time zone, process identity, the store and 2.x's database. Exit 1 on any failed check."""
    from bridge.cli.doctor import examine

    lines, code = examine(Settings.from_env())
    for line in lines:
        click.echo(line)
    sys.exit(code)


@main.group()
def seam() -> None:
    """Put the bridge on 2.x's task shells' path (a block in config.sh that fails over per callback) and take it off
    again."""


@seam.command("install")
@click.option("--dry-run", is_flag=True, help="Print the change to config.sh as a diff; change nothing.")
def seam_install(dry_run: bool) -> None:
    """Send task shells' status callbacks to the bridge (BRIDGE_LISTEN's port), each to 2.x itself when the bridge
    cannot be reached; then the doctor's seam lines. Exit 1 when task shells still do not reach the bridge."""
    from bridge.cli.seam import install

    sys.exit(install(Settings.from_env(), click.echo, dry_run=dry_run))


@seam.command("remove")
@click.option("--dry-run", is_flag=True, help="Print the change to config.sh as a diff; change nothing.")
def seam_remove(dry_run: bool) -> None:
    """Take the ql-bridge block out of config.sh (edits elsewhere stay); then the doctor's seam lines. Exit 1
    when task shells still call the bridge."""
    from bridge.cli.seam import remove

    sys.exit(remove(Settings.from_env(), click.echo, dry_run=dry_run))


@seam.command("status")
def seam_status() -> None:
    """Whether the block is installed, the release, where task shells send callbacks with and without the bridge
    (bash sources config.sh as they do), and whether a ql-bridge answers where the block sends them."""
    from bridge.cli.seam import status as seam_state

    sys.exit(seam_state(Settings.from_env(), click.echo))
