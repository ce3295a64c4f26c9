"""The printed import summary: each count sits under the Run status it belongs to."""

from __future__ import annotations

import io

from rich.console import Console

from bridge.jobs.import_legacy.summary import ImportSummary, print_summary


def printed_rows(summary: ImportSummary) -> list[tuple[str, str]]:
    """The table's (what, count) rows as printed, in order."""
    out = Console(file=io.StringIO(), width=120, color_system=None)
    print_summary(summary, out)
    rows = []
    for line in out.file.getvalue().splitlines():  # type: ignore[attr-defined]
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 2 and cells[1]:
            rows.append((cells[0], cells[1]))
    return rows


def test_finish_time_unknown_is_counted_under_cancelled_not_under_the_last_status() -> None:
    summary = ImportSummary(total=9, scanned=9, imported=9, finish_time_unknown=2,
                            by_status={"succeeded": 4, "failed": 2, "cancelled": 3})

    rows = printed_rows(summary)

    whats = [what for what, _ in rows]
    at = whats.index("cancelled")
    assert rows[at + 1] == ("of which finish_time_unknown (2.x boot reset)", "2")
    assert whats[at - 1:at + 4] == ["imported (legacy_import Runs)", "cancelled",
                                    "of which finish_time_unknown (2.x boot reset)", "failed", "succeeded"]


def test_no_finish_time_unknown_row_when_there_is_none() -> None:
    rows = printed_rows(ImportSummary(by_status={"succeeded": 1, "cancelled": 1}))

    assert not any("finish_time_unknown" in what for what, _ in rows)
    assert ("cancelled", "1") in rows and ("succeeded", "1") in rows
