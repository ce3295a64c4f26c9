"""config.sh on disk: the backup beside it and the atomic replace keep its bytes, owner and mode (real files)."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from legacy_adapters import config_sh
from legacy_adapters.config_sh import back_up, read_config_sh, replace_config_sh, why_not_writable

NOW = datetime(2026, 12, 5, 6, 40, 1, tzinfo=UTC)
ORIGINAL = b"## user\nexport TZ=Asia/Shanghai\nexport NAME='\xe9\xff raw bytes'\n"  # not UTF-8 on purpose


@pytest.fixture
def path(tmp_path: Path) -> Path:
    target = tmp_path / "config" / "config.sh"
    target.parent.mkdir()
    target.write_bytes(ORIGINAL)
    if os.geteuid() == 0:
        os.chown(target, 1234, 2345)  # not this process's owner: only root can keep it, and must
    target.chmod(0o640)
    return target


def test_replacing_renames_a_new_file_over_it_with_the_same_owner_and_mode(path: Path) -> None:
    before = path.stat()
    config = read_config_sh(path)

    replace_config_sh(config, config.text + "export ADDED=1\n")

    after = path.stat()
    assert path.read_bytes() == ORIGINAL + b"export ADDED=1\n"
    assert after.st_ino != before.st_ino  # a rename, never a rewrite in place a shell could read half of
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (before.st_uid, before.st_gid, 0o640)
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.sh"]


def test_a_failed_replace_leaves_config_sh_and_no_temporary_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_sh.os, "replace", refuse)

    with pytest.raises(OSError, match="No space left"):
        replace_config_sh(read_config_sh(path), "changed\n")

    assert path.read_bytes() == ORIGINAL and sorted(p.name for p in path.parent.iterdir()) == ["config.sh"]


def test_the_backup_sits_beside_it_named_by_the_time_with_its_bytes_owner_and_mode(path: Path) -> None:
    config = read_config_sh(path)

    first, second = back_up(config, NOW), back_up(config, NOW)

    assert first.name == "config.sh.ql-bridge-backup-20261205T064001Z" and first.parent == path.parent
    assert second.name == first.name + ".1"  # two in one second never overwrite each other
    for backup in (first, second):
        info = backup.stat()
        assert backup.read_bytes() == ORIGINAL
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (path.stat().st_uid, path.stat().st_gid,
                                                                         0o640)


def test_a_symlinked_config_sh_is_replaced_where_it_really_is_and_the_link_stays(path: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.sh"
    link.symlink_to(path)
    config = read_config_sh(link)

    replace_config_sh(config, config.text + "x=1\n")

    assert link.is_symlink() and path.read_bytes().endswith(b"x=1\n")


def test_a_missing_or_non_regular_config_sh_reads_as_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_config_sh(tmp_path / "config.sh")
    (tmp_path / "config.sh").mkdir()
    with pytest.raises(FileNotFoundError):
        read_config_sh(tmp_path / "config.sh")


def test_a_writable_config_sh_has_no_reason_not_to_be_replaced(path: Path) -> None:
    assert why_not_writable(read_config_sh(path)) is None
