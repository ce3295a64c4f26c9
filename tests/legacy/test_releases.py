"""The release profile: each line's facts as docs/legacy-2x.md#older-releases gives them, and the evidence order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge.bootstrap.release import decide_legacy_release
from bridge.config import ConfigError, Settings
from legacy_adapters.releases import (
    ReleaseLine,
    UnsupportedRelease,
    decide_release,
    profile_for,
    read_install_version,
)
from tests.support.qinglong_source import TAGS, release_dir


@pytest.mark.parametrize(("version", "port", "exit_code", "empty_pid", "marker", "health", "queued"), [
    ("2.17.13", 5600, False, True, None, False, 0.5),
    ("2.18.1", 5600, False, True, "(手动停止)", False, 0.5),
    ("2.18.3", 5600, False, False, "(手动停止)", False, 0.5),
    ("2.19.2", 5600, False, False, "(手动停止)", True, 0.5),
    ("2.20.2", None, False, False, "(手动停止)", True, 0.5),
    ("2.21.0", None, True, False, "## 已停止", True, 3),
])
def test_each_line_reports_what_its_code_does(version: str, port: int | None, exit_code: bool, empty_pid: bool,
                                               marker: str | None, health: bool, queued: float) -> None:
    profile = profile_for(version, "test")
    assert (profile.fixed_callback_port, profile.sends_exit_code, profile.end_pid_may_be_empty,
            profile.stop_marker, profile.health_on_backend, profile.queued_status) == (
        port, exit_code, empty_pid, marker, health, queued)
    assert profile.has_running_instances is (version == "2.21.0")
    assert (profile.primary_refusal is None) is (version == "2.21.0")


def test_an_unknown_patch_claims_least() -> None:
    assert profile_for("v2.18", "t").end_pid_may_be_empty  # v2.18.0 and v2.18.1 send ''
    assert not profile_for("v2.17", "t").config_sh_after_api_sh  # v2.17.0–v2.17.8 source config.sh first
    assert profile_for("v2.17.9", "t").config_sh_after_api_sh
    assert profile_for("v2.18", "t").name == "v2.18.x"


@pytest.mark.parametrize(("version", "words"), [
    ("2.16.9", "older than v2.17.0"), ("v2.9.3", "older than v2.17.0"), ("3.0.0", "newer than"),
    ("2.22.0", "newer than"), ("latest", "not a 2.x version"),
])
def test_a_release_the_bridge_does_not_know_is_refused_by_name(version: str, words: str) -> None:
    with pytest.raises(UnsupportedRelease, match=words):
        profile_for(version, "t")


@pytest.mark.parametrize("tag", TAGS)
def test_every_tags_own_version_file_is_read(tag: str) -> None:
    assert f"v{read_install_version(release_dir(tag))}" == tag
    assert profile_for(read_install_version(release_dir(tag)) or "", "t").name == tag


def _database(path: Path, *, instances: bool, log_name: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        extra = ", log_name" if log_name else ""
        conn.execute(f"CREATE TABLE Crontabs (id INTEGER PRIMARY KEY, command, schedule{extra})")
        if instances:
            conn.execute("CREATE TABLE RunningInstances (id INTEGER PRIMARY KEY)")
    conn.close()


@pytest.mark.parametrize(("instances", "log_name", "keyv", "line"), [
    (True, True, True, ReleaseLine.V2_21), (False, True, True, ReleaseLine.V2_20),
    (False, False, True, ReleaseLine.V2_18), (False, False, False, ReleaseLine.V2_17),
])
def test_without_a_version_file_the_schema_narrows_the_line(tmp_path: Path, instances: bool, log_name: bool,
                                                            keyv: bool, line: ReleaseLine) -> None:
    data = tmp_path / "ql" / "data"
    _database(data / "db" / "database.sqlite", instances=instances, log_name=log_name)
    if keyv:
        (data / "db" / "keyv.sqlite").write_bytes(b"")
    profile = decide_legacy_release(Settings.from_env({"BRIDGE_LEGACY_DATA_DIR": str(data)}))
    assert (profile.line, profile.patch) == (line, None)
    assert profile.evidence.startswith("schema:")


def test_the_operators_word_comes_before_the_version_file_and_the_version_file_before_the_schema(
        tmp_path: Path) -> None:
    data = tmp_path / "ql" / "data"
    _database(data / "db" / "database.sqlite", instances=True, log_name=True)
    (tmp_path / "ql" / "version.yaml").write_text("version: 2.20.2\nchangeLogLink: x\n")
    env = {"BRIDGE_LEGACY_DATA_DIR": str(data)}
    assert decide_legacy_release(Settings.from_env(env)).name == "v2.20.2"
    assert decide_legacy_release(Settings.from_env({**env, "BRIDGE_LEGACY_RELEASE": "v2.19.2"})).name == "v2.19.2"
    assert decide_release(declared=None, install_dir=None, schema=None).line is ReleaseLine.V2_21


def test_an_unsupported_install_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "ql" / "data").mkdir(parents=True)
    (tmp_path / "ql" / "version.yaml").write_text("version: 2.16.5\n")
    with pytest.raises(ConfigError, match=r"v2\.16\.5 is older than v2\.17\.0"):
        decide_legacy_release(Settings.from_env({"BRIDGE_LEGACY_DATA_DIR": str(tmp_path / "ql" / "data")}))
    with pytest.raises(ConfigError, match="BRIDGE_LEGACY_RELEASE"):
        Settings.from_env({"BRIDGE_LEGACY_RELEASE": "newest"})
