"""`ql-bridge status`: which 2.x release the bridge fronts, the bridge store's schema revision, the origins' modes,
the projection outbox, what the store has recorded, and the origins whose callbacks go around the bridge."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from bridge.cli.output import PROG
from bridge.cli.store_access import open_store
from bridge.config import ConfigError, Settings
from bridge.storage.errors import url_without_password

if TYPE_CHECKING:
    from bridge.bootstrap import Store
    from projections.seam import SeamFinding


def show_status(console: Console) -> int:
    """Print the status; the exit status is 1 while the schema is not this code's, or while 2.x's release is one
    the bridge refuses to front."""
    from bridge.bootstrap import build_flags
    from bridge.jobs.project import projection_status
    from bridge.service.clock import SystemClock
    from bridge.storage.summary import summarize

    settings = Settings.from_env()
    store = open_store(settings)
    modes, outbox, bypassed = "", None, []
    try:
        summary = summarize(store.engine)  # a store newer than the code is refused here
        if summary.up_to_date:
            modes = ", ".join(f"{o}={m.value}" for o, m in build_flags(store).modes().items() if m.value != "off")
            modes = modes or "every origin off (pure pass-through)"
            outbox = projection_status(store.readers.outbox, SystemClock().now_ms())
            bypassed = _seam_findings(store)
    finally:
        store.close()
    release, supported = _release_line(settings)
    console.print(f"release  {release}")
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
    return 0 if summary.up_to_date and supported else 1


def _release_line(settings: Settings) -> tuple[str, bool]:
    """The 2.x release as bootstrap decides it (legacy_adapters/releases.py), and whether the bridge fronts it."""
    if settings.legacy_data_dir is None and settings.legacy_release is None:
        return "not known: BRIDGE_LEGACY_DATA_DIR is not set (nor BRIDGE_LEGACY_RELEASE)", True
    from bridge.bootstrap.release import decide_legacy_release

    try:
        profile = decide_legacy_release(settings)
    except ConfigError as exc:  # the message names the release and why it is refused
        return f"not supported: {exc}", False
    patch = "" if profile.patch is not None else "; the patch is not known: set BRIDGE_LEGACY_RELEASE"
    return profile.describe() + patch, True


def _seam_findings(store: Store) -> list[SeamFinding]:
    """Origins whose recent executions mostly never reached the bridge (projections/seam.py)."""
    from projections.seam import SEAM_WINDOW_MS, bypass_findings

    return bypass_findings(store.readers.coverage(int(time.time() * 1000) - SEAM_WINDOW_MS))
