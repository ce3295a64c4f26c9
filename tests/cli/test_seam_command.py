"""`ql-bridge seam install | remove | status`, run as an operator runs them, against a temporary 2.x data
directory's real config.sh and real listeners (the doctor's seam lines come from real bash)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from legacy_adapters.seam_block import BEGIN, END, find_blocks
from tests.cli.conftest import Cli, one_line_failure, read_only_mount
from tests.support.listeners import BRIDGE_LIVEZ, PANEL_PAGE, answering, unused_port
from tests.support.qinglong_source import release_dir

# The block an earlier `seam install` wrote (it probed /livez and exported QlPort), as it wrote it.
EARLIER_BLOCK = (f"{BEGIN}: installed 2026-12-05T06:40:00Z by `ql-bridge seam install`; `ql-bridge seam remove` "
                 "takes it out >>>\n") + """\
# Task shells call back to ql-bridge on port 5799 only while it answers /livez within 0.3 s.
# Otherwise they keep the port they would have used without it, and 2.x records the execution itself.
# QlPortWithoutBridge remembers that port for processes started by a shell that already ran this
# block (2.x's backend, restarted from such a shell), which inherit the bridge's port.
[ "${QlPortWithoutBridge+set}" = set ] || export QlPortWithoutBridge="${QlPort-}"
case "$(curl -sf --noproxy '*' --max-time 0.3 http://localhost:5799/livez 2>/dev/null)" in
  *'"status":'*'"ok"'*) export QlPort=5799 ;;
  *) if [ -n "$QlPortWithoutBridge" ]; then export QlPort="$QlPortWithoutBridge"; else unset QlPort; fi ;;
esac
# <<< ql-bridge seam <<<"""
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
    assert shells.startswith("ok") and f"to the bridge at 127.0.0.1:{bridge}" in shells and "ql-bridge block" in shells
    assert lines_of(result, "seam: 2.x's backend")


def test_installing_twice_leaves_one_block_and_changes_nothing_the_second_time(cli: Cli, config: Path,
                                                                                 bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    after_first = files(config.parent)

    again = cli("seam", "install")

    assert again.returncode == 0 and "already installed" in again.stdout
    assert files(config.parent) == after_first and len(find_blocks(config.read_text(errors="surrogateescape"))) == 1


def test_installing_again_brings_a_block_of_another_text_up_to_date(cli: Cli, config: Path, bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    installed = config.read_bytes()
    config.write_bytes(installed.replace(b"ql_bridge_again=", b"ql_bridge_again=9"))  # a block another build wrote

    again = cli("seam", "install")

    assert again.returncode == 0 and "ql-bridge block installed" in again.stdout
    text, before = config.read_text(errors="surrogateescape"), installed.decode(errors="surrogateescape")
    (now,), (first,) = find_blocks(text), find_blocks(before)
    assert "ql_bridge_again=9" not in text  # the same block as the first install wrote, bar its time stamp
    assert text[now.start:now.end].split("\n", 1)[1] == before[first.start:first.end].split("\n", 1)[1]


def test_dry_run_prints_the_diff_and_changes_nothing(cli: Cli, config: Path, bridge: int) -> None:
    config.write_text("## user settings\nexport TZ=Asia/Shanghai\n")  # the diff is printed as the file's bytes
    before = files(config.parent)

    result = cli("seam", "install", "--dry-run")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"--- {config}\n+++ {config} (after)\n")
    assert f"+{BEGIN}" in result.stdout and f"+{END} <<<" in result.stdout
    assert f'ql_bridge_url="http://127.0.0.1:{bridge}$path"' in result.stdout and "QlPort" not in result.stdout
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

    assert "no ql-bridge answers 127.0.0.1:" in line and "start `ql-bridge serve` first" in line
    assert files(config.parent) == before


def test_install_exits_non_zero_when_the_shells_still_cannot_reach_the_bridge(cli: Cli, config: Path,
                                                                               bridge: int) -> None:
    config.write_bytes(ORIGINAL + b"\nreturn 0\n")  # config.sh ends before the block appended after it

    result = cli("seam", "install")

    assert result.returncode == 1, result.stdout + result.stderr
    (shells,) = lines_of(result, "seam: task shells")
    assert not shells.startswith("ok") and "defines no ql-bridge callback function" in shells
    assert "the seam is not in place" in result.stdout


def test_remove_exits_non_zero_while_2xs_backend_still_hands_its_shells_the_bridges_port(
        cli: Cli, config: Path, bridge: int, tmp_path: Path) -> None:
    assert cli("seam", "install").returncode == 0
    # A backend restarted (pm2 --update-env) from a shell that sourced the block while the bridge answered.
    backend = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                str(tmp_path / "static" / "build" / "app.js")],
                               env={"QlPort": str(bridge), "QlPortWithoutBridge": "", "BACK_PORT": "5701",
                                    "QL_DATA_DIR": str(config.parent.parent), "PATH": os.environ["PATH"]})
    try:
        result = cli("seam", "remove")
    finally:
        backend.kill()
        backend.wait()

    assert result.returncode == 1, result.stdout + result.stderr
    assert config.read_bytes() == ORIGINAL
    assert "task shells still call the bridge" in result.stdout and "restart 2.x's container" in result.stdout


