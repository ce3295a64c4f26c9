"""`bridge import-legacy` keeps each row's exit code as 2.x keeps it, fractions included, on both SQL stores."""

from __future__ import annotations

import io

from rich.console import Console

from bridge.bootstrap.commands import run_legacy_import
from legacy_adapters.schema import InstanceStatus
from tests.importer.conftest import BEGIN_S, ImportEnv, Instance, add_instances
from tests.importer.test_import import imported_run


def test_a_fractional_or_negative_exit_code_is_imported_as_given_and_fails_the_run(env: ImportEnv) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    rows = [(0.5, 201), (-1, 202), (1000, 203)]
    ids = add_instances(env.data, [Instance(cron, InstanceStatus.ERROR, BEGIN_S + 1 + i * 3600,
                                            BEGIN_S + 3 + i * 3600, code, pid=pid, log_path=f"job/{pid}.log")
                                   for i, (code, pid) in enumerate(rows)])
    summary = run_legacy_import(env.settings, console=Console(file=io.StringIO()))

    assert summary.imported == 3 and summary.skipped == 0
    for instance_id, (code, _pid) in zip(ids, rows, strict=True):
        run = imported_run(env, instance_id)
        (attempt,) = env.attempts(run["id"])
        assert (run["status"], attempt["exit_code"], type(attempt["exit_code"])) == ("failed", code, type(code))
