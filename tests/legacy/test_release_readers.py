"""One reader of 2.x's database per release line (legacy_adapters/release_readers.py), and no version check
anywhere but the home of the release facts (docs/releases.md#one-home-for-the-release)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from legacy_adapters.release_readers import open_legacy_records
from legacy_adapters.releases import profile_for
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir

ROOT = Path(__file__).resolve().parents[2]
STAMP = "2026-07-18 02:00:00.123 +00:00"


def _instance(data: LegacyDataDir, cron: int, pid: int, log_path: str, started_at: int) -> None:
    data.query("INSERT INTO RunningInstances (cron_id, pid, log_path, status, started_at, createdAt, updatedAt) "
               "VALUES (?, ?, ?, 0, ?, ?, ?)", (cron, pid, log_path, started_at, STAMP, STAMP))


def test_v2_21s_reader_reads_a_row_per_execution(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql", release="v2.21.0")
    cron = data.add_cron("a", "task a.sh", "0 * * * *")
    _instance(data, cron, 11, "a_1/x.log", 1_790_000_000)
    records = open_legacy_records(profile_for("2.21.0", "test"), data.database_path)
    assert [(i.cron_id, i.pid) for i in records.iter_instances()] == [(cron, 11)]
    assert [i.pid for i in records.instances_for_cron(cron, 5)] == [11]
    assert records.begun_logs(5) == [("a_1/x.log", 1_790_000_000)]


@pytest.mark.parametrize("release", ["2.17.13", "2.18.3", "2.19.2", "2.20.2"])
def test_an_older_lines_reader_reads_no_row_per_execution_even_where_a_table_is_left(tmp_path: Path,
                                                                                     release: str) -> None:
    """A database that once ran v2.21 and was put back under an older backend keeps a RunningInstances table that
    nothing writes any more: the older line's reader never takes its stale rows for evidence."""
    data = create_legacy_data_dir(tmp_path / "ql", release="v2.21.0")
    cron = data.add_cron("a", "task a.sh", "0 * * * *", log_path="a_1/new.log", last_execution_time=1_790_000_100)
    _instance(data, cron, 11, "a_1/stale.log", 1_790_000_000)
    records = open_legacy_records(profile_for(release, "test"), data.database_path)
    assert list(records.iter_instances()) == []
    assert records.instances_for_cron(cron, 5) == [] and records.recent_instances(5) == []
    assert records.instances_inserted_near(cron, 11, 1_790_000_000_000) == []
    assert [c.id for c in records.iter_crons()] == [cron]


def test_an_older_lines_begun_logs_are_its_crontabs_rows_newest_first(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql", release="v2.19.2")
    data.add_cron("old", "task old.sh", "0 * * * *", log_path="old_1/a.log", last_execution_time=1_790_000_000)
    data.add_cron("new", "task new.sh", "0 * * * *", log_path="new_2/b.log", last_execution_time=1_790_000_500)
    data.add_cron("never", "task never.sh", "0 * * * *")
    records = open_legacy_records(profile_for("2.19.2", "test"), data.database_path)
    assert records.begun_logs(5) == [("new_2/b.log", 1_790_000_500.0), ("old_1/a.log", 1_790_000_000.0)]
    assert records.begun_logs(1) == [("new_2/b.log", 1_790_000_500.0)]


def test_without_a_decided_release_the_newest_lines_reader_reads(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql", release="v2.21.0")
    cron = data.add_cron("a", "task a.sh", "0 * * * *")
    _instance(data, cron, 11, "a_1/x.log", 1_790_000_000)
    assert [i.pid for i in open_legacy_records(None, data.database_path).iter_instances()] == [11]


# --- no version check outside the home ----------------------------------------------------------------------

_HOME = {ROOT / "legacy_adapters" / "releases.py"}
_VERSION_TEXT = re.compile(r"^v?2\.\d+(\.\d+)?$")


def _version_checks(path: Path) -> list[str]:
    """``ReleaseLine`` named, or a comparison with a version tuple (2, N[, P]) or a version string."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and node.id == "ReleaseLine" \
                or isinstance(node, ast.alias) and node.name == "ReleaseLine":
            found.append(f"{where}:{getattr(node, 'lineno', '?')} names ReleaseLine")
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Tuple) and 2 <= len(side.elts) <= 3 and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, int) for e in side.elts) \
                        and side.elts[0].value == 2:  # type: ignore[attr-defined]
                    found.append(f"{where}:{node.lineno} compares a version tuple")
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and _VERSION_TEXT.match(side.value):
                    found.append(f"{where}:{node.lineno} compares a version string")
    return found


def test_no_module_but_the_release_home_checks_a_version() -> None:
    modules = [p for package in ("bridge", "legacy_adapters", "projections") for p in (ROOT / package).rglob("*.py")
               if p not in _HOME and "testing" not in p.parts]
    assert len(modules) > 100
    assert [hit for module in modules for hit in _version_checks(module)] == []


def test_the_version_check_finder_finds_each_kind(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from legacy_adapters.releases import ReleaseLine\n"
                      "def f(v, line):\n    return v >= (2, 20) or line == 'v2.19'\n", encoding="utf-8")
    assert [hit.split(" ", 1)[1] for hit in _version_checks(sample)] == [
        "names ReleaseLine", "compares a version tuple", "compares a version string"]
