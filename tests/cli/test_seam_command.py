"""`ql-bridge seam install | remove | status`, run as an operator runs them, against a temporary 2.x data
directory's real config.sh and real listeners (the doctor's seam lines come from real bash)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from legacy_adapters.seam_block import BEGIN, END, find_blocks
from tests.cli.conftest import Cli, one_line_failure, read_only_mount
from tests.support.listeners import BRIDGE_LIVEZ, PANEL_PAGE, answering, unused_port

ORIGINAL = b'## user settings\nexport TZ=Asia/Shanghai\nexport NAME="\xe9\xff"'  # no final newline, not UTF-8


@pytest.fixture
def config(legacy_dir: Path) -> Path:
    path = legacy_dir / "config" / "config.sh"
    path.write_bytes(ORIGINAL)
    return path


@pytest.fixture
def bridge(cli: Cli) -> Iterator[int]:
    """A listener answering /livez as ql-bridge does, on the port BRIDGE_LISTEN names."""
    with answering(BRIDGE_LIVEZ) as port:
        cli.env["BRIDGE_LISTEN"] = f"127.0.0.1:{port}"
        yield port


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def lines_of(result: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """The doctor's lines for check ``name`` (`ok    seam: task shells: ...`), or status's lines starting ``name``."""
    return [line for line in result.stdout.splitlines() if line.startswith(name) or line[6:].startswith(name)]


def test_install_puts_one_block_after_a_backup_and_prints_the_doctors_seam_lines(cli: Cli, config: Path,
                                                                                  bridge: int) -> None:
    result = cli("seam", "install")

    assert result.returncode == 0, result.stdout + result.stderr
    assert config.read_bytes().startswith(ORIGINAL + b"\n")
    assert [b.port for b in find_blocks(config.read_bytes().decode("utf-8", "surrogateescape"))] == [bridge]
    (backup,) = [p for p in config.parent.iterdir() if p.name.startswith("config.sh.ql-bridge-backup-")]
    assert backup.read_bytes() == ORIGINAL and backup.name in result.stdout
    (shells,) = lines_of(result, "seam: task shells")
    assert shells.startswith("ok") and f"port {bridge}" in shells and "ql-bridge block" in shells
    assert lines_of(result, "seam: 2.x's backend")


def test_installing_twice_leaves_one_block_and_changes_nothing_the_second_time(cli: Cli, config: Path,
                                                                                 bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    after_first = files(config.parent)

    again = cli("seam", "install")

    assert again.returncode == 0 and "already installed" in again.stdout
    assert files(config.parent) == after_first and len(find_blocks(config.read_text(errors="surrogateescape"))) == 1


def test_dry_run_prints_the_diff_and_changes_nothing(cli: Cli, config: Path, bridge: int) -> None:
    config.write_text("## user settings\nexport TZ=Asia/Shanghai\n")  # the diff is printed as the file's bytes
    before = files(config.parent)

    result = cli("seam", "install", "--dry-run")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"--- {config}\n+++ {config} (after)\n")
    assert f"+{BEGIN}" in result.stdout and f"+{END} <<<" in result.stdout
    assert f"export QlPort={bridge}" in result.stdout
    assert files(config.parent) == before


def test_remove_gives_back_the_file_byte_for_byte_when_nobody_else_touched_it(cli: Cli, config: Path,
                                                                              bridge: int) -> None:
    assert cli("seam", "install").returncode == 0

    result = cli("seam", "remove")

    assert result.returncode == 0, result.stdout + result.stderr
    assert config.read_bytes() == ORIGINAL and "ql-bridge block removed" in result.stdout
    (shells,) = lines_of(result, "seam: task shells")
    assert not shells.startswith("ok")  # the shells no longer call the bridge: what remove meant


def test_remove_keeps_the_edits_made_elsewhere_since_install(cli: Cli, config: Path, bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    config.write_bytes(b"# edited in the panel\n" + config.read_bytes() + b"\nexport ADDED_LATER=1\n")

    assert cli("seam", "remove").returncode == 0

    assert config.read_bytes() == b"# edited in the panel\n" + ORIGINAL + b"\nexport ADDED_LATER=1\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root")
def test_install_and_remove_keep_config_shs_owner_and_mode(cli: Cli, config: Path, bridge: int) -> None:
    os.chown(config, 1234, 2345)
    config.chmod(0o640)

    for command in ("install", "remove"):
        assert cli("seam", command).returncode == 0
        info = config.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1234, 2345, 0o640), command


def test_install_refuses_a_missing_config_sh_and_creates_nothing(cli: Cli, legacy_dir: Path, bridge: int) -> None:
    before = files(legacy_dir / "config")

    line = one_line_failure(cli("seam", "install"))

    assert "there is no" in line and "config.sh" in line and "nothing was changed" in line
    assert files(legacy_dir / "config") == before


def test_install_refuses_an_immutable_config_sh(cli: Cli, config: Path, bridge: int, make_immutable) -> None:
    make_immutable(config)

    line = one_line_failure(cli("seam", "install"))

    assert "cannot be replaced" in line and "not writable" in line and config.read_bytes() == ORIGINAL
    assert not [p for p in config.parent.iterdir() if "ql-bridge" in p.name]


def test_install_refuses_a_config_folder_mounted_read_only(cli: Cli, config: Path, bridge: int) -> None:
    prefix = read_only_mount(config.parent)

    line = one_line_failure(cli("seam", "install", prefix=prefix))

    assert "cannot be replaced" in line and config.read_bytes() == ORIGINAL
    assert not [p for p in config.parent.iterdir() if "ql-bridge" in p.name]


def test_install_refuses_when_config_sh_sets_qlport_elsewhere_and_names_the_line(cli: Cli, config: Path,
                                                                                  bridge: int) -> None:
    config.write_bytes(ORIGINAL + b"\nexport QlPort=5700\n")

    line = one_line_failure(cli("seam", "install"))

    assert f"{config}:4 sets QlPort outside the ql-bridge block (export QlPort=5700)" in line
    assert config.read_bytes() == ORIGINAL + b"\nexport QlPort=5700\n"


@pytest.mark.parametrize("listener", ["nothing", "2.x's frontend"])
def test_install_refuses_when_no_ql_bridge_answers_where_the_block_would_point(cli: Cli, config: Path,
                                                                                 listener: str) -> None:
    before = files(config.parent)

    def attempt(port: int) -> str:
        return one_line_failure(cli("seam", "install", BRIDGE_LISTEN=f"127.0.0.1:{port}"))

    if listener == "nothing":
        line = attempt(unused_port())
    else:
        with answering(PANEL_PAGE) as port:
            line = attempt(port)

    assert "no ql-bridge answers localhost:" in line and "start `ql-bridge serve` first" in line
    assert files(config.parent) == before


def test_install_exits_non_zero_when_the_shells_still_cannot_reach_the_bridge(cli: Cli, config: Path, bridge: int,
                                                                               tmp_path: Path) -> None:
    only_bash = tmp_path / "bin"
    only_bash.mkdir()
    (only_bash / "bash").symlink_to(shutil.which("bash") or "/bin/bash")

    result = cli("seam", "install", PATH=str(only_bash))  # a shell with no curl: the probe can never answer

    assert result.returncode == 1, result.stdout + result.stderr
    (shells,) = lines_of(result, "seam: task shells")
    assert not shells.startswith("ok") and "curl is not installed" in shells
    assert "the seam is not in place" in result.stdout


def test_remove_exits_non_zero_while_2xs_backend_still_hands_its_shells_the_bridges_port(
        cli: Cli, config: Path, bridge: int, tmp_path: Path) -> None:
    assert cli("seam", "install").returncode == 0
    # A backend restarted (pm2 --update-env) from a shell that sourced the block while the bridge answered.
    backend = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                str(tmp_path / "static" / "build" / "app.js")],
                               env={"QlPort": str(bridge), "QlPortWithoutBridge": "", "BACK_PORT": "5701",
                                    "PATH": os.environ["PATH"]})
    try:
        result = cli("seam", "remove")
    finally:
        backend.kill()
        backend.wait()

    assert result.returncode == 1, result.stdout + result.stderr
    assert config.read_bytes() == ORIGINAL
    assert "task shells still call the bridge" in result.stdout and "restart 2.x's container" in result.stdout


def test_status_says_installed_the_port_the_shells_call_and_whether_a_bridge_answers(cli: Cli, config: Path,
                                                                                      bridge: int) -> None:
    before = cli("seam", "status")
    assert cli("seam", "install").returncode == 0
    up = cli("seam", "status")

    assert before.returncode == 0 and lines_of(before, "block")[0].startswith("block    not installed")
    assert lines_of(up, "block")[0].startswith("block    installed ") and f"for port {bridge}, line 4" in up.stdout
    assert lines_of(up, "shells")[0].startswith(f"shells   call port {bridge} (bash sourced config.sh")
    assert lines_of(up, "bridge   ") == [f"bridge   answers localhost:{bridge}/livez (where the shells call)"]


def test_status_shows_the_shells_falling_back_when_the_bridge_is_down(cli: Cli, config: Path, bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    down = unused_port()
    config.write_text(config.read_text(errors="surrogateescape").replace(str(bridge), str(down)),
                      errors="surrogateescape")

    result = cli("seam", "status")

    assert lines_of(result, "shells")[0].startswith("shells   call port 5700 ")
    assert f"bridge   not at port {down} (where the block points)" in result.stdout


def test_every_seam_command_needs_the_2x_data_directory(cli: Cli) -> None:
    for command in ("install", "remove", "status"):
        assert "BRIDGE_LEGACY_DATA_DIR is not set" in one_line_failure(cli("seam", command))


def test_remove_without_a_block_changes_nothing_even_where_it_could_not(cli: Cli, config: Path,
                                                                         make_immutable) -> None:
    make_immutable(config)

    result = cli("seam", "remove")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no ql-bridge block, nothing to remove" in result.stdout and config.read_bytes() == ORIGINAL
