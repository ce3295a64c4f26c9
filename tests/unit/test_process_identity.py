"""ProcProbe: a process counts as the recorded one only when boot id, start ticks and process group all match."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from legacy_adapters.process_identity import ProcessHandle, ProcProbe

BOOT = "0f4c2a55-9d1e-4d7b-8a55-3d9d2f6f1a01"


def fake_proc(root: Path, *, boot: str = BOOT) -> Path:
    (root / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/random/boot_id").write_text(boot + "\n")
    return root


def add_process(root: Path, pid: int, comm: str, *, start_ticks: int, pgrp: int) -> None:
    # /proc/<pid>/stat: pid (comm) state ppid pgrp session tty tpgid flags ... field 22 is starttime.
    fields = ["S", "1", str(pgrp), str(pgrp), "0", "-1", "4194560"] + ["0"] * 12 + [str(start_ticks), "0"]
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")


def test_a_handle_is_taken_for_the_task_shell_and_proves_the_same_process(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    add_process(root, 4321, "bash", start_ticks=987_654, pgrp=4300)
    probe = ProcProbe(root)
    handle = probe.handle_for_shell(4321)
    assert handle == ProcessHandle(BOOT, 987_654, 4300)
    assert ProcessHandle.from_json(handle.to_json()) == handle
    assert probe.same_process(4321, handle) is True


@pytest.mark.parametrize("comm", ["node", "python3", "sleep"])
def test_no_handle_for_a_pid_that_is_not_a_shell(tmp_path: Path, comm: str) -> None:
    root = fake_proc(tmp_path)
    add_process(root, 4321, comm, start_ticks=1, pgrp=1)
    assert ProcProbe(root).handle_for_shell(4321) is None


def test_a_command_name_with_spaces_and_parentheses_is_parsed_from_the_last_parenthesis(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    add_process(root, 77, "we)ird (name", start_ticks=55, pgrp=70)
    assert ProcProbe(root).stat(77) == ("we)ird (name", 55, 70)


def test_a_reused_pid_a_gone_pid_and_a_reboot_are_all_different_processes(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    add_process(root, 4321, "bash", start_ticks=987_654, pgrp=4300)
    handle = ProcProbe(root).handle_for_shell(4321)

    add_process(root, 4321, "bash", start_ticks=999_999, pgrp=4300)  # same pid, started later: reused
    assert ProcProbe(root).same_process(4321, handle) is False
    (root / "4321" / "stat").unlink()  # gone
    assert ProcProbe(root).same_process(4321, handle) is False
    add_process(root, 4321, "bash", start_ticks=987_654, pgrp=4300)
    after_reboot = fake_proc(tmp_path / "next-boot", boot="7b1e0c1d-0000-4000-8000-000000000002")
    add_process(after_reboot, 4321, "bash", start_ticks=987_654, pgrp=4300)
    assert ProcProbe(after_reboot).same_process(4321, handle) is False


def test_without_a_handle_or_a_boot_id_nothing_can_be_proven(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    add_process(root, 4321, "bash", start_ticks=1, pgrp=1)
    assert ProcProbe(root).same_process(4321, None) is None
    no_boot = tmp_path / "no-boot"
    add_process(no_boot, 4321, "bash", start_ticks=1, pgrp=1)
    assert ProcProbe(no_boot).handle_for_shell(4321) is None
    assert ProcProbe(no_boot).same_process(4321, ProcessHandle(BOOT, 1, 1)) is None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_real_shell_is_the_same_process_while_it_lives_and_not_after() -> None:
    shell = subprocess.Popen(["bash", "-c", "read -r _"], stdin=subprocess.PIPE)
    probe = ProcProbe()
    try:
        handle = probe.handle_for_shell(shell.pid)
        assert handle is not None and probe.same_process(shell.pid, handle) is True
    finally:
        shell.communicate(b"\n", timeout=10)
    assert probe.same_process(shell.pid, handle) is False
