"""The composition root: the only place that builds concrete engines, clients, stores and services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import Engine

from bridge.bootstrap.release import (
    build_execution_evidence,
    decide_legacy_release,
    legacy_zone,
    open_records,
    replacement_rule,
    task_logs,
)
from bridge.config import ConfigError, Settings
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.service.flags import CachedModes, FlagService
from bridge.service.imports import ImportUnitOfWork
from bridge.service.ports import Clock, ModeSource, ServiceMetrics
from bridge.service.run_service import RunService
from bridge.storage.engine import StoreDeadlines, make_engine, store_capabilities
from bridge.storage.migrate import refuse_legacy_database
from bridge.storage.runs import SqlRunStore
from bridge.storage.unit_of_work import SqlUnitOfWork, WriteOutcomes

if TYPE_CHECKING:  # the modules the functions below import lazily, for start-up time
    from collections import Counter
    from os import PathLike

    from bridge.callbacks.interception import ShadowInterceptor
    from bridge.callbacks.keeper import FactKeeper
    from bridge.jobs.housekeeping import Prune
    from bridge.jobs.project import ProjectorThread
    from bridge.jobs.reconcile import Reconciler
    from bridge.jobs.stop_decisions import StopDecisions
    from bridge.metrics.store_gauges import StoreGauges
    from bridge.service.ports import StepRunReader
    from bridge.service.queries import RunQueries
    from bridge.service.reconcile import ReconcileStore
    from bridge.service.seam import OriginCoverage
    from bridge.service.shadow import ShadowRecorder
    from bridge.storage.journal import SqliteFactJournal
    from bridge.storage.outbox import SqlOutbox
    from legacy_adapters.http_forward import CallbackForward
    from legacy_adapters.ports import LegacyRecords, OpenTokenCheck
    from legacy_adapters.process_identity import ProcProbe
    from legacy_adapters.releases import ReleaseProfile

KEPT_LEGACY_CONNECTIONS = 4  # read-only connections to 2.x's database kept open by `bridge serve`
# The flags in force are re-read off the callback path once they are FLAGS_TTL_S old, and asked for every
# FRESHEN_EVERY_S whether a callback comes or not: an operator's flip is in force within about a second.
FLAGS_TTL_S = 0.5
FRESHEN_EVERY_S = 0.25
JOURNAL_FILE = "journal/facts.sqlite"  # under BRIDGE_DATA_DIR: the facts the store did not take, until it does


@dataclass(frozen=True)
class StoreReaders:
    """What the web layer reads from the store: the v3 views, the last reconcile pass, recent coverage."""

    runs: RunQueries
    outbox: SqlOutbox  # for its counts (bridge.jobs.project.projection_status)
    step_runs: StepRunReader  # it cannot write
    last_pass: Callable[[], dict[str, Any] | None]
    coverage: Callable[[int], list[OriginCoverage]]  # per origin since an instant (ms)


def build_readers(engine: Engine) -> StoreReaders:
    from bridge.storage.outbox import SqlOutbox
    from bridge.storage.queries import SqlRunQueries
    from bridge.storage.reconcile_queries import SqlReconcileStore
    from bridge.storage.seam_queries import recent_coverage
    from bridge.storage.step_run_queries import SqlStepRunReader

    return StoreReaders(runs=SqlRunQueries(engine), outbox=SqlOutbox(engine), step_runs=SqlStepRunReader(engine),
                        last_pass=SqlReconcileStore(engine).last_pass,
                        coverage=partial(recent_coverage, engine))


@dataclass
class Store:
    engine: Engine
    uow: SqlUnitOfWork[SqlRunStore]
    runs: RunService
    writes: WriteOutcomes = field(init=False)  # what readiness judges the store on

    def __post_init__(self) -> None:
        self.writes = self.uow.outcomes  # fed by every write the unit of work commits or fails

    @cached_property
    def readers(self) -> StoreReaders:
        """Built on first use, once per store."""
        return build_readers(self.engine)

    def import_writes(self, *, busy_budget_ms: int, busy_attempts: int) -> ImportUnitOfWork:
        """The import's transactions on this store (bridge.storage.imports), with the busy retry it asks for."""
        from bridge.storage.imports import import_unit_of_work

        return import_unit_of_work(self.engine, busy_budget_ms=busy_budget_ms, busy_attempts=busy_attempts)

    @property
    def single_writer(self) -> bool:
        """One writer at a time (SQLite): the import paces its batches (bridge.jobs.import_legacy.pacing)."""
        return store_capabilities(self.engine).single_writer

    def schema_revisions(self) -> tuple[str | None, str]:
        """(the store's Alembic revision, None when empty; this code's head), for the import's schema check."""
        from bridge.storage.migrate import current_revision, head_revision

        return current_revision(self.engine), head_revision()

    def close(self) -> None:
        self.engine.dispose()


