"""The composition root for tests: the callback path, the stop decisions, the reconciler and startup recovery,
built by bridge.bootstrap's own functions on a test's store and 2.x data dir, with what a test swaps (its
modes, metrics, reader, probe) passed as keyword overrides, as cosmicpython's ``bootstrap_test_app`` does.

The bridge's settings come from BRIDGE_* variables as in production; ``legacy_settings`` fixes the ones every
test world shares (system scheduler, UTC, a shadow budget no slow machine overruns).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from os import PathLike

from sqlalchemy import Engine

from bridge.bootstrap import (
    CallbackPath,
    Store,
    build_callback_path,
    build_legacy_reader,
    build_reconciler,
    build_stop_decisions,
    recover_unfinished_runs,
)
from bridge.callbacks.interception import ShadowInterceptor
from bridge.callbacks.keeper import FactKeeper
from bridge.config import Settings
from bridge.jobs.reconcile import Reconciler
from bridge.jobs.recovery import RecoveryMetrics, recover_on_startup
from bridge.jobs.stop_decisions import StopDecisions
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.service.pending_ends import PendingEndStore
from bridge.service.ports import Clock, ModeSource, ServiceMetrics
from bridge.service.reconcile import ReconcileStore, UnfinishedRuns
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.unit_of_work import SqlUnitOfWork
from legacy_adapters.ports import LegacyRecords
from legacy_adapters.process_identity import ProcProbe

TEST_WORLD = {"BRIDGE_LEGACY_SCHEDULER": "system", "BRIDGE_LEGACY_TZ": "UTC", "BRIDGE_SHADOW_BUDGET_MS": "5000"}


def legacy_settings(legacy_root: str | PathLike[str], **env: str) -> Settings:
    """Settings of a bridge in front of the 2.x data dir at ``legacy_root``: the system scheduler, UTC and a 5 s
    shadow budget, otherwise the defaults; ``env`` adds or replaces BRIDGE_* variables."""
    return Settings.from_env({"BRIDGE_LEGACY_DATA_DIR": str(legacy_root), **TEST_WORLD, **env})


def store_on(engine: Engine, uow: object | None = None, *, metrics: ServiceMetrics | None = None) -> Store:
    """bootstrap's Store over a test's engine and unit of work (a Backend's; a plain one by default), its
    RunService on the system clock counting into ``metrics`` (none by default)."""
    uow = SqlUnitOfWork(engine) if uow is None else uow
    assert isinstance(uow, SqlUnitOfWork)
    return Store(engine=engine, uow=uow, runs=RunService(uow, clock=SystemClock(), metrics=metrics))


def stop_decisions(settings: Settings, store: Store, *, reader: LegacyRecords | None = None,
                   keep_ends: bool = True) -> StopDecisions:
    """bootstrap.build_stop_decisions with a recorder of their own (as a second process would have);
    ``keep_ends=False``: an end with a signal exit closes its Run at once."""
    return build_stop_decisions(settings, store, ShadowRecorder(store.runs), reader or build_legacy_reader(settings),
                                keep_ends=keep_ends)


def callback_path(settings: Settings, store: Store, modes: ModeSource, *, metrics: BridgeMetrics | None = None,
                  reader: LegacyRecords | None = None, keep_ends: bool = True,
                  on_primary_commit: Callable[[], None] = lambda: None, keeper: FactKeeper | None = None,
                  clock: Clock | None = None) -> CallbackPath:
    """bootstrap.build_callback_path: the interceptor and the stop decisions it feeds, recording through one
    recorder (``keep_ends`` as in ``stop_decisions``), keeping what the store does not take with ``keeper``. The
    caller closes the interceptor."""
    return build_callback_path(settings, store, metrics or BridgeMetrics(), modes, reader=reader,
                               keep_ends=keep_ends, on_primary_commit=on_primary_commit, keeper=keeper, clock=clock)


def interceptor(settings: Settings, store: Store, modes: ModeSource, *, metrics: BridgeMetrics | None = None,
                reader: LegacyRecords | None = None, keep_ends: bool = True,
                on_primary_commit: Callable[[], None] = lambda: None) -> ShadowInterceptor:
    """The interceptor of ``callback_path``. The caller closes it."""
    return callback_path(settings, store, modes, metrics=metrics, reader=reader, keep_ends=keep_ends,
                         on_primary_commit=on_primary_commit).interceptor


def reconciler(settings: Settings, store: Store, modes: ModeSource, *, metrics: BridgeMetrics | None = None,
               reader: LegacyRecords | None = None, reconcile_store: ReconcileStore | None = None,
               probe: ProcProbe | None = None) -> Reconciler:
    """bootstrap.build_reconciler without flags: ``modes`` decides, and every origin counts as enabled from the
    start. Grace, tolerance and lookback come from ``settings`` (BRIDGE_RECONCILE_*). Pass the test's own
    ``reconcile_store`` where the test patches or reads that very object."""
    return build_reconciler(settings, store, metrics or BridgeMetrics(), None, modes, reader=reader,
                            reconcile_store=reconcile_store, probe=probe)


def recover(settings: Settings, store: Store, *, reader: LegacyRecords | None = None,
            probe: ProcProbe | None = None) -> Counter[str]:
    """Startup recovery as `ql-bridge serve` runs it (bootstrap.recover_unfinished_runs)."""
    return recover_unfinished_runs(settings, store, reader=reader, probe=probe)


def recover_over(store: UnfinishedRuns, runs: RunService, reader: LegacyRecords, pending: PendingEndStore, *,
                 metrics: RecoveryMetrics | None = None) -> Counter[str]:
    """bridge.jobs.recovery.recover_on_startup over a test's own stores, its stop decisions and recorder wired
    as bootstrap wires them for startup recovery."""
    recorder = ShadowRecorder(runs)
    decisions = StopDecisions(recorder, reader, pending, SystemClock())
    return recover_on_startup(store, runs, reader, pending, decisions=decisions, recorder=recorder, metrics=metrics)
