"""`ql-bridge reconcile | report | import-legacy | projection retry`: the jobs an operator runs by hand, each on a
store checked first (present, reachable, at this code's schema)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from bridge.cli.store_access import check_store, current_store
from bridge.config import Settings


def reconcile_once() -> tuple[str, int]:
    """One reconcile pass; its line (result, reason, counts) and the exit status (1 when the pass failed)."""
    from bridge.bootstrap import build_flags, build_reconciler
    from bridge.metrics import BridgeMetrics

    settings = Settings.from_env()
    store = current_store(settings)
    try:
        reconciler = build_reconciler(settings, store, BridgeMetrics(), build_flags(store))
        result = reconciler.run_once()
    finally:
        store.close()
    stats = ", ".join(f"{k} {v}" for k, v in sorted(result.stats.items()))
    line = (f"reconcile: {result.result}" + (f" ({result.reason})" if result.reason else "")
            + (f"; {stats}" if stats else ""))
    return line, 1 if result.result == "failed" else 0


def write_report(since: str | None, origin: str | None, out_dir: Path | None) -> str:
    """The cutover-readiness report written (JSON and HTML); the line naming both files."""
    from bridge.bootstrap.commands import write_cutover_report

    settings = Settings.from_env()
    check_store(settings)
    json_path, html_path = write_cutover_report(settings, since=since, origin=origin, out_dir=out_dir)
    return f"report written: {json_path} and {html_path}"


def import_history(batch_size: int, rescan: bool, console: Console) -> None:
    """2.x's RunningInstances imported as read-only Runs, with progress and the summary on ``console``."""
    from bridge.bootstrap.commands import run_legacy_import
    from bridge.jobs.import_legacy.summary import print_summary

    settings = Settings.from_env()
    check_store(settings)
    summary = run_legacy_import(settings, batch_size=batch_size, console=console, resume=not rescan)
    print_summary(summary, console)


def retry_parked_projections() -> str:
    """Every parked projection row queued again; the line saying how many."""
    from bridge.bootstrap.commands import requeue_parked_projections

    settings = Settings.from_env()
    check_store(settings)
    count = requeue_parked_projections(settings)
    return f"{count} parked projection row(s) queued again"
