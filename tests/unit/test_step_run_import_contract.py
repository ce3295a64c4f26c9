"""docs/run-state.md#storage-capability-only: StepRuns are a storage capability. pyproject's import-linter contract
keeps the callback path, the jobs and the web layer from importing anything that can write them; these tests keep that
contract meaningful."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.support.import_linter import contract as named_contract
from tests.support.import_linter import lint_imports

CONTRACT_ID = "step-runs-write"


def contract() -> dict[str, object]:
    return named_contract(CONTRACT_ID)


def test_the_contract_names_modules_that_exist_and_every_module_that_can_write_step_runs() -> None:
    found = contract()
    assert found["type"] == "forbidden" and "allow_indirect_imports" not in found  # indirect imports count too
    for name in [*found["source_modules"], *found["forbidden_modules"]]:  # type: ignore[misc]
        assert importlib.util.find_spec(name) is not None, f"{name} no longer exists: update the contract"
    assert set(found["forbidden_modules"]) == {  # type: ignore[arg-type]
        "bridge.service.step_runs", "bridge.storage.step_runs", "bridge.storage.step_runs_memory"}
    assert {"bridge.web", "bridge.callbacks", "bridge.jobs"} <= set(found["source_modules"])  # type: ignore[arg-type]


def test_the_contract_is_kept() -> None:
    done = lint_imports("--contract", CONTRACT_ID)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_contract_breaks_when_a_source_reaches_the_repository(tmp_path: Path) -> None:
    """A negative control: the same contract over a module known to import the repository is reported broken."""
    config = tmp_path / "contract.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["bridge", "tests"]\n\n[[tool.importlinter.contracts]]\n'
        f'id = "{CONTRACT_ID}"\nname = "probe"\ntype = "forbidden"\n'
        'source_modules = ["tests.contract.step_run_world"]\n'
        'forbidden_modules = ["bridge.storage.step_runs"]\n')
    done = lint_imports("--config", str(config))
    assert done.returncode != 0 and "BROKEN" in done.stdout
