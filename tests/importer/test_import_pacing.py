"""The import beside a serving bridge: on a store with one writer at a time (SQLite) each batch's write
transaction stays within a time budget and the store is left free between batches, so that `serve`'s shadow
writes keep their 50 ms budget while an import runs; a store with concurrent writers takes whole batches."""

from __future__ import annotations

import time
from typing import Any

import pytest

import bridge.jobs.import_legacy.job as importer
from bridge.jobs.import_legacy.pacing import IMPORT_GAP_MS
from bridge.storage.imports import SqlImportStore
from legacy_adapters.schema import InstanceStatus
from tests.importer.conftest import BEGIN_S, ImportEnv, Instance, add_instances
from tests.importer.test_import import do_import


def many(env: ImportEnv, count: int) -> None:
    cron = env.data.add_cron("job", "task job.sh", "0 * * * *")
    add_instances(env.data, [Instance(cron, int(InstanceStatus.FINISHED), BEGIN_S + i * 60, BEGIN_S + i * 60 + 5, 0,
                                      pid=1000 + i, log_path=f"job_1/{i}.log") for i in range(count)])


class Writes:
    """Each write transaction of the import: when it began and ended, and how many instances it held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ms_per_run: float = 0.0) -> None:
        self.spans: list[tuple[float, float, int]] = []
        began: list[float] = []
        write, commit = importer._Importer._write, importer._Importer._commit
        insert = SqlImportStore.apply_many

        def timed_write(importer_: Any, tx: Any, planned: Any, batch: Any) -> Any:
            began.append(time.monotonic())  # inside the transaction: BEGIN IMMEDIATE has just taken the lock
            return write(importer_, tx, planned, batch)

        def timed_commit(importer_: Any, batch: Any) -> Any:
            result = commit(importer_, batch)
            self.spans.append((began[-1], time.monotonic(), len(batch)))
            return result

        def slow_insert(store: Any, changes: Any) -> None:
            time.sleep(ms_per_run * len(changes) / 1000)  # a slow disk, a busy box: the write's cost per Run
            insert(store, changes)

        monkeypatch.setattr(importer._Importer, "_write", timed_write)
        monkeypatch.setattr(importer._Importer, "_commit", timed_commit)
        monkeypatch.setattr(SqlImportStore, "apply_many", slow_insert)

    @property
    def sizes(self) -> list[int]:
        return [rows for _, _, rows in self.spans]


def test_on_sqlite_a_batch_write_is_sized_to_its_time_budget(env: ImportEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    if not env.backend.has_file_lock:
        pytest.skip("the store takes concurrent writers: nothing waits behind a batch")
    many(env, 300)
    writes = Writes(monkeypatch, ms_per_run=1.0)

    summary = do_import(env, write_budget_ms=20)

    assert summary.imported == 300 and summary.batches == len(writes.spans) > 10
    # 1 ms a Run: about 20 Runs fill the budget; the size settles there after the first few batches.
    assert max(writes.sizes[3:]) <= 30, writes.sizes


def test_on_sqlite_the_store_is_left_free_between_two_batch_writes(env: ImportEnv,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not env.backend.has_file_lock:
        pytest.skip("the store takes concurrent writers: nothing waits behind a batch")
    many(env, 60)
    writes = Writes(monkeypatch)

    do_import(env, batch_size=10, write_budget_ms=1_000)  # batches of 10: the gaps alone are looked at

    gaps = [later[0] - earlier[1] for earlier, later in zip(writes.spans, writes.spans[1:])]
    assert len(gaps) == 5 and min(gaps) >= IMPORT_GAP_MS / 1000, gaps


def test_a_store_that_takes_concurrent_writers_gets_the_import_in_whole_batches(
        env: ImportEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    if env.backend.has_file_lock:
        pytest.skip("a store with one writer at a time gets time-bounded batches")
    many(env, 120)
    writes = Writes(monkeypatch, ms_per_run=1.0)

    summary = do_import(env, batch_size=100, write_budget_ms=20)

    assert summary.imported == 120 and writes.sizes == [100, 20]
