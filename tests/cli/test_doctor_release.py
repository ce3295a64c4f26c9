"""Which 2.x release the bridge fronts, as `ql-bridge doctor`, `ql-bridge status` and `ql-bridge seam install` say
it: named with its evidence, a warning when only the schema narrowed it, and one line naming a release the bridge
does not support (doctor goes on with its other checks; seam install changes nothing)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cli, one_line_failure
from tests.integration.old_releases import Install, make_install


def front(cli: Cli, install: Install) -> None:
    cli.env |= {"BRIDGE_LEGACY_DATA_DIR": str(install.data.root), "BRIDGE_LEGACY_URL": "http://127.0.0.1:9"}


def release_lines(stdout: str) -> list[str]:
    """The release check's line, and its fix when it names BRIDGE_LEGACY_RELEASE."""
    return [line for line in stdout.splitlines()
            if "2.x release" in line or line.startswith("      fix: set BRIDGE_LEGACY_RELEASE")]


def test_doctor_names_the_release_and_the_version_yaml_that_says_so(cli: Cli, store: Path, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.19.2")
    front(cli, install)

    result = cli("doctor")

    assert release_lines(result.stdout) == [f"ok    2.x release: 2.x v2.19.2 ({install.root / 'version.yaml'})"]


def test_doctor_warns_when_only_the_schema_narrowed_the_release(cli: Cli, store: Path, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.20.2")
    (install.root / "version.yaml").unlink()  # a bridge that sees only 2.x's data volume
    front(cli, install)

    result = cli("doctor")

    check, fix = release_lines(result.stdout)
    assert check.startswith("warn  2.x release: 2.x v2.20.x (schema: Crontabs.log_name, no RunningInstances)")
    assert "patch is not known" in check and "BRIDGE_LEGACY_RELEASE" in fix


def test_doctor_fails_in_one_line_naming_a_release_older_than_v2_17_and_still_checks_the_rest(
        cli: Cli, store: Path, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.17.8", version="2.16.5")
    front(cli, install)

    result = cli("doctor")

    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = [line for line in result.stdout.splitlines() if "2.x release" in line]
    assert line.startswith("fail") and "v2.16.5" in line and "older than v2.17.0" in line
    after = result.stdout.splitlines()[result.stdout.splitlines().index(line) + 1]
    assert not after.startswith("      fix:")  # one line: the refusal says what to do
    for other in ("bridge store", "2.x database", "2.x over HTTP", "time zone", "process identity"):
        assert f"  {other}: " in result.stdout, other


def test_seam_install_refuses_in_one_line_naming_a_release_older_than_v2_17(cli: Cli, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.17.8", version="2.16.5")
    config = install.data.root / "config" / "config.sh"
    config.write_text("## user config\n")
    front(cli, install)

    line = one_line_failure(cli("seam", "install"))

    assert "v2.16.5" in line and "older than v2.17.0" in line
    assert config.read_text() == "## user config\n" and list(config.parent.glob("config.sh.*")) == []


def test_status_prints_the_release_with_its_evidence(cli: Cli, store: Path, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.18.3")
    front(cli, install)

    result = cli("status")

    assert result.returncode == 0, result.stderr
    assert f"release  2.x v2.18.3 ({install.root / 'version.yaml'})" in result.stdout.splitlines()


def test_status_says_a_release_the_bridge_does_not_front_and_exits_1(cli: Cli, store: Path, tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.17.8", version="2.16.5")
    front(cli, install)

    result = cli("status")

    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("release")]
    assert "not supported" in line and "v2.16.5" in line