def test_status_says_installed_where_the_shells_send_callbacks_and_whether_a_bridge_answers(cli: Cli, config: Path,
                                                                                              bridge: int) -> None:
    before = cli("seam", "status")
    assert cli("seam", "install").returncode == 0
    up = cli("seam", "status")

    assert before.returncode == 0 and lines_of(before, "block")[0].startswith("block    not installed")
    assert lines_of(before, "shells")[0].startswith("shells   call 2.x on port ")  # QlPort's port, or 5700
    assert lines_of(up, "block")[0].startswith("block    installed ") and f"for port {bridge}, line 4" in up.stdout
    assert lines_of(up, "shells")[0].startswith(f"shells   send status callbacks to the bridge at 127.0.0.1:{bridge}, "
                                                "and each one the bridge cannot take to 2.x on port ")
    assert lines_of(up, "bridge   ") == [f"bridge   answers 127.0.0.1:{bridge}/livez (where the block sends callbacks)"]


def test_status_and_the_doctor_say_when_no_bridge_answers_where_the_block_sends_callbacks(
        cli: Cli, config: Path, bridge: int) -> None:
    assert cli("seam", "install").returncode == 0
    down = unused_port()
    config.write_text(config.read_text(errors="surrogateescape").replace(str(bridge), str(down)),
                      errors="surrogateescape")

    result = cli("seam", "status")
    doctor = cli("doctor")

    assert f"bridge   not at port {down} (where the block sends callbacks)" in result.stdout
    (shells,) = lines_of(doctor, "seam: task shells")
    assert shells.startswith("fail") and f"sends callbacks to port {down}" in shells


@pytest.mark.parametrize("tag", ["v2.17.13", "v2.18.3", "v2.19.2"])
def test_up_to_v2_19_status_and_the_doctor_say_shells_call_5600_never_5700(cli: Cli, config: Path, bridge: int,
                                                                            tag: str) -> None:
    release = {"BRIDGE_LEGACY_INSTALL_DIR": str(release_dir(tag))}  # its own version.yaml names it
    config.write_text("## user settings\n")  # the dry run's diff is read as text here

    before, doctor = cli("seam", "status", **release), cli("doctor", **release)
    dry_run = cli("seam", "install", "--dry-run", **release)

    (shells,) = lines_of(before, "shells")
    assert shells.startswith(f"shells   call 2.x on port 5600 (0.0.0.0:5600, the literal URL in its api.sh, 2.x {tag})")
    (checked,) = lines_of(doctor, "seam: task shells")
    assert "0.0.0.0:5600" in checked and "5700" not in checked
    assert "5700" not in shells
    # What install offers is the callback block (proven in each release's real shell: test_release_shells.py).
    assert dry_run.returncode == 0 and "ql_bridge_callback_url" in dry_run.stdout and "QlPort" not in dry_run.stdout


def test_install_refuses_a_release_that_sources_config_sh_before_its_callback_functions(cli: Cli, config: Path,
                                                                                        bridge: int) -> None:
    before = files(config.parent)

    line = one_line_failure(cli("seam", "install", BRIDGE_LEGACY_INSTALL_DIR=str(release_dir("v2.17.8"))))

    assert "seam install refused: 2.x v2.17.8 sources config.sh before api.sh" in line
    assert "nothing was changed" in line and files(config.parent) == before


def test_an_earlier_qlport_block_is_replaced_by_install_and_taken_out_by_remove(cli: Cli, config: Path,
                                                                               bridge: int) -> None:
    config.write_bytes(ORIGINAL + b"\n" + EARLIER_BLOCK.encode())
    status = cli("seam", "status")

    assert cli("seam", "install").returncode == 0
    installed = config.read_text(errors="surrogateescape")
    assert cli("seam", "remove").returncode == 0

    assert "the earlier kind, which sets QlPort" in lines_of(status, "block")[0]
    assert [(b.port, b.sets_qlport) for b in find_blocks(installed)] == [(bridge, False)]
    assert "QlPort" not in installed.split(BEGIN, 1)[1]
    assert config.read_bytes() == ORIGINAL


def test_every_seam_command_needs_the_2x_data_directory(cli: Cli) -> None:
    for command in ("install", "remove", "status"):
        assert "BRIDGE_LEGACY_DATA_DIR is not set" in one_line_failure(cli("seam", command))


def test_remove_without_a_block_changes_nothing_even_where_it_could_not(cli: Cli, config: Path,
                                                                         make_immutable) -> None:
    make_immutable(config)

    result = cli("seam", "remove")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no ql-bridge block, nothing to remove" in result.stdout and config.read_bytes() == ORIGINAL