def build_store(settings: Settings, *, clock: Clock | None = None, metrics: ServiceMetrics | None = None) -> Store:
    """Engine, unit of work and RunService for the configured store (no connection is opened yet)."""
    if settings.database_url.startswith("sqlite:///"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url, pg_search_path=settings.database_schema,
                         deadlines=store_deadlines(settings))
    refuse_legacy_database(engine)  # before any connection could switch 2.x's file to WAL
    uow: SqlUnitOfWork[SqlRunStore] = SqlUnitOfWork(engine, busy_budget_ms=settings.sqlite_busy_budget_ms,
                                                    outcomes=WriteOutcomes())
    runs = RunService(uow, clock=clock or SystemClock(), metrics=metrics, payload_cap_bytes=settings.payload_cap_bytes)
    return Store(engine=engine, uow=uow, runs=runs)


def store_deadlines(settings: Settings) -> StoreDeadlines:
    """The store's deadlines from BRIDGE_STORE_* (docs/configuration.md#store-deadlines)."""
    return StoreDeadlines(statement_ms=settings.store_timeout_ms, connect_s=settings.store_connect_timeout_s,
                          keepalive_s=settings.store_keepalive_s)


def build_http_client(settings: Settings) -> httpx.Client:
    """Pooled client to 2.x. No redirects followed and no env proxies: the bridge relays, it does not browse."""
    timeout = httpx.Timeout(settings.forward_timeout_s, connect=5.0)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
    return httpx.Client(timeout=timeout, limits=limits, follow_redirects=False, trust_env=False)


def build_async_http_client(settings: Settings) -> httpx.AsyncClient:
    """Pooled async client to 2.x for the panel's traffic on the event loop: one connection per relayed request
    at most (``BRIDGE_CONNECTION_LIMIT``). The callbacks keep the container's own client (``build_http_client``),
    so 200 open streams never make a callback wait for a connection."""
    timeout = httpx.Timeout(settings.forward_timeout_s, connect=5.0)
    limits = httpx.Limits(max_connections=settings.connection_limit, max_keepalive_connections=16)
    return httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False, trust_env=False)


def build_callback_forward(settings: Settings) -> CallbackForward | None:
    """The status callbacks' own connections to an ``http://`` 2.x (legacy_adapters.http_forward); for an
    ``https://`` one they go through the container's httpx client (None)."""
    from legacy_adapters.http_forward import SocketForward

    if not settings.legacy_url.startswith("http://"):
        return None
    return SocketForward(settings.legacy_url, timeout_s=settings.forward_timeout_s)


@dataclass(frozen=True)
class Container:
    """Everything one bridge process uses, built whole before anything uses it; the web app and the CLI receive
    it ready-made."""

    settings: Settings
    metrics: BridgeMetrics
    http: httpx.Client
    store: Store | None = None
    flags: FlagService | None = None
    modes: CachedModes | None = None  # the flags in force for the callback path and the reconciler
    interceptor: ShadowInterceptor | None = None  # the callback path, or None for a pure pass-through
    callback_forward: CallbackForward | None = None  # the callbacks' forward to 2.x; None: through ``http``
    token_authority: OpenTokenCheck | None = None  # 2.x's App tokens (the /v3 API's authorisation)
    release: ReleaseProfile | None = None  # the 2.x release fronted; None without BRIDGE_LEGACY_DATA_DIR
    closers: tuple[Callable[[], object], ...] = ()  # run in reverse order by ``close``

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.http.close()
        if self.store is not None:
            self.store.close()


@dataclass(frozen=True)
class CallbackPath:
    """The callback machinery, built once by ``build_callback_path``: the recorder every shadow write goes
    through, the stop decisions that record through that same recorder (so a kept end and the Run it closes are
    seen alike), and the interceptor that feeds them."""

    recorder: ShadowRecorder
    stops: StopDecisions
    interceptor: ShadowInterceptor


