"""The cutover report names the 2.x release it measured in its header (JSON `legacy_release`, the page's
`#legacy-release`), as bootstrap decided it; a report written before the field stays a valid @1 report."""

from __future__ import annotations

import dataclasses
import json
from io import StringIO
from pathlib import Path

from rich.console import Console

from bridge.bootstrap.commands import write_cutover_report
from projections.report_schema import check_report
from tests.conftest import Backend
from tests.reports.conftest import NOW_S, make_scenario


def test_the_report_header_names_the_release_and_its_evidence(sqlite_backend: Backend, tmp_path: Path) -> None:
    scenario = make_scenario(sqlite_backend, tmp_path)
    scenario.execution(scenario.cron(), NOW_S - 3600)
    settings = dataclasses.replace(scenario.settings, legacy_release="2.21.0")

    json_path, html_path = write_cutover_report(settings, since="3650d", out_dir=tmp_path / "out",
                                                console=Console(file=StringIO()), environ={})

    body = json.loads(json_path.read_text())
    assert check_report(body) == []
    assert body["legacy_release"] == {"name": "v2.21.0", "line": "v2.21", "patch": 0,
                                      "evidence": "BRIDGE_LEGACY_RELEASE"}
    keys = list(body)
    assert keys.index("legacy_release") == keys.index("time_zone") + 1  # in the header, before the window
    header = html_path.read_text().split("</header>", 1)[0]
    assert '<p id="legacy-release">2.x release <b>v2.21.0</b> (from BRIDGE_LEGACY_RELEASE)</p>' in header


def test_a_release_known_only_by_the_schema_has_no_patch(sqlite_backend: Backend, tmp_path: Path) -> None:
    scenario = make_scenario(sqlite_backend, tmp_path)

    json_path, _ = write_cutover_report(scenario.settings, since="1d", out_dir=tmp_path / "out",
                                        console=Console(file=StringIO()), environ={})

    release = json.loads(json_path.read_text())["legacy_release"]
    assert release == {"name": "v2.21.x", "line": "v2.21", "patch": None, "evidence": "schema: RunningInstances table"}


def test_the_schema_accepts_reports_without_the_release_and_checks_it_when_present(
        sqlite_backend: Backend, tmp_path: Path) -> None:
    scenario = make_scenario(sqlite_backend, tmp_path)
    body = scenario.report()
    older = {k: v for k, v in body.items() if k != "legacy_release"}

    assert check_report(older) == []
    assert check_report({**body, "legacy_release": None}) == []
    assert check_report({**body, "legacy_release": {"name": "v2.19.2", "line": "v2.19", "patch": "2",
                                                    "evidence": "x"}}) == ["$.legacy_release.patch: wrong type str"]
