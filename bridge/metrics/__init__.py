"""BridgeMetrics: the Prometheus metrics of docs/metrics.md on a registry owned by one app.

Every name of the bridge's own starts with `ql_bridge_`; prometheus_client's process and platform collectors keep
their standard names (`process_resident_memory_bytes`, `python_info`), so stock dashboards and alerts work as they
are. Counters end in `_total`
and timings are in seconds. Labels are bounded by construction: every label value passes through an
allowlist, so a cron id, run id, command or user can never become a label (anything unknown is reported as
"other"). The store-backed gauges are ``store_gauges``' (beside this module), registered here by bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from types import MappingProxyType

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from bridge.domain.events import EventType, RunEvent
from bridge.domain.model import Mode, Origin, RunStatus
from legacy_adapters.database_state import DatabaseState
from legacy_adapters.routes import STATUS_PATHS, STOP_PATHS

PREFIX = "ql_bridge_"
_RUN_STATUSES = frozenset(s.value for s in RunStatus)
_RUN_MOVES = frozenset(EventType.for_run_status(s.value) for s in RunStatus if s is not RunStatus.CREATED)
ORIGINS = frozenset(o.value for o in Origin) | {"unknown"}
_EVENT_TYPES = frozenset(t.value for t in EventType)
_TRANSITION_RESULTS = frozenset({"ok", "invalid"})
_RESULTS = frozenset({"ok", "conflict", "invalid", "error", "recorded", "duplicate", "parked", "applied",
                      "retried", "failed", "skipped", "locked"})
RECONCILE_RESULTS = ("ok", "failed", "locked")
PROJECTION_RESULTS = ("applied", "retried", "parked", "failed")
# shadow_write_failures_total's error label for a BridgeError code; any other code counts as "internal".
SHADOW_FAILURE_LABELS: Mapping[str, str] = MappingProxyType({
    "STORE_BUSY": "store_busy", "STORE_UNAVAILABLE": "store_unavailable", "LEGACY_DATABASE": "legacy_unreadable",
    "RUN_VERSION_CONFLICT": "conflict", "ATTEMPT_CONFLICT": "conflict", "INVALID_LEGACY_TIME": "invalid",
    "PAYLOAD_INVALID": "invalid", "INVALID_RUN_TRANSITION": "invalid", "INVALID_ATTEMPT_TRANSITION": "invalid"})
_ERRORS = frozenset({"timeout", "overload", "internal", *SHADOW_FAILURE_LABELS.values()})
_COMMANDS = frozenset({"create_run", "transition_run", "create_attempt", "transition_attempt", "request_cancel",
                       "shadow_start", "shadow_end", "shadow_cancel", "reconcile"})
_PROJECTIONS = frozenset({"crontab_status", "crontab_pid", "running_instance", "crontab_times"})
_KINDS = frozenset({"unmatched", "ambiguous", "start", "end", "duplicate", "late"})
# Why a fact went to the local journal (journal_kept_total): the store's refusals (as shadow_write_failed names
# them), behind facts kept already, the lanes full, or a primary start handed to 2.x.
_KEPT = frozenset({"store_unavailable", "store_busy", "queued", "overload"})
# Why a primary callback went to 2.x (primary_fallback_total).
_FALLBACKS = frozenset({"store_unavailable", "store_busy", "keyv_unreadable"})
_DROPPED = frozenset({"full", "error"})
_REPLAYED = frozenset({"ok", "failed", "undecodable"})
# What a callback was (legacy_callback_total): the status callback's two, the two stops, anything else.
CALLBACK_KINDS = frozenset({"start", "end", "stop", "instance_stop", "other"})
_MODES = frozenset(m.value for m in Mode)
_CALLBACK_PATHS = STATUS_PATHS | STOP_PATHS  # the bodies the oversize counter may name
_LEGACY_STATES = frozenset(s.value for s in DatabaseState) - {DatabaseState.OK.value}
_LEGACY_USES = frozenset({"shadow", "projection", "recovery", "auth"})
ONE_PROCESS_HELP = (
    "Always 1; names this bridge's version. Every counter and histogram here is this one process's own "
    "since it started (ql-bridge serve is one process), reset by a restart; the store "
    "gauges (outbox, mismatches, reconcile, coverage) read the shared store, so replicas agree on them. "
    "Two processes behind one address would answer scrapes in turn and their counters would disagree: "
    "scrape each process as its own target and tell them apart by process_start_time_seconds."
)


def bounded(value: str | None, allowed: Iterable[str]) -> str:
    return value if value is not None and value in allowed else "other"


def _package_version() -> str:
    try:
        return version("ql-bridge")
    except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
        return "unknown"


class BridgeMetrics:
    """Counters and histograms; also the service layer's ServiceMetrics port."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the output
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r, p = self.registry, PREFIX
        self._transition = Counter(p + "run_transition_total", "Run status changes: committed (ok) or refused "
                                   "as not allowed (invalid)", ["from", "to", "result"], registry=r)
        self._conflict = Counter(p + "run_transition_conflict_total", "Compare-and-set misses", ["command"],
                                 registry=r)
        self._event = Counter(p + "run_event_append_total", "Events committed, by type", ["type"], registry=r)
        self._shadow_created = Counter(p + "shadow_run_create_total", "Shadow Runs created", ["origin"], registry=r)
        self._shadow_failed = Counter(p + "shadow_write_failed_total", "Shadow writes that failed or overran",
                                      ["origin", "error"], registry=r)
        self._unmatched = Counter(p + "shadow_callback_unmatched_total", "Callbacks with no or several candidates",
                                  ["origin", "kind"], registry=r)
        self._late = Counter(p + "attempt_late_callback_total", "Callbacks for a terminal attempt", ["type"],
                             registry=r)
        self._proj_mismatch = Counter(p + "run_projection_mismatch_total", "2.x vs Run disagreements",
                                      ["projection"], registry=r)
        self._proj_retry = Counter(p + "projection_retry_total", "Projection attempts, by outcome", ["result"],
                                   registry=r)
        self._reconcile = Counter(p + "reconcile_total", "Reconcile passes, by outcome", ["result"], registry=r)
        self._callbacks = Counter(p + "legacy_callback_total", "Callbacks that reached the bridge, by kind (start, "
                                  "end, stop, instance_stop, other) and how they were handled: off (passed "
                                  "through), shadow (forwarded and watched), primary (answered by the bridge)",
                                  ["kind", "mode"], registry=r)
        self._oversize = Counter(p + "callback_body_oversize_total", "Status callbacks over the body cap: forwarded "
                                 "to 2.x, neither parsed nor recorded", ["path"], registry=r)
        self._legacy_db = Counter(p + "legacy_database_unavailable_total", "Reads or writes of 2.x's database that "
                                  "met it locked, hot-journaled, missing, damaged or foreign", ["state", "use"],
                                  registry=r)
        self._flags_failed = Counter(p + "flags_refresh_failed_total", "Reads of the flag table that failed; the "
                                     "last flags read stayed in force", ["error"], registry=r)
        self._flags_age = Gauge(p + "flags_age_seconds", "Age of the flags in force (since they were last read); "
                                "grows only while refreshes fail", registry=r)
        self._journal_kept = Counter(p + "journal_kept_total", "Facts kept in the local journal because the store "
                                     "did not take them, or behind facts kept already", ["reason"], registry=r)
        self._journal_dropped = Counter(p + "journal_dropped_total", "Facts the local journal could not keep (full, "
                                        "or its disk failed): lost, and logged", ["reason"], registry=r)
        self._journal_replayed = Counter(p + "journal_replayed_total", "Kept facts executed again once the store "
                                         "took writes, by outcome", ["result"], registry=r)
        self._primary_fallback = Counter(p + "primary_fallback_total", "Primary callbacks the bridge could not be the "
                                         "record of in time, answered and recorded by 2.x instead (the bridge "
                                         "records them beside it)", ["reason"], registry=r)
        self._journal_facts = Gauge(p + "journal_rows", "Facts held in the local journal", registry=r)
        self._journal_age = Gauge(p + "journal_oldest_age_seconds", "Age of the oldest fact held in the local "
                                  "journal (0 when empty)", registry=r)
        self.journal_replay_lag_seconds = Histogram(p + "journal_replay_lag_seconds", "From keeping a fact to "
                                                    "executing it again", registry=r,
                                                    buckets=(.1, .5, 1, 5, 15, 30, 60, 300, 900, 3600))
        self.forward_seconds = Histogram(p + "forward_seconds", "Time to forward a request to 2.x",
                                         registry=r, buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, 1, 5))
        self.shadow_write_seconds = Histogram(p + "shadow_write_seconds", "Time of one shadow write", registry=r,
                                              buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1))
        Gauge(p + "info", ONE_PROCESS_HELP, ["version"], registry=r).labels(_package_version()).set(1)
        ProcessCollector(registry=r)  # RSS, CPU, open fds, start time (Linux /proc)
        PlatformCollector(registry=r)
        for result in RECONCILE_RESULTS:  # known outcomes exist from the start: rate() and alerts see a 0
            self._reconcile.labels(result)
        for result in PROJECTION_RESULTS:
            self._proj_retry.labels(result)

    # ServiceMetrics port
    def transition(self, from_status: str, to_status: str, result: str) -> None:
        self._transition.labels(bounded(from_status, _RUN_STATUSES), bounded(to_status, _RUN_STATUSES),
                                bounded(result, _TRANSITION_RESULTS)).inc()

    def conflict(self, command: str) -> None:
        self._conflict.labels(bounded(command, _COMMANDS)).inc()

    def events_appended(self, events: Sequence[RunEvent]) -> None:
        """Committed events; a Run status event is also the transition it records, whichever path wrote it."""
        for event in events:
            self._event.labels(bounded(event.type.value, _EVENT_TYPES)).inc()
            if event.type in _RUN_MOVES and "from" in event.payload:
                self.transition(event.payload["from"], event.payload["to"], "ok")

    # Shadow path
    def shadow_run_created(self, origin: str | None) -> None:
        self._shadow_created.labels(bounded(origin, ORIGINS)).inc()

    def shadow_write_failed(self, origin: str | None, error: str) -> None:
        self._shadow_failed.labels(bounded(origin, ORIGINS), bounded(error, _ERRORS)).inc()

    def shadow_write_refused(self, origin: str | None, code: str) -> None:
        """A shadow write the store or the domain refused with BridgeError ``code``."""
        self.shadow_write_failed(origin, SHADOW_FAILURE_LABELS.get(code, "internal"))

    def callback_unmatched(self, origin: str | None, kind: str) -> None:
        self._unmatched.labels(bounded(origin, ORIGINS), bounded(kind, _KINDS)).inc()

    def late_callback(self, type_: str) -> None:
        self._late.labels(bounded(type_, _KINDS)).inc()

    def callback_seen(self, kind: str, mode: str) -> None:
        self._callbacks.labels(bounded(kind, CALLBACK_KINDS), bounded(mode, _MODES)).inc()

    # Reconciliation and projection
    def projection_mismatch(self, projection: str) -> None:
        self._proj_mismatch.labels(bounded(projection, _PROJECTIONS)).inc()

    def projection_retry(self, result: str) -> None:
        self._proj_retry.labels(bounded(result, _RESULTS)).inc()

    def reconcile(self, result: str) -> None:
        self._reconcile.labels(bounded(result, _RESULTS)).inc()

    def callback_body_oversize(self, path: str) -> None:
        self._oversize.labels(bounded(path, _CALLBACK_PATHS)).inc()

    def flags_refresh_failed(self, error: str) -> None:
        """``error``: a BridgeError code (STORE_UNAVAILABLE → store_unavailable) or anything else (internal)."""
        self._flags_failed.labels(SHADOW_FAILURE_LABELS.get(error, "internal")).inc()

    def watch_flags_age(self, age_s: Callable[[], float | None]) -> None:
        """The flags gauge reads ``age_s`` at scrape time (0 before any read: nothing is in force yet)."""
        self._flags_age.set_function(lambda: age_s() or 0.0)

    def primary_fallback(self, reason: str) -> None:
        self._primary_fallback.labels(bounded(reason, _FALLBACKS)).inc()

    def journal_kept(self, reason: str) -> None:
        self._journal_kept.labels(bounded(reason, _KEPT)).inc()

    def journal_dropped(self, reason: str) -> None:
        self._journal_dropped.labels(bounded(reason, _DROPPED)).inc()

    def journal_replayed(self, result: str) -> None:
        self._journal_replayed.labels(bounded(result, _REPLAYED)).inc()

    def watch_journal(self, size: Callable[[], int], oldest_age_s: Callable[[], float]) -> None:
        """The journal gauges read ``size`` and ``oldest_age_s`` at scrape time."""
        self._journal_facts.set_function(lambda: float(size()))
        self._journal_age.set_function(oldest_age_s)

    def legacy_database_unavailable(self, state: str, use: str) -> None:
        self._legacy_db.labels(bounded(state, _LEGACY_STATES), bounded(use, _LEGACY_USES)).inc()

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample (0 when absent); for tests and `bridge status`."""
        found = self.registry.get_sample_value(name, labels)
        return found or 0.0