def build_flags(store: Store, release: ReleaseProfile | None = None) -> FlagService:
    """The flag service; promotion to primary is refused, naming the release, where ``release`` cannot be the
    record (docs/releases.md#primary-mode). None: the release is not known here, and the gates alone decide."""
    from bridge.storage.flags import SqlFlagStore

    refusal = None if release is None else release.primary_refusal
    return FlagService(SqlFlagStore(store.engine), SystemClock().now_ms, primary_refusal=refusal)


def build_token_authority(settings: Settings, release: ReleaseProfile | None = None) -> OpenTokenCheck | None:
    """2.x's App tokens as the release checks them, or None without a 2.x data dir: from v2.18 its keyv cache
    (legacy_adapters.auth), on v2.17 its Apps table and auth.json (legacy_adapters.auth_apps_table)."""
    from legacy_adapters.auth import LegacyTokenAuthority
    from legacy_adapters.auth_apps_table import AppsTableTokenAuthority

    keyv_path, database_path = settings.legacy_keyv_path, settings.legacy_database_path
    if keyv_path is None or database_path is None or settings.legacy_data_dir is None:
        return None
    if release is not None and not release.keeps_keyv_cache:
        return AppsTableTokenAuthority(database_path, settings.legacy_data_dir / "config" / "auth.json")
    return LegacyTokenAuthority(keyv_path)


def build_store_gauges(settings: Settings, store: Store) -> StoreGauges:
    """The gauges read from the store at scrape time; reconcile and coverage only with a 2.x to compare with."""
    from bridge.metrics.store_gauges import StoreGauges
    from bridge.storage.gauge_queries import read_gauges

    interval = settings.reconcile_interval_s if settings.legacy_database_path is not None else None
    return StoreGauges(partial(read_gauges, store.engine), reconcile_interval_s=interval)


def build_container(settings: Settings, *, schedule_reconciler: bool = False,
                    recovery_deferred: bool = False) -> Container:
    """Everything `ql-bridge serve` runs on. Raises BridgeError when 2.x's data directory is foreign.

    ``schedule_reconciler``: the serving process, which also runs the projector, the stop decider, reconcile
    and housekeeping. ``recovery_deferred``: startup recovery could not read 2.x's database; the reconcile
    schedule runs it again before each pass until it has settled every Run."""
    metrics = BridgeMetrics()
    store = build_store(settings, metrics=metrics)
    closers: list[Callable[[], object]] = []
    callback_forward = build_callback_forward(settings)
    if callback_forward is not None:
        closers.append(callback_forward.close)
    metrics.registry.register(build_store_gauges(settings, store))
    legacy_database = settings.legacy_database_path
    release = decide_legacy_release(settings) if settings.legacy_data_dir is not None else None
    reader = build_legacy_reader(settings, keep_connections=KEPT_LEGACY_CONNECTIONS, release=release) \
        if legacy_database is not None else None
    flags = build_flags(store, release)
    modes = CachedModes(flags, ttl_s=FLAGS_TTL_S, max_stale_s=settings.flags_max_stale_s,
                        on_failure=metrics.flags_refresh_failed)
    metrics.watch_flags_age(modes.cache.age_s)
    closers.append(modes.cache.keep_fresh(FRESHEN_EVERY_S))
    authority = build_token_authority(settings, release)
    interceptor = None
    if reader is not None and legacy_database is not None:
        # One reader for the callback path and the reconciler, keeping a few connections open: a Crontabs
        # lookup precedes every start callback. Closed last (closers run in reverse).
        closers.append(reader.close)
        notify: Callable[[], None] = lambda: None  # noqa: E731 - no projector outside `bridge serve`
        if schedule_reconciler:  # the serving process: it also keeps 2.x's columns current (primary mode)
            projector = start_serving_projector(store, legacy_database, metrics, SystemClock())
            closers.append(projector.close)
            notify = projector.notify
        keeper = build_fact_keeper(settings, metrics)
        closers.append(keeper.close)
        callbacks = build_callback_path(settings, store, metrics, modes, reader=reader, auth=authority,
                                        on_primary_commit=notify, keeper=keeper.keeper, release=release)
        interceptor = callbacks.interceptor
        closers.append(interceptor.close)
        closers.append(interceptor.keep_fresh(FRESHEN_EVERY_S))
        # Drains the journal once the store takes writes; stopped first, before the lanes and the journal close.
        from bridge.callbacks.keeper import JournalReplayer

        closers.append(JournalReplayer(keeper.keeper, interceptor.execute_fact).start().close)
        if schedule_reconciler:
            closers.extend(_start_jobs(settings, store, metrics, flags, modes, reader, callbacks.stops, keeper.keeper,
                                       recovery_deferred=recovery_deferred, release=release))
    return Container(settings=settings, metrics=metrics, http=build_http_client(settings), store=store,
                     flags=flags, modes=modes, interceptor=interceptor, callback_forward=callback_forward,
                     token_authority=authority, release=release, closers=tuple(closers))


