"""The CLI tests run the real command in a subprocess, as an operator or a container does, with an
environment of its own (no BRIDGE_* variable of the caller leaks in)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from legacy_adapters.testing.datadir import create_legacy_data_dir


@dataclass
class Cli:
    """``cli("status")`` runs ``python -m bridge.cli status``; ``prefix`` wraps it (e.g. in a mount namespace)."""

    env: dict[str, str]
    cwd: Path
    prefix: list[str] = field(default_factory=list)

    def __call__(self, *args: str, timeout: float = 60, prefix: Sequence[str] = (),
                 **env: str) -> subprocess.CompletedProcess[str]:
        argv = [*prefix, sys.executable, "-m", "bridge.cli", *args]
        return subprocess.run(argv, env={**self.env, **env}, cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env |= {"BRIDGE_DATA_DIR": str(tmp_path / "var"), "BRIDGE_LISTEN": "127.0.0.1:1"}
    return Cli(env, tmp_path)


@pytest.fixture
def store(tmp_path: Path, sqlite_template: Path) -> Path:
    """A SQLite store at this code's head where `cli` looks for it (BRIDGE_DATA_DIR/bridge.sqlite)."""
    path = tmp_path / "var" / "bridge.sqlite"
    path.parent.mkdir()
    shutil.copy(sqlite_template, path)
    return path


@pytest.fixture
def legacy_dir(tmp_path: Path, cli: Cli) -> Path:
    """A 2.x data directory (the test double's layout), named by BRIDGE_LEGACY_DATA_DIR in `cli`'s environment."""
    root = tmp_path / "ql"
    create_legacy_data_dir(root)
    cli.env["BRIDGE_LEGACY_DATA_DIR"] = str(root)
    return root


def one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    """The failure line of a command that must fail with exactly one line on stderr and no traceback."""
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ql-bridge: "), lines[0]
    return lines[0]


def dump(path: Path) -> list[str]:
    """Every row of a SQLite file, to prove a command wrote nothing."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def read_only_mount(folder: Path) -> list[str]:
    """An argv prefix running a command with ``folder`` bind-mounted read-only onto itself, in a mount
    namespace of its own (nothing outside the command sees it). Tests run as root, for whom chmod changes
    nothing; a read-only mount is refused to root too. Skips where namespaces or mounts are not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    prefix = ["unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
    probe = subprocess.run([*prefix, "sh", "-c", 'touch "$0/.probe"', str(folder)], capture_output=True)
    if probe.returncode == 0 or (folder / ".probe").exists():
        (folder / ".probe").unlink(missing_ok=True)
        pytest.skip("a read-only bind mount is not possible here")
    return prefix


@pytest.fixture
def make_immutable() -> Iterator[Callable[[Path], None]]:
    """``make_immutable(path)``: `chattr +i` (which binds root too), undone after the test. Skips where the file
    system or the capabilities do not allow it."""
    frozen: list[Path] = []

    def freeze(path: Path) -> None:
        if shutil.which("chattr") is None:
            pytest.skip("chattr(1) is not installed")
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not allowed here")
        frozen.append(path)

    yield freeze
    for path in frozen:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
