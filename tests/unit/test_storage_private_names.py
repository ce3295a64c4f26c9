"""No module of bridge.storage imports a private name of another module: what two storage modules share (the
statement engine, the row mappers, the Run fence) has a public name in a module of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import bridge.storage

STORAGE = Path(bridge.storage.__file__).parent


def test_no_storage_module_imports_a_private_name_of_another_module() -> None:
    modules = sorted(STORAGE.glob("*.py"))
    assert len(modules) > 10, "the scan is looking in the wrong place"
    found = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("bridge", "legacy_adapters",
                                                                                          "projections"):
                found += [f"{path.name}:{node.lineno} {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_")]
    assert found == []
