"""The rooms are layers: pyproject's import-linter ``layers`` contract orders them, counts indirect imports, and
covers every module; these tests keep that contract meaningful and the import graph free of cycles."""

from __future__ import annotations

from pathlib import Path

import grimp

from tests.support.import_linter import contract, lint_imports

PACKAGES = ("bridge", "legacy_adapters", "projections")


def layers_contract() -> dict[str, object]:
    return contract("layers")


def layer_members() -> list[str]:
    layers: list[str] = layers_contract()["layers"]  # type: ignore[assignment]
    return [name.strip() for layer in layers for name in layer.replace(":", "|").split("|")]


def test_the_layers_count_indirect_imports_and_every_module_has_a_room() -> None:
    assert layers_contract()["type"] == "layers" and "allow_indirect_imports" not in layers_contract()
    members = layer_members()
    graph = grimp.build_graph(*PACKAGES)
    homeless = sorted(m for m in graph.modules
                      if m not in PACKAGES[:1] and not any(m == x or m.startswith(x + ".") for x in members))
    assert homeless == []  # a new loose module must be given a layer, or it escapes the contract


def test_the_layers_contract_is_kept() -> None:
    done = lint_imports("--contract", "layers")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_layers_contract_breaks_when_a_lower_room_imports_a_higher_one(tmp_path: Path) -> None:
    """A negative control: with the jobs placed below storage, the jobs' real imports of storage break it."""
    config = tmp_path / "contract.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["bridge"]\n\n[[tool.importlinter.contracts]]\n'
        'id = "probe"\nname = "probe"\ntype = "layers"\nlayers = ["bridge.storage", "bridge.jobs"]\n')
    done = lint_imports("--config", str(config))
    assert done.returncode != 0 and "BROKEN" in done.stdout


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES)
    cycles = [m for m in graph.modules
              if any(graph.chain_exists(importer=other, imported=m)
                     for other in graph.find_modules_directly_imported_by(m))]
    assert cycles == []
