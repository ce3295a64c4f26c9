"""`bridge report`: 2.x's RunningInstances set against the shadow Runs, per execution origin, over a window.

Composition-level, like ``bridge/callbacks/interception.py``: 2.x is read through LegacyReader in keyset batches, the
bridge store through the ReportReads port (bridge.service.reports), and the pure ``projections.gates`` /
``projections.report`` turn the figures into the versioned JSON document and ``projections.report_html`` into the page.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bridge.config import ConfigError, Settings, local_zone_name
from bridge.domain.errors import BridgeError
from bridge.domain.events import EventType
from bridge.domain.keys import execution_key, import_key
from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import IMPORTED_MODE, Origin
from bridge.service.reports import MAX_KEYS, ReportReads, ReportSources
from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.errors import LegacyDatabaseError, LegacyTimeError
from legacy_adapters.identity import instance_import_key
from legacy_adapters.origin import infer_scheduled_origin
from legacy_adapters.reader import LegacyReader
from legacy_adapters.records import LegacyInstance
from legacy_adapters.scheduler_mode import detect_scheduler_mode
from legacy_adapters.schema import ENDED_INSTANCE, InstanceStatus
from legacy_adapters.timeconv import epoch_seconds_to_ms
from projections.gates import GateThresholds, OriginFigures, ThresholdError, Window
from projections.report import assemble, example, origin_entry, timeline, to_json, unobservable_entry
from projections.report_html import render_html

BATCH_SIZE = 500
CRON_CACHE_SIZE = 4096
EXAMPLES_PER_KIND, MAX_EXAMPLES = 3, 20
ATTRIBUTION_CAP = 20_000  # unattributed callback mismatches held in memory while scanning
CRON_TRACK_CAP = 100_000
SKEW_S = 86_400  # 2.x inserts an instance when it starts: ids follow started_at, give or take a clock step
DEFAULT_WINDOW_MS = 7 * 86_400_000
UNKNOWN = "unknown"
UNOBSERVABLE = frozenset({Origin.SUBSCRIPTION.value, Origin.SYSTEM.value})
ORIGIN_ORDER = (*(o.value for o in Origin), UNKNOWN)
# legacy-2x.md 2.8: the shadow Run status each ended InstanceStatus should sit beside.
EXPECTED_STATUS = {int(status): ended.run.value for status, ended in ENDED_INSTANCE.items()}
ProgressCallback = Callable[[int, int], None]  # (rows scanned so far, rows to scan), in instance ids


class LegacyDataDirNotConfiguredError(LegacyDatabaseError):
    """The report needs 2.x's database and BRIDGE_LEGACY_DATA_DIR does not say where it is."""

    def __init__(self) -> None:
        BridgeError.__init__(self, "BRIDGE_LEGACY_DATA_DIR is not set: the report compares 2.x's RunningInstances "
                             "(<data dir>/db/database.sqlite) with the shadow Runs", reason="not_configured")
        self.path, self.reason = "", "not_configured"


class _Tally:
    """Per-origin figures accumulated instance by instance, plus which origins each cron ran under."""

    def __init__(self) -> None:
        self.figures: dict[str, OriginFigures] = {}
        self.cron_origins: dict[int, set[str]] = {}

    def fig(self, origin: str | None) -> OriginFigures:
        name = origin or UNKNOWN
        if name not in self.figures:
            self.figures[name] = OriginFigures(name)
        return self.figures[name]

    def count(self, instance: LegacyInstance, run: Mapping[str, Any] | None, origin: str) -> None:
        f = self.fig(origin)
        f.executions_observed += 1
        if instance.cron_id is not None and (instance.cron_id in self.cron_origins
                                             or len(self.cron_origins) < CRON_TRACK_CAP):
            self.cron_origins.setdefault(instance.cron_id, set()).add(origin)
        if run is None:
            return
        f.with_shadow_run += 1
        expected = EXPECTED_STATUS.get(instance.status) if instance.status is not None else None
        if expected is None:
            return  # still running (or an unknown status): nothing terminal to compare yet
        f.terminal_pairs += 1
        f.terminal_status_agree += int(run["status"] == expected)
        if instance.exit_code is None:
            return
        f.exit_code_pairs += 1
        if instance.status == InstanceStatus.STOPPED:
            f.exit_code_agree += int(run["status"] == "cancelled")  # stopInstance's 143 pairs with a cancel
        else:
            f.exit_code_agree += int(run["exit_code"] is not None and run["exit_code"] == instance.exit_code)


