"""Reading 2.x's database while 2.x commits back to back (a burst of status callbacks).

2.x keeps its database in rollback-journal mode (docs/legacy-2x.md#connection-and-locking): while a commit holds its
EXCLUSIVE lock, a reader is turned away with SQLITE_BUSY, and the gaps between 2.x's commits are short. The bridge reads
a cron's row there before it forwards each start, so a read that waits out its whole budget holds the shell's callback
that long and loses the start's origin evidence.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from legacy_adapters.callbacks import render_status_body
from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir
from legacy_adapters.testing.double import Legacy2xDouble


@contextmanager
def starts_recorded_back_to_back(legacy_dir: LegacyDataDir, cron_id: int) -> Iterator[list[int]]:
    """2.x's writes for a burst of start callbacks, one after another as its single connection makes them.

    Each is what CronService.status writes for a start (docs/legacy-2x.md#what-a-callback-writes), done by the 2.x
    double without HTTP (its RunningInstances row, then the Crontabs update), with no pause between one callback's
    writes and the next's. Yields a one-item list: the callbacks written so far.
    """
    double = Legacy2xDouble(legacy_dir)
    stop = threading.Event()
    written = [0]

    def write() -> None:
        pid = 10_000
        while not stop.is_set():
            pid += 1
            assert double.simulate_status(render_status_body(cron_id, 0, pid, f"burst/{pid}.log", 1)) == 200
            written[0] += 1

    writer = threading.Thread(target=write, name="2x-writer")
    writer.start()
    try:
        while written[0] < 3:  # the writer is in its stride before the first read
            time.sleep(0.001)
        yield written
    finally:
        stop.set()
        writer.join()


@pytest.mark.parametrize("kept", [0, 2], ids=["new-connection", "kept-connections"])
def test_reads_find_the_gaps_between_back_to_back_commits_instead_of_timing_out(
        legacy_dir: LegacyDataDir, kept: int) -> None:
    cron_id = legacy_dir.add_cron("burst", "task burst.js", "* * * * *")
    reader = LegacyReader(legacy_dir.database_path, keep_connections=kept)
    failures: list[str] = []

    with starts_recorded_back_to_back(legacy_dir, cron_id) as written:
        before = written[0]
        for _ in range(60):
            try:
                cron = reader.get_cron(cron_id)
                assert cron is not None and cron.id == cron_id
            except (LegacyDatabaseError, sqlite3.Error) as exc:
                failures.append(str(exc))
            time.sleep(0.003)  # a few callbacks' worth of 2.x's writes between two starts the bridge reads
        during = written[0] - before

    # With SQLite's busy handler left to back off, 7 to 28 of these 60 reads waited out their budget. One miss is
    # tolerated: the writer, the reader and the rest of a full test run share two cores, and a read starved of
    # CPU for its whole 300 ms budget is the machine's doing, not the reader's.
    assert len(failures) <= 1, failures
    assert during >= 20, during  # 2.x kept writing all along: the reads met its locks and got through


def test_a_lock_2x_never_lets_go_still_ends_the_read_within_its_budget(legacy_dir: LegacyDataDir) -> None:
    cron_id = legacy_dir.add_cron("held", "task held.js", "* * * * *")
    reader = LegacyReader(legacy_dir.database_path, keep_connections=1)
    with closing(sqlite3.connect(legacy_dir.database_path, isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(LegacyDatabaseError) as caught:
            reader.get_cron(cron_id)
        holder.execute("ROLLBACK")

    assert reader.state_of(caught.value) == "locked"
    assert reader.get_cron(cron_id) is not None  # the kept connection still reads once 2.x lets go