@dataclass(frozen=True)
class KeptFacts:
    """The local fact journal and its keeper (bridge.callbacks.keeper), closed with the process."""

    journal: SqliteFactJournal
    keeper: FactKeeper

    def close(self) -> None:
        self.journal.close()


def journal_holds_facts(settings: Settings) -> bool:
    """Whether the local journal kept facts a previous process could not write (startup recovery waits for them)."""
    from bridge.storage.journal import SqliteFactJournal

    path = settings.data_dir / JOURNAL_FILE
    if not path.exists():
        return False
    journal = SqliteFactJournal(path, capacity=settings.journal_max_facts)
    try:
        return journal.size() > 0
    finally:
        journal.close()


def build_fact_keeper(settings: Settings, metrics: BridgeMetrics, clock: Clock | None = None) -> KeptFacts:
    """The fact journal beside the bridge's data (``BRIDGE_DATA_DIR``; one per process that serves), its keeper,
    and its gauges."""
    from bridge.callbacks.keeper import FactKeeper
    from bridge.storage.journal import SqliteFactJournal

    journal = SqliteFactJournal(settings.data_dir / JOURNAL_FILE, capacity=settings.journal_max_facts)
    keeper = FactKeeper(journal, metrics, clock or SystemClock())
    metrics.watch_journal(keeper.size, keeper.oldest_age_s)
    return KeptFacts(journal, keeper)


def _start_jobs(settings: Settings, store: Store, metrics: BridgeMetrics, flags: FlagService, modes: CachedModes,
                reader: LegacyRecords, stops: StopDecisions, keeper: FactKeeper, *,
                recovery_deferred: bool, release: ReleaseProfile | None = None) -> list[Callable[[], object]]:
    """What runs beside the callbacks in the serving process: pending ends decided once their window is over,
    reconcile and housekeeping. Returns their closers."""
    from bridge.jobs.housekeeping import INTERVAL_S, run_housekeeping
    from bridge.jobs.schedule import start_reconcile_schedule
    from bridge.jobs.stop_decisions import StopDeciderThread, decider_interval_s

    decider = StopDeciderThread(stops, decider_interval_s(settings.stop_decision_window_s)).start()
    reconciler = build_reconciler(settings, store, metrics, flags, modes, reader=reader, release=release)
    clock = SystemClock()
    job = reconcile_job(settings, reconciler, store, metrics, keeper, recovery_deferred=recovery_deferred,
                        release=release)
    prunes = bookkeeping_prunes(store.engine)
    scheduler = start_reconcile_schedule(job, settings.reconcile_interval_s,
                                         lambda: run_housekeeping(prunes, clock.now_ms()), INTERVAL_S)
    return [decider.close, lambda: scheduler.shutdown(wait=True)]


def start_serving_projector(store: Store, legacy_database_path: str | PathLike[str], metrics: BridgeMetrics,
                            clock: Clock, interval_s: float = 2.0) -> ProjectorThread:
    """The projector thread of the serving process (bridge.jobs.project), started: it keeps 2.x's columns current
    for the executions the bridge owns."""
    from bridge.jobs.project import start_projector_thread
    from bridge.storage.outbox import SqlOutbox
    from legacy_adapters.status_writer import LegacyStatusWriter
    from projections.projector import Projector

    outbox, writer = SqlOutbox(store.engine), LegacyStatusWriter(legacy_database_path)
    return start_projector_thread(Projector(outbox, writer, metrics, clock), outbox, writer, clock, metrics,
                                  interval_s=interval_s)


def recover_unfinished_runs(settings: Settings, store: Store, *, reader: LegacyRecords | None = None,
                            probe: ProcProbe | None = None, release: ReleaseProfile | None = None) -> Counter[str]:
    """Startup recovery (bridge.jobs.recovery): the Runs a previous process left open, judged against 2.x's
    records (``release``'s; decided from ``settings`` when not given). Raises LegacyDatabaseError when the
    configured file is positively not 2.x's database."""
    return _recover(settings, store, reader or build_legacy_reader(settings, release=release), None, probe, release)


