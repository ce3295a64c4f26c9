"""Running import-linter against pyproject's contracts, for the tests that keep those contracts meaningful."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import postgres_required

ROOT = Path(__file__).resolve().parents[2]


def contract(contract_id: str) -> dict[str, Any]:
    """The contract with this id in pyproject.toml."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c.get("id") == contract_id)


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "lint-imports"
    if not tool.exists():
        if postgres_required():  # CI installs the test extras: a missing tool there is a broken setup
            pytest.fail("import-linter is not installed: pip install -e .[test]")
        pytest.skip("import-linter is not installed: pip install -e .[test]")
    return subprocess.run([str(tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