def build_report(settings: Settings, sources: ReportSources, reader: LegacyReader, *, since_ms: int, until_ms: int,
                 origins: Sequence[str] | None = None, thresholds: GateThresholds | None = None,
                 now_ms: int | None = None, progress: ProgressCallback | None = None,
                 batch_size: int = BATCH_SIZE) -> dict[str, Any]:
    """The cutover-report document for ``origins`` (None: all) over [since_ms, until_ms]."""
    thresholds = thresholds or GateThresholds()
    window = Window(since_ms, until_ms, settings.legacy_tz or local_zone_name())  # 2.x's zone, for its schedules too
    queries = sources.reads
    tally, notes = _Tally(), list[str]()
    pending = _load_unattributed(queries, window, notes)
    scan = _Scan(reader, queries, tally, pending, settings, window, batch_size)
    scan.run(progress)
    notes += scan.notes
    _attribute_leftovers(pending, tally)
    _store_figures(queries, tally, window, thresholds)
    modes = queries.origin_modes()
    if origins is None:
        selected = [o for o in ORIGIN_ORDER if o != UNKNOWN or o in tally.figures]
        selected += sorted(set(tally.figures) - set(ORIGIN_ORDER))  # an origin a newer bridge wrote
    else:
        selected = list(dict.fromkeys(origins))
    seam = _seam_findings(sources, window)
    entries = [_entry(o, tally, thresholds, window, modes.get(o), seam[o].message if o in seam else None)
               for o in selected]
    wanted = None if origins is None else [None if o == UNKNOWN else o for o in selected]
    rows = queries.mismatch_timeline(since_ms, until_ms, wanted)
    report = assemble(generated_at_ms=now_ms if now_ms is not None else _now_ms(), window=window,
                      thresholds=thresholds, origins=entries, mismatch_timeline=timeline(rows),
                      notes=[f.message for f in seam.values()] + _standard_notes(scan.excluded) + notes
                      + _projection_notes(sources))
    return report


def _seam_findings(sources: ReportSources, window: Window) -> dict[str, Any]:
    """Origins whose executions in the window mostly never reached the bridge (projections/seam.py)."""
    from projections.seam import bypass_findings

    return {f.origin: f for f in bypass_findings(sources.coverage(window.start_ms))}


def _projection_notes(sources: ReportSources) -> list[str]:
    """Primary mode: parked projection rows are shown, never hidden (`bridge projection retry` re-queues them)."""
    status = sources.outbox_status()
    parked = status["counts"].get("parked", 0)
    if not parked:
        return []
    crons = ", ".join(str(row["legacy_cron_id"]) for row in status["parked"])
    return [f"{parked} projection outbox row(s) are parked (2.x's columns are behind for cron(s) {crons}); "
            "run `bridge projection retry` once 2.x's database accepts writes."]


