"""What one import did, and the table ``ql-bridge import-legacy`` prints of it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from bridge.jobs.import_legacy.plan import FINISH_TIME_UNKNOWN


@dataclass
class ImportSummary:
    """What one ``run_import`` did. ``imported`` counts the legacy_import Runs written (terminal history);
    running instances handed to the shadow path are counted in ``handed_to_shadow`` only."""

    total: int = 0  # instances after the cursor when the import began
    scanned: int = 0
    imported: int = 0
    skipped: int = 0  # a Run for the instance already existed (import key or execution key)
    replayed: int = 0  # rows of an execution 2.x recorded more than once, other than the one that speaks for it
    handed_to_shadow: int = 0
    unsupported: int = 0  # an unknown status or no cron id: not imported
    by_status: dict[str, int] = field(default_factory=dict)  # imported Runs by Run status
    finish_time_unknown: int = 0  # of the cancelled ones: 2.x's boot reset, no finished_at
    deleted_crons: int = 0  # imported with the "deleted-cron" revision
    unusable_times: int = 0  # a time or exit code 2.x stored in a form that cannot be converted: kept null
    unfinished_logs: int = 0  # before v2.21: task logs without an end line (running, or never ended), not imported
    batches: int = 0
    resumed_after: int = 0  # the cursor the import started from (0: the beginning)
    last_id: int = 0  # the cursor after the import
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def _add(self, counts: Counter[str]) -> None:
        self.scanned += counts["scanned"]
        self.imported += counts["imported"]
        self.skipped += counts["skipped"]
        self.replayed += counts["replayed"]
        self.handed_to_shadow += counts["handed_to_shadow"]
        self.unsupported += counts["unsupported"]
        self.finish_time_unknown += counts["finish_time_unknown"]
        self.deleted_crons += counts["deleted_crons"]
        self.unusable_times += counts["unusable_times"]
        for key, n in counts.items():
            if key.startswith("status:"):
                status = key.removeprefix("status:")
                self.by_status[status] = self.by_status.get(status, 0) + n



def print_summary(summary: ImportSummary, console: Console) -> None:
    """The summary as a small table (and its notes, if any)."""
    table = Table(title="2.x import", show_header=True, header_style="bold")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("instances scanned", f"{summary.scanned} of {summary.total}")
    table.add_row("imported (legacy_import Runs)", str(summary.imported))
    # Boot-reset rows are cancelled Runs, so their count sits under "cancelled".
    statuses = set(summary.by_status) | ({"cancelled"} if summary.finish_time_unknown else set())
    for status in sorted(statuses):
        table.add_row(f"  {status}", str(summary.by_status.get(status, 0)))
        if status == "cancelled" and summary.finish_time_unknown:
            table.add_row(f"    of which {FINISH_TIME_UNKNOWN} (2.x boot reset)", str(summary.finish_time_unknown))
    table.add_row("running: handed to the shadow path", str(summary.handed_to_shadow))
    table.add_row("skipped (already present)", str(summary.skipped))
    if summary.replayed:
        table.add_row("replayed rows of an execution (folded into its one Run)", str(summary.replayed))
    if summary.unsupported:
        table.add_row("not imported (unknown status or no cron id)", str(summary.unsupported))
    if summary.unfinished_logs:
        table.add_row("task logs without an end line (not imported)", str(summary.unfinished_logs))
    if summary.deleted_crons:
        table.add_row("of a deleted cron", str(summary.deleted_crons))
    if summary.unusable_times:
        table.add_row("unusable times / exit codes (kept null)", str(summary.unusable_times))
    table.add_row("batches committed", str(summary.batches))
    table.add_row("cursor", f"{summary.resumed_after} -> {summary.last_id}")
    rate = summary.scanned / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    table.add_row("elapsed", f"{summary.elapsed_s:.1f} s ({rate:.0f} instances/s)")
    console.print(table)
    for note in summary.notes:
        console.print(f"note: {note}")
