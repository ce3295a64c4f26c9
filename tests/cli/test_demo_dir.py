"""`ql-bridge demo --dir` never deletes what the demo did not make."""

from __future__ import annotations

from pathlib import Path

import pytest

from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.cli.conftest import Cli, one_line_failure

DEMO_MARKER = ".ql-bridge-demo"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_folder_shaped_like_2xs_data_dir_is_refused_and_left_whole(cli: Cli, tmp_path: Path) -> None:
    data = tmp_path / "ql" / "data"
    create_legacy_data_dir(data)
    before = tree(data)

    line = one_line_failure(cli("demo", "--dir", str(data)))

    assert str(data) in line and "nothing was deleted" in line
    assert tree(data) == before


def test_a_file_given_as_the_folder_is_refused_and_kept(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("mine")

    line = one_line_failure(cli("demo", "--dir", str(path)))

    assert str(path) in line
    assert path.read_text() == "mine"


def test_a_new_or_empty_folder_is_taken_and_marked(tmp_path: Path) -> None:
    from bridge.cli.demo import claim_workdir

    fresh, empty = tmp_path / "a" / "new", tmp_path / "empty"
    empty.mkdir()

    for folder in (fresh, empty):
        claim_workdir(folder)
        assert [p.name for p in folder.iterdir()] == [DEMO_MARKER]


def test_a_folder_an_earlier_demo_made_is_emptied_and_stays_marked(tmp_path: Path) -> None:
    from bridge.cli.demo import claim_workdir

    folder = tmp_path / "demo"
    claim_workdir(folder)
    (folder / "ql-data" / "db").mkdir(parents=True)
    (folder / "ql-data" / "db" / "database.sqlite").write_bytes(b"x")
    (folder / "bridge.sqlite").write_bytes(b"y")

    claim_workdir(folder)

    assert [p.name for p in folder.iterdir()] == [DEMO_MARKER]


def test_a_symlink_is_never_followed_into(tmp_path: Path) -> None:
    from bridge.cli.demo import DemoFolderRefusedError, claim_workdir

    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / DEMO_MARKER).write_text("")
    (target / "keep").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(target)

    with pytest.raises(DemoFolderRefusedError):
        claim_workdir(link)
    assert (target / "keep").read_text() == "mine"