def _recover(settings: Settings, store: Store, reader: LegacyRecords, metrics: BridgeMetrics | None,
             probe: ProcProbe | None = None, release: ReleaseProfile | None = None) -> Counter[str]:
    """Startup recovery on ``store``: the stop decisions it settles first share its recorder and pending ends."""
    from bridge.jobs.recovery import recover_on_startup
    from bridge.service.shadow import ShadowRecorder
    from bridge.storage.reconcile_queries import SqlReconcileStore

    recorder = ShadowRecorder(store.runs)
    decisions = build_stop_decisions(settings, store, recorder, reader, release=release)
    assert decisions.pending is not None  # built keeping ends
    return recover_on_startup(SqlReconcileStore(store.engine), store.runs, reader, decisions.pending, probe,
                              decisions=decisions, recorder=recorder, metrics=metrics,
                              evidence=build_execution_evidence(settings, reader, release))


def reconcile_job(settings: Settings, reconciler: Reconciler, store: Store, metrics: BridgeMetrics,
                  keeper: FactKeeper, *, recovery_deferred: bool,
                  release: ReleaseProfile | None = None) -> Callable[[], object]:
    """The reconcile job. While the local journal holds facts the store has not got yet, no pass runs: it would
    judge executions whose facts are still on their way (a `missing` that is not, a Run called lost). When
    startup recovery was deferred, it runs first, until a recovery defers nothing any more."""
    pending = [recovery_deferred]

    def job() -> object:
        if keeper.holding:
            return None
        if pending[0]:
            outcomes = _recover(settings, store, reconciler.reader, metrics, release=release)
            pending[0] = any(outcome.startswith("deferred:") for outcome in outcomes)
        return reconciler.run_once()

    return job


def build_reconciler(settings: Settings, store: Store, metrics: BridgeMetrics, flags: FlagService | None,
                     modes: ModeSource | None = None, *, reader: LegacyRecords | None = None,
                     reconcile_store: ReconcileStore | None = None, probe: ProcProbe | None = None,
                     release: ReleaseProfile | None = None) -> Reconciler:
    """The reconcile pass, over ``reconcile_store`` when given (else one on the store's engine), judging 2.x's
    executions by what ``release`` keeps (decided from ``settings`` when not given). Without ``flags`` (a test's
    fixed modes), ``modes`` alone decides and every origin counts as enabled from the start."""
    from bridge.jobs.reconcile import Reconciler, ReconcileSettings
    from bridge.service.shadow import ShadowRecorder
    from bridge.storage.pending_ends import SqlPendingEnds
    from bridge.storage.reconcile_queries import SqlReconcileStore
    from legacy_adapters.scheduler_mode import resolve_scheduler_mode

    if modes is None:
        if flags is None:
            raise ValueError("the reconciler needs its modes or the flags they come from")
        modes = CachedModes(flags)
    release = release or decide_legacy_release(settings, reader)
    reader = reader or build_legacy_reader(settings, release=release)
    return Reconciler(
        reconcile_store or SqlReconcileStore(store.engine), store.runs, reader,
        modes, metrics, SystemClock(), recorder=ShadowRecorder(store.runs), pending_ends=SqlPendingEnds(store.engine),
        scheduler_mode=resolve_scheduler_mode(settings.legacy_scheduler), tz=legacy_zone(settings),
        enabled_since=flags.enabled_since if flags is not None else lambda origin: 0,
        settings=ReconcileSettings(tolerance_s=settings.reconcile_tolerance_s, grace_s=settings.reconcile_grace_s,
                                   lookback_s=settings.reconcile_lookback_s),
        probe=probe, evidence=build_execution_evidence(settings, reader, release),
        queued_status=release.queued_status)


def build_legacy_reader(settings: Settings, keep_connections: int = 0,
                        release: ReleaseProfile | None = None) -> LegacyRecords:
    """The reader of 2.x's database for ``release`` (decided from ``settings`` when not given). Raises
    LegacyDatabaseError only when the file is positively something else; in any other state (locked, hot
    journal, missing, damaged) it is built, and reads again later."""
    import logging

    from legacy_adapters.database_state import FOREIGN_STATES
    from legacy_adapters.errors import LegacyDatabaseError

    if settings.legacy_database_path is None:
        raise ConfigError("BRIDGE_LEGACY_DATA_DIR", "is required to compare with 2.x")
    if release is None and settings.legacy_data_dir is not None:
        release = decide_legacy_release(settings)
    reader = open_records(settings.legacy_database_path, release, keep_connections=keep_connections)
    try:
        reader.check_is_legacy_database()
    except LegacyDatabaseError as exc:
        if exc.reason in FOREIGN_STATES:
            raise
        logging.getLogger("bridge.legacy").warning(
            "%s: %s; forwarding goes on and recording resumes once it reads again", exc.code, exc.message)
    return reader


