"""`import-legacy` of task logs (v2.17–v2.20) beside a serving bridge: on a store with one writer at a time
(SQLite) each batch's write transaction stays within a time budget and the store is left free between batches, as
the instance import's writes are (tests/importer/test_import_pacing.py); a store with concurrent writers takes
whole batches."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import bridge.jobs.import_legacy.logs as log_import
from bridge.bootstrap.commands import run_legacy_import
from bridge.jobs.import_legacy.pacing import IMPORT_GAP_MS
from bridge.jobs.import_legacy.summary import ImportSummary
from bridge.storage.imports import SqlImportStore
from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.importer.conftest import ImportEnv

BEGIN_S = 1_790_000_000


@pytest.fixture
def logs_env(env: ImportEnv, tmp_path: Path) -> ImportEnv:
    data = create_legacy_data_dir(tmp_path / "ql-v2.20", release="v2.20.2")
    return ImportEnv(replace(env.settings, legacy_data_dir=data.root, legacy_release="v2.20.2"), data, env.engine,
                     env.backend)


def many_logs(env: ImportEnv, count: int) -> None:
    """``count`` ended executions of one cron, each log as the release's shell leaves it."""
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *", log_name="job_1")
    folder = env.data.log_dir / "job_1"
    folder.mkdir(parents=True)
    for i in range(count):
        begun = datetime.fromtimestamp(BEGIN_S + i * 60, UTC)
        ended = datetime.fromtimestamp(BEGIN_S + i * 60 + 5, UTC)
        (folder / f"{begun:%Y-%m-%d-%H-%M-%S}-000.log").write_text(
            f"## 开始执行... {begun:%Y-%m-%d %H:%M:%S}\n\nwork\n\n"
            f"## 执行结束... {ended:%Y-%m-%d %H:%M:%S}  耗时 5 秒　　　　　\n", encoding="utf-8")
    assert cron == 1


class Writes:
    """Each write transaction of the log import: when it began and ended, and how many logs it held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ms_per_run: float = 0.0) -> None:
        self.spans: list[tuple[float, float, int]] = []
        write, insert = log_import._write, SqlImportStore.apply_many

        def timed_write(store: Any, batch: Any, **kw: Any) -> Any:
            began = time.monotonic()
            result = write(store, batch, **kw)
            self.spans.append((began, time.monotonic(), len(batch)))
            return result

        def slow_insert(store: Any, changes: Any) -> None:
            time.sleep(ms_per_run * len(changes) / 1000)  # a slow disk, a busy box: the write's cost per Run
            insert(store, changes)

        monkeypatch.setattr(log_import, "_write", timed_write)
        monkeypatch.setattr(SqlImportStore, "apply_many", slow_insert)

    @property
    def sizes(self) -> list[int]:
        return [rows for _, _, rows in self.spans]


def do_import(env: ImportEnv, **options: Any) -> ImportSummary:
    return run_legacy_import(env.settings, console=Console(file=io.StringIO()), **options)


def test_on_sqlite_a_batch_of_logs_is_sized_to_its_time_budget(logs_env: ImportEnv,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if not logs_env.backend.has_file_lock:
        pytest.skip("the store takes concurrent writers: nothing waits behind a batch")
    many_logs(logs_env, 300)
    writes = Writes(monkeypatch, ms_per_run=1.0)

    summary = do_import(logs_env, write_budget_ms=20)

    assert summary.imported == 300 and summary.batches == len(writes.spans) > 10
    assert max(writes.sizes[3:]) <= 30, writes.sizes  # about 20 Runs fill the budget at 1 ms each


def test_on_sqlite_the_store_is_left_free_between_two_batches_of_logs(logs_env: ImportEnv,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if not logs_env.backend.has_file_lock:
        pytest.skip("the store takes concurrent writers: nothing waits behind a batch")
    many_logs(logs_env, 60)
    writes = Writes(monkeypatch)

    do_import(logs_env, batch_size=10, write_budget_ms=1_000)

    gaps = [later[0] - earlier[1] for earlier, later in zip(writes.spans, writes.spans[1:])]
    assert len(gaps) == 5 and min(gaps) >= IMPORT_GAP_MS / 1000, gaps


def test_a_store_that_takes_concurrent_writers_gets_the_logs_in_whole_batches(
        logs_env: ImportEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    if logs_env.backend.has_file_lock:
        pytest.skip("a store with one writer at a time gets time-bounded batches")
    many_logs(logs_env, 120)
    writes = Writes(monkeypatch, ms_per_run=1.0)

    summary = do_import(logs_env, batch_size=100, write_budget_ms=20)

    assert summary.imported == 120 and writes.sizes == [100, 20]
