"""The HTML report in a real browser: headless Chromium renders the origin table and both SVG charts, and logs
no console error (the page has no script, so any error would come from broken markup)."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bridge.reporting import write_report
from tests.conftest import Backend
from tests.reports.conftest import NOW_S, make_scenario

pytestmark = pytest.mark.chromium
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0")


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is required in CI for the HTML report test (apt-get install chromium)")
        pytest.skip("chromium is not installed: the browser check of the HTML report did not run "
                    "(apt-get install chromium)")
    return path


class Elements(HTMLParser):
    """Counts, per element id, the bars (rect.bar) drawn inside it, and records table rows."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.bars: dict[str, int] = {}
        self.rows: list[str] = []
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if attr.get("id"):
            self.ids.add(str(attr["id"]))
        if tag in ("svg", "table"):
            self._open.append(attr.get("id"))
        if tag == "rect" and attr.get("class") == "bar" and self._open and self._open[-1]:
            self.bars[str(self._open[-1])] = self.bars.get(str(self._open[-1]), 0) + 1
        if tag == "tr" and self._open and self._open[-1] == "origin-table" and attr.get("data-origin"):
            self.rows.append(str(attr["data-origin"]))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("svg", "table") and self._open:
            self._open.pop()


def test_chromium_renders_the_origin_table_and_both_charts_without_console_errors(sqlite_backend: Backend,
                                                                                  tmp_path: Path) -> None:
    browser = chromium()
    scenario = make_scenario(sqlite_backend, tmp_path)
    cron = scenario.cron()
    for i in range(25):
        scenario.execution(cron, NOW_S - (i + 1) * 3600, status=3 if i % 6 == 0 else 1,
                           exit_code=2 if i % 6 == 0 else 0, shadow_exit=1 if i == 12 else None)
    scenario.mismatch("exit_code", first_seen_ms=NOW_S * 1000 - 86_400_000, cron_id=cron)
    scenario.mismatch("stuck", first_seen_ms=NOW_S * 1000 - 3 * 86_400_000, cron_id=cron)
    _, html_path = write_report(scenario.report(), tmp_path / "out")

    result = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                             html_path.resolve().as_uri()], capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr[-2000:]
    dom = Elements()
    dom.feed(result.stdout)
    assert {"origin-table", "agreement-chart", "mismatch-timeline"} <= dom.ids
    assert "manual" in dom.rows and "subscription" in dom.rows
    assert dom.bars.get("agreement-chart", 0) >= 3 and dom.bars.get("mismatch-timeline", 0) >= 2
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