def build_callback_path(settings: Settings, store: Store, metrics: BridgeMetrics, modes: ModeSource, *,
                        reader: LegacyRecords | None = None, auth: OpenTokenCheck | None = None,
                        on_primary_commit: Callable[[], None] = lambda: None, keep_ends: bool = True,
                        clock: Clock | None = None, keeper: FactKeeper | None = None,
                        release: ReleaseProfile | None = None) -> CallbackPath:
    """The callback path: one recorder, the stop decisions recording through it, and the interceptor feeding
    them, checking tokens with ``auth`` (2.x's own when not given) and keeping what the store does not take with
    ``keeper`` (none: such facts are counted lost). ``keep_ends=False`` keeps no end: each end closes its Run at
    once, and relayed stops still apply. ``release``: the 2.x release fronted (None: decided here)."""
    from bridge.callbacks.interception import ShadowInterceptor
    from bridge.service.shadow import ShadowRecorder
    from legacy_adapters.scheduler_mode import resolve_scheduler_mode

    if release is None and settings.legacy_data_dir is not None:
        release = decide_legacy_release(settings, reader)  # once, for the reader and the stop decisions
    reader = reader or build_legacy_reader(settings, release=release)
    clock = clock or SystemClock()
    recorder = ShadowRecorder(store.runs)
    stops = build_stop_decisions(settings, store, recorder, reader, keep_ends=keep_ends, clock=clock,
                                 release=release)
    interceptor = ShadowInterceptor(
        recorder, reader, modes, metrics, clock,
        budget_ms=settings.shadow_budget_ms, primary_budget_ms=settings.primary_budget_ms,
        scheduler_mode=resolve_scheduler_mode(settings.legacy_scheduler),
        tz=legacy_zone(settings), auth=auth or build_token_authority(settings, release),
        on_primary_commit=on_primary_commit, read_ahead=store_capabilities(store.engine).reads_are_round_trips,
        stops=stops, keeper=keeper)
    return CallbackPath(recorder, stops, interceptor)


def build_stop_decisions(settings: Settings, store: Store, recorder: ShadowRecorder, reader: LegacyRecords, *,
                         keep_ends: bool = True, clock: Clock | None = None,
                         release: ReleaseProfile | None = None) -> StopDecisions:
    """Stop decisions recording through ``recorder``: ends that may be a stop's kept in the store until 2.x's
    evidence of a stop decides (none kept with ``keep_ends=False``), by the rules of ``release`` (None: the
    release ``settings`` name, decided here) and reading task logs under 2.x's ``data/log``."""
    from bridge.jobs.stop_decisions import StopDecisions
    from bridge.storage.pending_ends import SqlPendingEnds

    pending = (SqlPendingEnds(store.engine, busy_budget_ms=settings.sqlite_busy_budget_ms, outcomes=store.writes)
               if keep_ends else None)
    if release is None and settings.legacy_data_dir is not None:
        release = decide_legacy_release(settings, reader)
    logs = None  # before v2.21 a stopped execution's record is its log's end line, where the release marks it
    if settings.legacy_data_dir is not None and release is not None and not release.has_running_instances \
            and release.stop_marker is not None:
        logs = task_logs(settings, release)
    return StopDecisions(recorder, reader, pending, clock or SystemClock(),
                         window_ms=settings.stop_decision_window_s * 1000, logs=logs,
                         kills_every_instance=release is None or release.stop_kills_every_instance,
                         replacements=replacement_rule(settings))


def bookkeeping_prunes(engine: Engine) -> dict[str, Prune]:
    """What housekeeping deletes with (bridge.jobs.housekeeping.TABLES): applied outbox rows, old passes."""
    from bridge.storage.outbox import SqlOutbox
    from bridge.storage.reconcile_queries import SqlReconcileStore

    return {"projection_outbox": SqlOutbox(engine).prune_applied,
            "reconcile_passes": SqlReconcileStore(engine).prune_passes}
