"""2.x's database in a bad state: the reader names the state, and only a file that is positively something else
is refused (docs/legacy-2x.md#connection-and-locking: rollback journal, no WAL)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from legacy_adapters.errors import LegacyDatabaseError
from legacy_adapters.reader import LegacyReader
from legacy_adapters.testing.datadir import LegacyDataDir


def crons(legacy_dir: LegacyDataDir, count: int = 40) -> list[int]:
    return [legacy_dir.add_cron(f"c{i}", f"task job{i}.sh", "0 * * * *") for i in range(count)]


def reason(reader: LegacyReader) -> str:
    with pytest.raises(LegacyDatabaseError) as caught:
        reader.check_is_legacy_database()
    return caught.value.reason


def test_a_writer_killed_mid_transaction_leaves_a_hot_journal_the_reader_names_until_2x_rolls_it_back(
        legacy_dir: LegacyDataDir) -> None:
    ids = crons(legacy_dir)
    before = legacy_dir.cron_row(ids[0])
    legacy_dir.leave_hot_journal()
    reader = LegacyReader(legacy_dir.database_path, keep_connections=2)

    assert reason(reader) == "hot_journal"
    assert reader.state() == "hot_journal"
    with pytest.raises(LegacyDatabaseError) as caught:
        reader.get_cron(ids[0])
    assert reader.state_of(caught.value) == "hot_journal"

    legacy_dir.roll_back_hot_journal()
    reader.check_is_legacy_database()
    assert reader.state() == "ok"
    assert reader.get_cron(ids[0]).command == before["command"]  # type: ignore[index,union-attr]
    assert len(list(reader.iter_crons())) == len(ids)  # the killed transaction's rows are gone


@contextmanager
def locked(path: Path) -> Iterator[None]:
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_a_database_2x_keeps_locked_is_locked_not_foreign(legacy_dir: LegacyDataDir) -> None:
    reader = LegacyReader(legacy_dir.database_path)
    with locked(legacy_dir.database_path):
        assert reason(reader) == "locked"
        with pytest.raises(LegacyDatabaseError) as caught:
            reader.get_cron(1)
        assert reader.state_of(caught.value) == "locked"
    assert reader.state() == "ok"


def _truncated(legacy_dir: LegacyDataDir) -> None:
    crons(legacy_dir, 200)
    size = legacy_dir.database_path.stat().st_size
    os.truncate(legacy_dir.database_path, size // 2)


def _last_page_cut(legacy_dir: LegacyDataDir) -> None:
    crons(legacy_dir, 200)
    size = legacy_dir.database_path.stat().st_size
    os.truncate(legacy_dir.database_path, size - 4096)


def _header_only(legacy_dir: LegacyDataDir) -> None:
    os.truncate(legacy_dir.database_path, 100)


def _shorter_than_the_magic(legacy_dir: LegacyDataDir) -> None:
    os.truncate(legacy_dir.database_path, 10)


def _zeroed(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.write_bytes(b"\0" * 8192)


def _empty(legacy_dir: LegacyDataDir) -> None:
    os.truncate(legacy_dir.database_path, 0)


def _no_tables_yet(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.unlink()
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        conn.execute("PRAGMA user_version = 1")  # page 1 written, no table created yet


def _missing(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.unlink()


def _a_directory(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.unlink()
    legacy_dir.database_path.mkdir()


def _foreign_sqlite(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.unlink()
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")


def _not_sqlite(legacy_dir: LegacyDataDir) -> None:
    legacy_dir.database_path.write_text("this is a text file, not a database\n" * 100)


def _three_zero(legacy_dir: LegacyDataDir) -> None:
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        conn.execute("CREATE TABLE Runs (id TEXT)")


STATES: list[tuple[Callable[[LegacyDataDir], None], str]] = [
    (_truncated, "corrupt"),
    (_last_page_cut, "corrupt"),
    (_header_only, "corrupt"),
    (_shorter_than_the_magic, "corrupt"),
    (_zeroed, "corrupt"),
    (_empty, "empty"),
    (_no_tables_yet, "empty"),
    (_missing, "missing"),
    (_a_directory, "unreadable"),
    (_foreign_sqlite, "not_legacy"),
    (_not_sqlite, "not_legacy"),
    (_three_zero, "unsupported"),
]


@pytest.mark.parametrize("damage, expected", STATES, ids=[f.__name__.strip("_") for f, _ in STATES])
def test_each_state_of_the_file_has_its_own_stable_code(legacy_dir: LegacyDataDir,
                                                        damage: Callable[[LegacyDataDir], None],
                                                        expected: str) -> None:
    damage(legacy_dir)
    reader = LegacyReader(legacy_dir.database_path)
    assert reason(reader) == expected
    assert reader.state() == expected


def test_only_a_file_that_is_positively_something_else_is_foreign(legacy_dir: LegacyDataDir) -> None:
    from legacy_adapters.database_state import FOREIGN_STATES, TRANSIENT_STATES

    assert FOREIGN_STATES == {"not_legacy", "unsupported"}
    assert {"locked", "hot_journal", "missing", "unreadable", "corrupt", "empty"} <= TRANSIENT_STATES
    assert not FOREIGN_STATES & TRANSIENT_STATES


def _as_nobody(code: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    """Run ``code`` as the unprivileged user ``nobody`` with the project importable, or None if nothing here can."""
    root = str(Path(__file__).resolve().parents[2])
    preamble = f"import sys; sys.path.insert(0, {root!r}); "
    # The venv's interpreter may live where nobody may go (/root); the system one reads the modules just as well.
    for python in dict.fromkeys(p for p in (sys.executable, shutil.which("python3", path="/usr/bin:/bin")) if p):
        try:
            probe = subprocess.run([python, "-c", preamble + "import legacy_adapters.reader"], user="nobody",
                                   capture_output=True, text=True, timeout=60, cwd="/")
        except (PermissionError, KeyError, OSError):
            continue
        if probe.returncode == 0:
            return subprocess.run([python, "-c", preamble + code, *args], user="nobody", capture_output=True,
                                  text=True, timeout=60, cwd="/")
    return None


def test_a_file_the_bridge_may_not_read_is_unreadable(legacy_dir: LegacyDataDir) -> None:
    if os.geteuid() != 0:
        legacy_dir.database_path.chmod(0)
        assert LegacyReader(legacy_dir.database_path).state() == "unreadable"
        return
    # root reads whatever the mode says: ask again as an unprivileged user, in a child process.
    with tempfile.TemporaryDirectory(prefix="ql-private-") as private:
        Path(private).chmod(0o755)
        copy = Path(private) / "database.sqlite"
        shutil.copy(legacy_dir.database_path, copy)
        copy.chmod(0)
        out = _as_nobody("from legacy_adapters.reader import LegacyReader; "
                         "print(LegacyReader(sys.argv[1]).state())", str(copy))
    if out is None:
        pytest.skip("no interpreter here can import the project as nobody")
    assert out.returncode == 0, out.stderr[-400:]
    assert out.stdout.strip() == "unreadable"


def test_the_reader_never_rolls_the_journal_back_itself(legacy_dir: LegacyDataDir) -> None:
    crons(legacy_dir, 5)
    journal = legacy_dir.leave_hot_journal()
    reader = LegacyReader(legacy_dir.database_path)
    for _ in range(3):
        assert reader.state() == "hot_journal"
    assert journal.is_file()  # read-only: only 2.x (or another writer) may roll it back
