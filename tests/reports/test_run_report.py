"""run_report end to end, the stored report, the window option and the file names."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from bridge.bootstrap.commands import write_cutover_report as run_report
from bridge.config import ConfigError, Settings
from bridge.domain.errors import BridgeError
from bridge.jobs.report.command import LegacyDataDirNotConfiguredError, parse_since, write_report
from bridge.storage.report_queries import ReportQueries
from projections.report_schema import check_report
from tests.conftest import Backend
from tests.reports.conftest import NOW_MS, NOW_S, Scenario, make_scenario


def test_run_report_writes_both_files_and_stores_the_body(sqlite_backend: Backend, tmp_path: Path) -> None:
    # run_report builds its own engine from the store URL; build_report covers PostgreSQL in test_report_figures.
    scenario = make_scenario(sqlite_backend, tmp_path)
    scenario.execution(scenario.cron(), NOW_S - 3600)
    settings = scenario.settings
    console = Console(file=StringIO(), force_terminal=False)
    json_path, html_path = run_report(settings, since="3650d", out_dir=tmp_path / "out", console=console,
                                      environ={"BRIDGE_GATE_MIN_EXECUTIONS": "1"})
    assert json_path.parent == html_path.parent == tmp_path / "out"
    assert json_path.name.startswith("cutover-") and json_path.suffix == ".json" and html_path.suffix == ".html"
    assert json_path.stem == html_path.stem
    body = json.loads(json_path.read_text())
    assert check_report(body) == []
    assert body["thresholds"]["min_executions"] == 1
    assert body["origins"][0]["figures"]["executions_observed"] == 1
    assert ReportQueries(scenario.backend.engine).latest_report() == body  # type: ignore[arg-type]
    assert 'id="origin-table"' in html_path.read_text()


def test_saved_reports_come_back_newest_first(sql_backend: Backend) -> None:
    queries = ReportQueries(sql_backend.engine)  # type: ignore[arg-type]
    assert queries.latest_report() is None
    first = queries.save_report('{"n": 1}', (1, 2), created_at_ms=10)
    second = queries.save_report('{"n": 2}', (1, 3), created_at_ms=20)
    assert second != first and queries.latest_report() == {"n": 2}


def test_a_missing_legacy_data_dir_is_a_bridge_error_with_a_clear_message(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/b.sqlite", data_dir=tmp_path)
    with pytest.raises(LegacyDataDirNotConfiguredError) as caught:
        run_report(settings, out_dir=tmp_path)
    assert isinstance(caught.value, BridgeError) and caught.value.code == "LEGACY_DATABASE"
    assert "BRIDGE_LEGACY_DATA_DIR is not set" in str(caught.value)


def test_a_bad_gate_threshold_or_origin_is_a_config_error_naming_it(scenario: Scenario, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BRIDGE_GATE_COMPLETENESS"):
        run_report(scenario.settings, out_dir=tmp_path, environ={"BRIDGE_GATE_COMPLETENESS": "high"})
    with pytest.raises(ConfigError, match="--origin"):
        run_report(scenario.settings, origin="cron", out_dir=tmp_path, environ={})


@pytest.mark.parametrize("text, expected", [
    (None, NOW_MS - 7 * 86_400_000),
    ("24h", NOW_MS - 86_400_000),
    ("7d", NOW_MS - 7 * 86_400_000),
    ("2026-12-01", 1_796_083_200_000),
    ("2026-12-01T08:00:00Z", 1_796_112_000_000),
    ("2026-12-01T16:00:00+08:00", 1_796_112_000_000),
])
def test_since_accepts_rfc3339_a_date_or_a_look_back(text: str | None, expected: int) -> None:
    assert parse_since(text, NOW_MS) == expected


@pytest.mark.parametrize("text", ["last week", "7w", "2026-12-01T08:00:00", "2027-01-01"])
def test_a_bad_since_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        parse_since(text, NOW_MS)


def test_report_files_are_named_by_utc_time_and_never_overwritten(tmp_path: Path) -> None:
    report = {"schema": "ql-bridge/cutover-report@1", "generated_at": "2026-12-02T13:00:00.000Z",
              "window": {"start": "2026-11-25T13:00:00.000Z", "end": "2026-12-02T13:00:00.000Z",
                         "start_ms": NOW_MS - 7 * 86_400_000, "end_ms": NOW_MS},
              "thresholds": {"min_executions": 20, "completeness": 0.99, "terminal_status_agreement": 0.99,
                             "exit_code_agreement": 0.99, "max_duplicates": 0, "stale_mismatch_kinds": []},
              "origins": [], "mismatch_timeline": [], "notes": []}
    first = write_report(report, tmp_path)
    second = write_report(report, tmp_path)
    assert [p.name for p in first] == ["cutover-20261202T130000Z.json", "cutover-20261202T130000Z.html"]
    assert [p.name for p in second] == ["cutover-20261202T130000Z-2.json", "cutover-20261202T130000Z-2.html"]
