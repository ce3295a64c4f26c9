"""The report document: the scan's tally, what only the bridge store knows, and the notes, per origin."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bridge.config import Settings, local_zone_name
from bridge.domain.mismatches import MismatchKind
from bridge.domain.model import Origin
from bridge.jobs.report.log_scan import LogScan
from bridge.jobs.report.scan import BATCH_SIZE, UNKNOWN, Pending, ProgressCallback, Scan, Tally, count_callback
from bridge.service.reports import ReportReads, ReportSources
from legacy_adapters.ports import LegacyRecords
from projections.gates import GateThresholds, OriginFigures, Window
from projections.report import assemble, example, origin_entry, timeline, unobservable_entry

if TYPE_CHECKING:
    from legacy_adapters.log_files import LogDirectory
    from legacy_adapters.releases import ReleaseProfile

EXAMPLES_PER_KIND, MAX_EXAMPLES = 3, 20
ATTRIBUTION_CAP = 20_000  # unattributed callback mismatches held in memory while scanning
UNOBSERVABLE = frozenset({Origin.SUBSCRIPTION.value, Origin.SYSTEM.value})
ORIGIN_ORDER = (*(o.value for o in Origin), UNKNOWN)


def build_report(settings: Settings, sources: ReportSources, reader: LegacyRecords, *, since_ms: int, until_ms: int,
                 origins: Sequence[str] | None = None, thresholds: GateThresholds | None = None,
                 now_ms: int | None = None, progress: ProgressCallback | None = None,
                 batch_size: int = BATCH_SIZE, release: ReleaseProfile | None = None,
                 logs: LogDirectory | None = None) -> dict[str, Any]:
    """The cutover-report document for ``origins`` (None: all) over [since_ms, until_ms]; ``release``: the 2.x
    release bootstrap decided, named in the header; ``logs``: 2.x's task logs, which are its executions' record
    where the release keeps no ``RunningInstances`` (then scanned instead of them)."""
    thresholds = thresholds or GateThresholds()
    window = Window(since_ms, until_ms, settings.legacy_tz or local_zone_name())  # 2.x's zone, for its schedules too
    queries = sources.reads
    tally, notes = Tally(), list[str]()
    pending = _load_unattributed(queries, window, notes)
    scan: Scan | LogScan
    if logs is not None:  # bootstrap gives them where the release keeps no RunningInstances
        scan = LogScan(logs, reader, queries, tally, settings, window,
                       release.name if release is not None else "before v2.21", batch_size)
    else:
        scan = Scan(reader, queries, tally, pending, settings, window, batch_size)
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
    report = assemble(generated_at_ms=now_ms if now_ms is not None else wall_clock_ms(), window=window,
                      thresholds=thresholds, origins=entries, mismatch_timeline=timeline(rows),
                      notes=[f.message for f in seam.values()] + _standard_notes(scan.excluded) + notes
                      + _projection_notes(sources), legacy_release=release_header(release))
    return report


def release_header(release: ReleaseProfile | None) -> dict[str, Any] | None:
    """The header's ``legacy_release``: the release's name, line, patch (None: not known) and the evidence."""
    if release is None:
        return None
    return {"name": release.name, "line": release.line.value, "patch": release.patch, "evidence": release.evidence}


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



def _load_unattributed(queries: ReportReads, window: Window,
                       notes: list[str]) -> Pending:
    """Callback mismatches without an origin, keyed by (cron, pid, log digest) from their diff."""
    pending: Pending = {}
    after, loaded = 0, 0
    while loaded < ATTRIBUTION_CAP:
        limit = min(1000, ATTRIBUTION_CAP - loaded)
        page = queries.unattributed_callbacks(window.start_ms, window.end_ms, after, limit)
        for row in page:
            diff = _json_dict(row.diff)
            pending.setdefault((row.legacy_cron_id, diff.get("pid"), diff.get("log_ref")), []).append(row.kind)
        loaded += len(page)
        if len(page) < limit:
            return pending
        after = page[-1].id
    notes.append(f"Only the first {ATTRIBUTION_CAP} callback mismatches without an origin were attributed.")
    return pending


def _attribute_leftovers(pending: Pending, tally: Tally) -> None:
    """A callback no instance matched goes to its cron's only origin in the window, else to unknown."""
    for (cron_id, _pid, _log), kinds in pending.items():
        origins = tally.cron_origins.get(cron_id) if cron_id is not None else None
        target = next(iter(origins)) if origins and len(origins) == 1 else UNKNOWN
        for kind in kinds:
            count_callback(tally.fig(target), kind)


def _store_figures(queries: ReportReads, tally: Tally, window: Window, thresholds: GateThresholds) -> None:
    """What only the bridge store knows: open mismatches, stale ones, callbacks with an origin, runs, failures."""
    for (origin, kind), n in queries.callback_counts(window.start_ms, window.end_ms).items():
        if origin is not None:  # those without one were attributed during the scan
            count_callback(tally.fig(origin), kind, n)
    for (origin, kind), n in sorted(queries.open_mismatch_counts().items(), key=lambda i: (i[0][0] or "", i[0][1])):
        f = tally.fig(origin)
        f.open_mismatches_by_kind[kind] = f.open_mismatches_by_kind.get(kind, 0) + n
        room = MAX_EXAMPLES - len(f.examples)
        if room > 0:
            f.examples += [example(asdict(r), window.zone) for r in queries.open_mismatch_examples(
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


def _entry(origin: str, tally: Tally, thresholds: GateThresholds, window: Window, mode: str | None,
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


def wall_clock_ms() -> int:
    return int(time.time() * 1000)

