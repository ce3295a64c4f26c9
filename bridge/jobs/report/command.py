"""The `bridge report` command: its arguments checked first, the report built and kept, its two files written."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bridge.config import ConfigError, Settings
from bridge.domain.errors import BridgeError
from bridge.jobs.report.build import ORIGIN_ORDER, build_report, wall_clock_ms
from bridge.service.reports import ReportSources
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.ports import LegacyRecords
from projections.gates import GateThresholds, ThresholdError
from projections.report import to_json
from projections.report_html import render_html

if TYPE_CHECKING:
    from legacy_adapters.log_files import LogDirectory
    from legacy_adapters.releases import ReleaseProfile

DEFAULT_WINDOW_MS = 7 * 86_400_000


class LegacyDataDirNotConfiguredError(LegacyDatabaseError):
    """The report needs 2.x's database and BRIDGE_LEGACY_DATA_DIR does not say where it is."""

    def __init__(self) -> None:
        BridgeError.__init__(self, "BRIDGE_LEGACY_DATA_DIR is not set: the report compares 2.x's RunningInstances "
                             "(<data dir>/db/database.sqlite) with the shadow Runs", reason="not_configured")
        self.path, self.reason = "", "not_configured"


def write_report(report: Mapping[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``cutover-<UTC>.json`` and ``.html`` into ``out_dir``; a name taken in the same second gets -2, -3.
    Raises ConfigError naming ``--out`` when the folder cannot be written."""
    stamp = datetime.fromisoformat(str(report["generated_at"]).replace("Z", "+00:00")).strftime("%Y%m%dT%H%M%SZ")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        base, n = f"cutover-{stamp}", 1
        while (out_dir / f"{base}.json").exists() or (out_dir / f"{base}.html").exists():
            n += 1
            base = f"cutover-{stamp}-{n}"
        json_path, html_path = out_dir / f"{base}.json", out_dir / f"{base}.html"
        json_path.write_text(to_json(report), encoding="utf-8")
        html_path.write_text(render_html(dict(report)), encoding="utf-8")
    except OSError as exc:
        raise unwritable_out_dir(out_dir, exc) from exc
    return json_path, html_path


def check_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and write a file in it, so a folder that cannot be written is said before the scan.
    Raises ConfigError naming ``--out``."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise unwritable_out_dir(out_dir, exc) from exc


def unwritable_out_dir(out_dir: Path, exc: OSError) -> ConfigError:
    cause = "it is not a folder" if out_dir.exists() and not out_dir.is_dir() else (
        exc.strerror or type(exc).__name__)
    return ConfigError("--out", f"cannot write the report into {out_dir}: {cause}")


def parse_since(text: str | None, now_ms: int) -> int:
    """``--since``: RFC 3339, YYYY-MM-DD (UTC midnight), or a look-back such as 24h / 7d; None is 7 days."""
    if text is None or not text.strip():
        return now_ms - DEFAULT_WINDOW_MS
    raw = text.strip()
    relative = re.fullmatch(r"(\d{1,5})([hd])", raw)
    if relative:
        hours = int(relative.group(1)) * (24 if relative.group(2) == "d" else 1)
        return now_ms - hours * 3_600_000
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError("--since", f"must be RFC 3339, YYYY-MM-DD, or like 24h / 7d; got {raw[:40]!r}") from None
    if moment.tzinfo is None:
        if "T" in raw.upper() or " " in raw:
            raise ConfigError("--since", "an RFC 3339 time needs an offset (Z or +hh:mm)")
        moment = moment.replace(tzinfo=UTC)
    since = int(moment.timestamp() * 1000)
    if since > now_ms:
        raise ConfigError("--since", "lies in the future")
    return since


def run_report(settings: Settings, open_sources: Callable[[], AbstractContextManager[ReportSources]],
               open_reader: Callable[[Path], LegacyRecords], *, since: str | None = None, origin: str | None = None,
               out_dir: Path | None = None, console: Console | None = None,
               environ: Mapping[str, str] | None = None,
               release: ReleaseProfile | None = None, logs: LogDirectory | None = None) -> tuple[Path, Path]:
    """Build, store and write a report; ``open_sources`` opens the bridge store's side once the arguments are
    checked, ``open_reader`` 2.x's database; ``release`` (bootstrap's decision) is named in its header, and
    ``logs`` (2.x's task logs) are scanned instead of its instance rows on a release without them. Raises
    LegacyDataDirNotConfiguredError, ConfigError, LegacyDatabaseError or a StorageError."""
    if settings.legacy_database_path is None:
        raise LegacyDataDirNotConfiguredError()
    try:
        thresholds = GateThresholds.from_env(os.environ if environ is None else environ)
    except ThresholdError as exc:
        raise ConfigError(exc.variable, exc.problem) from None
    if origin is not None and origin not in ORIGIN_ORDER:
        raise ConfigError("--origin", f"unknown origin {origin[:40]!r}; known: {', '.join(ORIGIN_ORDER)}")
    now = wall_clock_ms()
    since_ms = parse_since(since, now)
    out_dir = out_dir if out_dir is not None else Path("reports")
    check_out_dir(out_dir)
    reader = open_reader(settings.legacy_database_path)
    reader.check_is_legacy_database()
    console = console or Console(stderr=True)
    with open_sources() as sources:  # 2.x's database gone or locked mid-scan: the reader's LegacyDatabaseError
        report = _build_with_progress(settings, sources, reader, since_ms, now, origin, thresholds, console,
                                      release, logs)
        sources.archive.save_report(to_json(report), (since_ms, now), created_at_ms=now)
    return write_report(report, out_dir)


def _build_with_progress(settings: Settings, sources: ReportSources, reader: LegacyRecords, since_ms: int, now: int,
                         origin: str | None, thresholds: GateThresholds, console: Console,
                         release: ReleaseProfile | None, logs: LogDirectory | None) -> dict[str, Any]:
    with Progress(TextColumn("scanning 2.x instances"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("scan", total=None)
        return build_report(settings, sources, reader, since_ms=since_ms, until_ms=now,
                            origins=None if origin is None else [origin], thresholds=thresholds, now_ms=now,
                            progress=lambda done, total: bar.update(task, completed=done, total=total),
                            release=release, logs=logs)
