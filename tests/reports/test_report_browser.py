"""The HTML report in a real browser: headless Chromium renders the origin table and both SVG charts, and logs
no console error (the page has no script, so any error would come from broken markup); at a phone's width
and a desktop's, the verdict sentences are on the first screen, nothing scrolls sideways and no two pieces of
text overlap."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bridge.jobs.report.command import write_report
from tests.conftest import Backend
from tests.reports.conftest import NOW_MS, NOW_S, Scenario, make_scenario
from tests.reports.devtools import Chromium, png_size

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


# Run in the page once it has loaded: the viewport, the document's width, what sticks out of the body's column,
# where the verdict lines and the other sections sit, how far each chart is scaled, and every pair of text boxes
# that overlap (HTML text by its line boxes, SVG text by its element box; a tooltip <title> is never drawn).
LAYOUT_PROBE = """(() => {
  const box = r => ({x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height});
  const texts = [];
  for (const el of document.querySelectorAll('svg text')) {
    const b = box(el.getBoundingClientRect());
    if (b.w > 0 && b.h > 0) texts.push({node: el, text: el.textContent, ...b});
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.textContent.trim() || n.parentElement.closest('svg, style, script')) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const r of range.getClientRects())
      if (r.width > 0 && r.height > 0) texts.push({node: n, text: n.textContent.trim().slice(0, 60), ...box(r)});
  }
  const overlaps = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i], b = texts[j];
    if (a.node === b.node) continue;
    const dx = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
    const dy = Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y);
    if (dx > 1 && dy > 2) overlaps.push([a.text, b.text]);
  }
  const verdicts = [...document.querySelectorAll('#verdicts li')].map(li => {
    const r = li.getBoundingClientRect(), style = getComputedStyle(li);
    return {state: li.dataset.state, text: li.textContent, top: r.top + scrollY, bottom: r.bottom + scrollY,
            shown: style.visibility === 'visible' && style.display !== 'none' && r.height > 0,
            color: style.color, border: style.borderLeftColor};
  });
  const others = [...document.querySelectorAll('body > *:not(header), header > *:not(#verdicts, h1)')]
    .map(e => e.getBoundingClientRect().top + scrollY);
  const body = document.body.getBoundingClientRect();
  const inside = body.right - parseFloat(getComputedStyle(document.body).paddingRight) + 1;
  const overhang = [...document.body.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > inside)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).slice(0, 10);
  const charts = [...document.querySelectorAll('svg[viewBox]')].map(svg => ({
    id: svg.id, scale: svg.getBoundingClientRect().width / svg.viewBox.baseVal.width,
    font: Math.min(...[...svg.querySelectorAll('text')].map(t => parseFloat(getComputedStyle(t).fontSize)))}));
  return JSON.stringify({innerWidth, innerHeight, clientWidth: document.documentElement.clientWidth,
                         scrollWidth: document.documentElement.scrollWidth, texts: texts.length,
                         overlaps, overhang, verdicts, firstOther: Math.min(...others), charts});
})()"""
FAIL_RED = "rgb(198, 40, 40)"


def varied_scenario(backend: Backend, tmp_path: Path) -> Scenario:
    """Every verdict state on one page, in 2.x's zone Asia/Shanghai: ready, not ready, insufficient data,
    bypassed, not observable, not an origin; examples with both sides, a timeline over several days."""
    scenario = make_scenario(backend, tmp_path, legacy_tz="Asia/Shanghai")
    cron, other = scenario.cron(), scenario.cron("*/5 * * * *")
    for i in range(30):
        scenario.execution(cron, NOW_S - (i + 1) * 3600, status=3 if i % 7 == 0 else 1,
                           exit_code=2 if i % 7 == 0 else 0)
    for i in range(25):
        scenario.execution(other, NOW_S - (i + 1) * 3700, origin="scheduled_node",
                           shadow_exit=1 if i == 3 else None)
    for i in range(3):
        scenario.execution(other, NOW_S - (i + 1) * 3900, origin="script")
    scenario.execution(other, NOW_S - 7200, origin="boot")
    for day in range(4):
        scenario.mismatch("missing", first_seen_ms=NOW_MS - day * 86_400_000 - 60_000, origin="boot", cron_id=other,
                          diff='{"legacy": {"status": 1, "pid": 4711}, "shadow": null}')
    scenario.mismatch("exit_code", first_seen_ms=NOW_MS - 2 * 86_400_000, origin="scheduled_node", cron_id=other,
                      diff='{"values_changed": {"root[\'exit_code\']": {"new_value": 1, "old_value": 0}}}')
    scenario.mismatch("compat.ambiguous_callback", first_seen_ms=NOW_MS - 5 * 86_400_000, origin=None,
                      cron_id=other, diff='{"candidates": 2, "pid": 4711, "log_ref": null}')
    scenario.execution(9999, NOW_S - 3 * 3600, shadow="none")  # a deleted cron: unknown
    return scenario


@pytest.mark.parametrize("width, height, mobile", [pytest.param(390, 844, True, id="phone-390"),
                                                   pytest.param(1280, 900, False, id="desktop-1280")])
def test_the_report_reads_on_a_phone_and_a_desktop_verdicts_first_without_overflow_or_overlapping_text(
        sqlite_backend: Backend, tmp_path: Path, width: int, height: int, mobile: bool) -> None:
    browser = chromium()
    report = varied_scenario(sqlite_backend, tmp_path).report()
    _, html_path = write_report(report, tmp_path / "out")
    shots = Path(os.environ.get("BRIDGE_TEST_SCREENSHOT_DIR") or tmp_path)
    with Chromium(browser, tmp_path / "profile") as page:
        page.open(html_path.resolve().as_uri(), width, height, mobile=mobile)
        layout: dict[str, Any] = json.loads(page.evaluate(LAYOUT_PROBE))
        png = page.screenshot(shots / f"cutover-report-{width}.png")
        errors = page.errors()

    assert png_size(png) == (width, height)
    assert (layout["innerWidth"], layout["clientWidth"]) == (width, width)  # a wider page would widen a phone's
    assert layout["scrollWidth"] <= layout["innerWidth"], "the page scrolls sideways"
    assert layout["overhang"] == [], "sticks out of the page's column"
    sentences = [o["verdict"]["sentence"] for o in report["origins"]]
    assert [v["text"] for v in layout["verdicts"]] == sentences
    assert {v["state"] for v in layout["verdicts"]} >= {"ready", "not_ready", "insufficient_data", "bypassed",
                                                        "not_observable", "not_promotable"}
    for line in layout["verdicts"]:
        assert line["shown"] and line["bottom"] <= height, f"not on the first screen: {line['text']}"
        assert line["bottom"] <= layout["firstOther"], "something comes before the verdicts"
        if line["state"] in ("insufficient_data", "not_observable", "not_promotable"):
            assert FAIL_RED not in (line["color"], line["border"]), f"drawn as a failure: {line['text']}"
    assert layout["overlaps"] == [], "text overlaps"
    assert layout["texts"] > 100
    for chart in layout["charts"]:
        assert chart["scale"] * chart["font"] >= 10, f"{chart['id']} text is too small to read"
    assert errors == []
