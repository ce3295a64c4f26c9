"""Imported history stays out of reconciliation, reports' gates and retries."""

from __future__ import annotations

import pytest

from bridge.bootstrap.commands import report_sources, run_legacy_import
from bridge.domain.commands import RetryRun
from bridge.domain.errors import RetryNotAllowedError
from bridge.jobs.report.build import build_report
from bridge.service.clock import SystemClock
from bridge.service.ports import StaticModes
from bridge.service.run_service import RunService
from bridge.storage.reconcile_queries import SqlReconcileStore
from legacy_adapters.reader import LegacyReader
from tests.contract.lifecycle import ACTOR
from tests.importer.conftest import BEGIN_S, ImportEnv, Instance, add_instances, judging_all_history
from tests.support import wiring
from tests.support.run_commands import retry_run

ALL = frozenset({"manual", "boot", "scheduled_node", "scheduled_system", "script"})


def imported(env: ImportEnv) -> None:
    cron = env.data.add_cron("hourly", "task h.sh", "0 * * * *")
    add_instances(env.data, [Instance(cron, 1, BEGIN_S + 1, BEGIN_S + 5, 0, pid=10 + i, log_path=f"h/{i}.log")
                             for i in range(3)] + [Instance(cron, 3, BEGIN_S + 1, BEGIN_S + 9, 2, pid=20)])
    run_legacy_import(env.settings)


def test_the_reconciler_leaves_imported_history_alone(env: ImportEnv) -> None:
    imported(env)
    reconciler = wiring.reconciler(judging_all_history(env.settings),
                                   wiring.store_on(env.engine, env.backend.uow), StaticModes(ALL))
    result = reconciler.run_once()
    assert result.result == "ok" and result.stats["findings"] == 0
    assert SqlReconcileStore(env.engine).open_mismatches() == []


def test_reports_count_imported_history_as_excluded_not_missing(env: ImportEnv) -> None:
    imported(env)
    report = build_report(env.settings, report_sources(env.engine), LegacyReader(env.data.database_path),
                          since_ms=(BEGIN_S - 60) * 1000, until_ms=(BEGIN_S + 3600) * 1000)
    figures = [o["figures"] for o in report["origins"] if o["figures"]["legacy_import_excluded"]]
    assert sum(f["legacy_import_excluded"] for f in figures) == 4
    assert sum(o["figures"]["executions_observed"] for o in report["origins"]) == 0


def test_imported_runs_are_never_retried(env: ImportEnv) -> None:
    imported(env)
    failed = next(r for r in env.runs() if r["status"] == "failed")
    with pytest.raises(RetryNotAllowedError):
        retry_run(RunService(env.backend.uow, clock=SystemClock()), RetryRun(failed["id"], ACTOR))  # type: ignore[arg-type]
