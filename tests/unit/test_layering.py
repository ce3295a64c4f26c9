"""The domain is pure: every import in bridge/domain is the standard library or the domain itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import bridge.domain

DOMAIN = Path(bridge.domain.__file__).parent


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module)
    return roots


def test_the_domain_imports_only_the_standard_library() -> None:
    offenders = {}
    for path in DOMAIN.glob("*.py"):
        bad = {m for m in imported_roots(path)
               if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("bridge.domain")}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
