"""The command's name, version and help: what each command reads from the environment is in its --help,
and the lists cannot drift from what Settings.from_env and GateThresholds.from_env really read."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from bridge.config import Settings
from projections.gates import GateThresholds
from tests.cli.conftest import Cli


class RecordingEnv(dict[str, str]):
    """An empty environment that remembers every name read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def settings_variables() -> set[str]:
    env = RecordingEnv()
    Settings.from_env(env)
    return env.read


def gate_variables() -> set[str]:
    env = RecordingEnv()
    GateThresholds.from_env(env)
    return env.read


def help_of(*path: str) -> str:
    from bridge.cli import main

    result = CliRunner().invoke(main, [*path, "--help"], prog_name="ql-bridge")
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # help text is wrapped to the terminal: compare words


def leaf_commands() -> list[tuple[str, ...]]:
    from bridge.cli import main

    found: list[tuple[str, ...]] = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            found.append(path)

    walk(main, ())
    return found


def test_version_is_the_installed_package_version(cli: Cli) -> None:
    result = cli("--version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ql-bridge {version('ql-bridge')}"


def test_usage_says_ql_bridge_under_either_name(cli: Cli) -> None:
    alias = Path(sys.executable).parent / "bridge"
    runs = [cli("--help"), cli("flags", "set", "--help")]
    if alias.exists():  # the console script of the old name
        import subprocess

        runs.append(subprocess.run([str(alias), "--help"], env=cli.env, capture_output=True, text=True, timeout=60))
    for result in runs:
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Usage: ql-bridge "), result.stdout[:80]


def test_serve_help_lists_every_variable_the_settings_read() -> None:
    text = help_of("serve")

    assert "Environment" in text
    missing = sorted(name for name in settings_variables() if name not in text.replace(",", " ").split())
    assert not missing, missing


def test_report_help_lists_the_gate_thresholds_and_the_store() -> None:
    words = help_of("report").replace(",", " ").split()

    assert set(gate_variables()) | {"BRIDGE_DATABASE_URL", "BRIDGE_LEGACY_DATA_DIR"} <= set(words)


@pytest.mark.parametrize("path", [("status",), ("db", "upgrade"), ("flags", "show"), ("flags", "set"),
                                  ("reconcile",), ("import-legacy",), ("projection", "retry")])
def test_help_of_a_store_command_names_the_store_variables(path: tuple[str, ...]) -> None:
    words = help_of(*path).replace(",", " ").split()

    assert {"BRIDGE_DATABASE_URL", "BRIDGE_DATABASE_SCHEMA", "BRIDGE_DATA_DIR"} <= set(words)


def test_the_environment_table_holds_every_command_and_only_variables_that_are_read() -> None:
    from bridge.cli import ENVIRONMENT

    commands = {" ".join(path) for path in leaf_commands()}
    known = settings_variables() | gate_variables()

    assert commands == set(ENVIRONMENT), "each command needs its row in bridge.cli.ENVIRONMENT (and only those)"
    for command, names in ENVIRONMENT.items():
        assert set(names) <= known, (command, sorted(set(names) - known))
        assert len(set(names)) == len(names), command
    assert settings_variables() <= set(ENVIRONMENT["serve"]), sorted(settings_variables() - set(ENVIRONMENT["serve"]))


@pytest.mark.parametrize("path", leaf_commands(), ids=" ".join)
def test_each_help_shows_its_row_of_the_table_and_says_ql_bridge(path: tuple[str, ...]) -> None:
    from bridge.cli import ENVIRONMENT

    text = help_of(*path)
    words = text.replace(",", " ").split()

    assert set(ENVIRONMENT[" ".join(path)]) <= set(words)
    assert "`bridge " not in text and "bridge:" not in text, text