class _Scan:
    """Streams RunningInstances in id order, looks up each batch's Runs in one query, and tallies them."""

    def __init__(self, reader: LegacyReader, queries: ReportReads, tally: _Tally,
                 pending: dict[tuple[int | None, Any, Any], list[str]], settings: Settings, window: Window,
                 batch_size: int) -> None:
        self.reader, self.queries, self.tally, self.pending = reader, queries, tally, pending
        self.window, self.batch_size = window, batch_size
        self.tz = ZoneInfo(window.zone)
        self.scheduler_mode = (detect_scheduler_mode() if settings.legacy_scheduler == "auto"
                               else settings.legacy_scheduler)
        self.get_cron = lru_cache(maxsize=CRON_CACHE_SIZE)(reader.get_cron)
        self.excluded, self.notes = 0, list[str]()

    def run(self, progress: ProgressCallback | None) -> None:
        last_id = _last_instance_id(self.reader)
        start_after = _first_candidate_id(self.reader, self.window.start_ms // 1000 - SKEW_S, last_id)
        if start_after:
            self.notes.append(f"RunningInstances were scanned after id {start_after}: earlier rows started more "
                              f"than {SKEW_S // 3600} h before the window.")
        batch: list[tuple[LegacyInstance, int]] = []
        stop_s, total, scanned = self.window.end_ms // 1000 + SKEW_S, max(last_id - start_after, 1), 0
        for instance in self.reader.iter_instances(after_id=start_after, batch_size=self.batch_size):
            started_ms = _started_ms(instance)
            if started_ms is not None and self.window.start_ms <= started_ms <= self.window.end_ms:
                batch.append((instance, started_ms))
            if len(batch) >= self.batch_size:
                self._flush(batch)
                batch = []
            scanned += 1
            if progress is not None and scanned % self.batch_size == 0:
                progress(min(instance.id - start_after, total), total)
            if instance.started_at is not None and instance.started_at > stop_s:
                break  # ids follow start times: nothing later can fall in the window
        self._flush(batch)
        if progress is not None:
            progress(total, total)

    def _flush(self, batch: list[tuple[LegacyInstance, int]]) -> None:
        if not batch:
            return
        keys = {i.id: _run_key(i, ms) for i, ms in batch}
        # History brought in by `bridge import-legacy` is keyed by the execution (or, by earlier imports, the row).
        imported = {i.id: (instance_import_key(i), import_key(i.id)) for i, _ in batch}
        wanted = [k for k in keys.values() if k is not None] + sorted({k for pair in imported.values() for k in pair})
        runs: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), MAX_KEYS):  # up to three keys a row: more than one lookup takes
            runs.update(self.queries.runs_by_keys(wanted[start:start + MAX_KEYS]))
        for instance, started_ms in batch:
            key = keys[instance.id]
            run = ((runs.get(key) if key is not None else None) or runs.get(imported[instance.id][0])
                   or runs.get(imported[instance.id][1]))
            if run is not None and run.get("mode") == IMPORTED_MODE:
                self.excluded += 1
                self.tally.fig(run.get("origin")).legacy_import_excluded += 1
                continue
            origin = (run.get("origin") or UNKNOWN) if run is not None else self._inferred(instance, started_ms)
            self.tally.count(instance, run, origin)
            for kind in self.pending.pop((instance.cron_id, instance.pid, log_path_digest(instance.log_path)), []):
                _count_callback(self.tally.fig(origin), kind)

    def _inferred(self, instance: LegacyInstance, started_ms: int) -> str:
        cron = self.get_cron(instance.cron_id) if instance.cron_id is not None else None
        if cron is None:
            return UNKNOWN
        return infer_scheduled_origin(cron, started_ms // 1000, self.scheduler_mode, self.tz).origin


def _started_ms(instance: LegacyInstance) -> int | None:
    try:
        return epoch_seconds_to_ms(instance.started_at, field="started_at") if instance.started_at else None
    except LegacyTimeError:
        return None


def _run_key(instance: LegacyInstance, started_ms: int) -> str | None:
    """The shadow Run's idempotency key for this instance (bridge/service/shadow.py CallbackFacts)."""
    if instance.cron_id is None:
        return None
    return execution_key(instance.cron_id, instance.pid, log_path_digest(instance.log_path), started_ms)


def _probe(reader: LegacyReader, after_id: int) -> LegacyInstance | None:
    """The first instance with an id above ``after_id`` (one LIMIT 1 statement)."""
    for row in reader.iter_instances(after_id=after_id, batch_size=1):
        return row
    return None


def _last_instance_id(reader: LegacyReader) -> int:
    """The highest RunningInstances id (0 when empty): doubling, then halving probes on the primary key."""
    if _probe(reader, 0) is None:
        return 0
    high = 1
    while _probe(reader, high) is not None:
        high *= 2
    low = 0  # invariant: low <= last id <= high
    while low < high:
        mid = (low + high) // 2
        row = _probe(reader, mid)
        if row is None:
            high = mid
        else:
            low = row.id
    return low


def _first_candidate_id(reader: LegacyReader, cutoff_s: int, last_id: int) -> int:
    """The largest id after which every row started at or after ``cutoff_s`` (binary search on the PK)."""
    lo, hi = 0, last_id
    while lo < hi:
        mid = (lo + hi) // 2
        row = _probe(reader, mid)
        if row is None or row.started_at is None or row.started_at >= cutoff_s:
            hi = mid
        else:
            lo = row.id
    return lo


def _count_callback(figures: OriginFigures, kind: str, n: int = 1) -> None:
    if kind == EventType.COMPAT_AMBIGUOUS_CALLBACK:
        figures.ambiguous_callbacks += n
    else:
        figures.unmatched_callbacks += n


def _load_unattributed(queries: ReportReads, window: Window,
                       notes: list[str]) -> dict[tuple[int | None, Any, Any], list[str]]:
    """Callback mismatches without an origin, keyed by (cron, pid, log digest) from their diff."""
    pending: dict[tuple[int | None, Any, Any], list[str]] = {}
    after, loaded = 0, 0
    while loaded < ATTRIBUTION_CAP:
        limit = min(1000, ATTRIBUTION_CAP - loaded)
        page = queries.unattributed_callbacks(window.start_ms, window.end_ms, after, limit)
        for row in page:
            diff = _json_dict(row["diff"])
            pending.setdefault((row["legacy_cron_id"], diff.get("pid"), diff.get("log_ref")), []).append(row["kind"])
        loaded += len(page)
        if len(page) < limit:
            return pending
        after = int(page[-1]["id"])
    notes.append(f"Only the first {ATTRIBUTION_CAP} callback mismatches without an origin were attributed.")
    return pending


def _attribute_leftovers(pending: dict[tuple[int | None, Any, Any], list[str]], tally: _Tally) -> None:
    """A callback no instance matched goes to its cron's only origin in the window, else to unknown."""
    for (cron_id, _pid, _log), kinds in pending.items():
        origins = tally.cron_origins.get(cron_id) if cron_id is not None else None
        target = next(iter(origins)) if origins and len(origins) == 1 else UNKNOWN
        for kind in kinds:
            _count_callback(tally.fig(target), kind)


def _store_figures(queries: ReportReads, tally: _Tally, window: Window, thresholds: GateThresholds) -> None:
    """What only the bridge store knows: open mismatches, stale ones, callbacks with an origin, runs, failures."""
    for (origin, kind), n in queries.callback_counts(window.start_ms, window.end_ms).items():
        if origin is not None:  # those without one were attributed during the scan
            _count_callback(tally.fig(origin), kind, n)
    for (origin, kind), n in sorted(queries.open_mismatch_counts().items(), key=lambda i: (i[0][0] or "", i[0][1])):
        f = tally.fig(origin)
        f.open_mismatches_by_kind[kind] = f.open_mismatches_by_kind.get(kind, 0) + n
        room = MAX_EXAMPLES - len(f.examples)
        if room > 0:
            f.examples += [example(r, window.zone) for r in queries.open_mismatch_examples(
                origin, kind, min(EXAMPLES_PER_KIND, room))]
    for (origin, kind, expired), n in sorted(queries.closed_mismatch_counts(window.start_ms, window.end_ms).items(),
                                             key=lambda i: (i[0][0] or "", i[0][1], i[0][2] or "")):
        f = tally.fig(origin)
        if expired is None:
            _add(f.resolved_mismatches_by_kind, kind, n)
        else:
            _add(f.expired_mismatches_by_kind, kind, n)
            _add(f.expired_mismatches_by_reason, expired, n)
    for f in tally.figures.values():
        f.duplicates = f.open_mismatches_by_kind.get(MismatchKind.DUPLICATE, 0)
        f.stuck_runs = f.open_mismatches_by_kind.get(MismatchKind.STUCK, 0)
    for origin, n in queries.stale_mismatch_counts(thresholds.stale_mismatch_kinds, window.start_ms).items():
        tally.fig(origin).stale_mismatches += n
    for origin, n in queries.runs_created_by_origin(window.start_ms, window.end_ms).items():
        tally.fig(origin).runs_created += n
    for origin, n in queries.shadow_write_failures(window.start_ms, window.end_ms).items():
        tally.fig(origin).shadow_write_failures += n


def _add(counts: dict[str, int], key: str, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def _entry(origin: str, tally: _Tally, thresholds: GateThresholds, window: Window, mode: str | None,
           seam: str | None) -> dict[str, Any]:
    """One origin's entry; ``seam`` is the finding that its callbacks bypass the bridge, which leads its verdict."""
    if origin in UNOBSERVABLE:
        return unobservable_entry(origin, mode=mode)
    figures = tally.figures.get(origin) or OriginFigures(origin)
    if origin == UNKNOWN:
        return origin_entry(figures, thresholds, window, mode=None, promotable=False, seam=seam,
                            note="executions and mismatches that could not be attributed to an origin")
    return origin_entry(figures, thresholds, window, mode=mode, seam=seam)


def _standard_notes(excluded: int) -> list[str]:
    notes = [
        "Instances are placed in the window by 2.x's started_at (whole seconds); the window is inclusive.",
        "An instance without a shadow Run is attributed by its schedule only: manual and boot runs without a "
        "Run count under scheduled_* or script.",
        "subscription and system executions carry no cron ID and send no status callback: not observable.",
        "Open mismatch counts, duplicates and stuck runs are the reconciler's open rows at report time; only "
        "open mismatches reach the gates. Resolved and expired ones are those closed inside the window: resolved "
        "when a pass judged them again and found agreement, expired when no pass can judge them any more.",
        "shadow_write_failures counts compat.shadow_write_failed events; failures that left no Run appear only "
        "in the ql_bridge_shadow_write_failed_total metric.",
    ]
    if excluded:
        notes.append(f"{excluded} instance(s) matched Runs imported from 2.x history (mode legacy_import) and "
                     "were left out.")
    return notes


def _json_dict(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- files and the command --------------------------------------------------------------------------------


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


def run_report(settings: Settings, open_sources: Callable[[], AbstractContextManager[ReportSources]], *,
               since: str | None = None, origin: str | None = None, out_dir: Path | None = None,
               console: Console | None = None, environ: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """Build, store and write a report; ``open_sources`` opens the bridge store's side once the arguments are
    checked. Raises LegacyDataDirNotConfiguredError, ConfigError, LegacyDatabaseError or a StorageError."""
    if settings.legacy_database_path is None:
        raise LegacyDataDirNotConfiguredError()
    try:
        thresholds = GateThresholds.from_env(os.environ if environ is None else environ)
    except ThresholdError as exc:
        raise ConfigError(exc.variable, exc.problem) from None
    if origin is not None and origin not in ORIGIN_ORDER:
        raise ConfigError("--origin", f"unknown origin {origin[:40]!r}; known: {', '.join(ORIGIN_ORDER)}")
    now = _now_ms()
    since_ms = parse_since(since, now)
    out_dir = out_dir if out_dir is not None else Path("reports")
    check_out_dir(out_dir)
    reader = LegacyReader(settings.legacy_database_path)
    reader.check_is_legacy_database()
    console = console or Console(stderr=True)
    with open_sources() as sources:
        try:
            report = _build_with_progress(settings, sources, reader, since_ms, now, origin, thresholds, console)
            sources.archive.save_report(to_json(report), (since_ms, now), created_at_ms=now)
        except sqlite3.Error as exc:  # 2.x's database went away or stayed locked mid-scan
            raise LegacyDatabaseError(str(reader.path), "unreadable", type(exc).__name__) from exc
    return write_report(report, out_dir)


def _build_with_progress(settings: Settings, sources: ReportSources, reader: LegacyReader, since_ms: int, now: int,
                         origin: str | None, thresholds: GateThresholds, console: Console) -> dict[str, Any]:
    with Progress(TextColumn("scanning 2.x instances"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("scan", total=None)
        return build_report(settings, sources, reader, since_ms=since_ms, until_ms=now,
                            origins=None if origin is None else [origin], thresholds=thresholds, now_ms=now,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))
