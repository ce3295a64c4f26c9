"""The cutover report as one self-contained HTML page: inline CSS, inline SVG charts drawn here, no script.

Input is the ``ql-bridge/cutover-report@1`` document itself, so the page shows nothing the JSON lacks. It opens
with one verdict sentence per origin; times are shown in 2.x's zone (``time_zone``) with their UTC offset; it
reads from a 390 px phone to a desktop (tables turn into cards, charts are drawn 360 units wide). Every string
from the document is escaped with ``html.escape``.
"""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from typing import Any

from legacy_adapters.schema import InstanceStatus
from projections.gates import INSUFFICIENT_DATA, Window, local_time
from projections.report import DAY_MS, GATE_WORDS, day_name, percent, span
from projections.report_redaction import diff_sides

PASS, FAIL, NODATA, INK, GRID, TRACK = "#2e7d32", "#c62828", "#78909c", "#212121", "#e0e0e0", "#eeeeee"
PALETTE = ("#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#37474f", "#f9a825",
           "#283593", "#00695c", "#c62828")
METRICS = (("completeness", "completeness", "with_shadow_run", "executions_observed"),
           ("terminal_status_agreement", "status agreement", "terminal_status_agree", "terminal_pairs"),
           ("exit_code_agreement", "exit-code agreement", "exit_code_agree", "exit_code_pairs"))
# State → (CSS class, words) for the table and the gate headings; only a judgement is green or red.
STATE_WORDS = {"ready": ("pass", "ready"), "not_ready": ("fail", "not ready"), "bypassed": ("fail", "bypassed"),
               "insufficient_data": ("nodata", "insufficient data"), "not_observable": ("nodata", "not observable"),
               "not_promotable": ("nodata", "not an origin")}
AXIS_STARTS = (0.999, 0.995, 0.99, 0.98, 0.95, 0.9, 0.8, 0.5)  # else 0
CHART_W = 360  # one phone's width of SVG units, so the text is drawn at its size there and on a desktop
_CSS = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212121;margin:0 auto;
max-width:1200px;padding:16px;overflow-wrap:break-word}
h1{font-size:20px;margin:0 0 10px}h3{font-size:15px;margin:16px 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e0e0e0;padding-bottom:4px}
ul.verdicts{list-style:none;padding:0;margin:0 0 12px}
li.verdict{border-left:6px solid #78909c;background:#f7f7f7;padding:5px 10px;margin:0 0 5px;font-size:16px}
li.verdict[data-state=ready]{border-left-color:#2e7d32}
li.verdict[data-state=not_ready],li.verdict[data-state=bypassed]{border-left-color:#c62828}
table{border-collapse:collapse;width:100%;margin:8px 0;font-size:14px}
th,td{border:1px solid #e0e0e0;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-size:13px}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#2e7d32;font-weight:600}.fail{color:#c62828;font-weight:600}.nodata{color:#546e7a;font-weight:600}
.muted{color:#757575}table.kv{width:auto}code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
ul.gates{list-style:none;padding-left:0;margin:4px 0}ul.gates li{margin:2px 0}
.side b{display:inline-block;min-width:3.5em}
.charts{display:flex;flex-wrap:wrap;gap:0 48px}.charts>section{flex:1 1 360px;min-width:0}
svg{display:block;width:100%;max-width:450px;height:auto}svg text{font:12px system-ui,sans-serif;fill:#212121}
svg text.origin{font-weight:600}svg text.muted{fill:#757575}svg text.tick,svg text.total{font-size:11px}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}
@media (max-width:720px){
li.verdict{font-size:15px;line-height:1.4;padding:4px 8px}
table.cards thead{display:none}table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:100%}
table.cards tr{border:1px solid #e0e0e0;margin:0 0 10px;padding:4px 0}
table.cards td{border:0;display:flex;justify-content:space-between;gap:12px;padding:2px 10px;text-align:right}
table.cards td::before{content:attr(data-label);flex:none;font-weight:600;color:#616161;text-align:left}
table.cards td>div{min-width:0;overflow-wrap:anywhere}
table.cards td.sides{display:block;text-align:left}table.cards td.sides::before{display:block}}
"""


def render_html(report: dict[str, Any]) -> str:
    """The whole page for one report document."""
    zone = str(report.get("time_zone") or "UTC")
    window = report["window"]
    title = f"Cutover report {when(window['start_ms'], zone)} – {when(window['end_ms'], zone)}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        _header(report, zone),
        '<section id="origins"><h2>Origins</h2>', _origin_table(report["origins"]), "</section>",
        '<div class="charts"><section><h2>Agreement per origin</h2>', agreement_chart(report["origins"]),
        "</section><section><h2>Mismatches opened per UTC day</h2>",
        timeline_chart(report["mismatch_timeline"], window), "</section></div>",
        "<section><h2>Gate verdicts</h2>", _verdicts(report["origins"]), _thresholds(report["thresholds"]),
        "</section>",
        "<section><h2>Mismatches: open, resolved, expired</h2>", _lifecycle(report["origins"]), "</section>",
        "<section><h2>Examples of open mismatches</h2>", _examples(report["origins"], zone), "</section>",
        "<section><h2>Notes</h2><ul>", *(f"<li>{_e(n)}</li>" for n in report["notes"]), "</ul></section>",
        f'<footer class="muted"><p>Schema {_e(report["schema"])}; generated '
        f'{_e(when(_utc_ms(report["generated_at"]), zone))} ({_e(zone)}).</p></footer></body></html>',
    ]
    return "\n".join(parts) + "\n"


def when(ms: int, zone: str) -> str:
    """A time as 2.x's operator reads it: ``2026-12-02 21:00:00 +08:00``."""
    text = local_time(ms, zone, millis=False)
    return f"{text[:10]} {text[11:19]} {text[19:]}"


def _utc_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _verdict_of(entry: dict[str, Any]) -> dict[str, str]:
    """The entry's verdict; a document written before verdicts existed gets the plainest one."""
    if isinstance(entry.get("verdict"), dict):
        return {"state": str(entry["verdict"]["state"]), "sentence": str(entry["verdict"]["sentence"])}
    ready = entry["ready_for_primary"]
    return {"state": "ready" if ready else "not_ready",
            "sentence": f"{entry['origin']}: {'ready' if ready else 'not ready'} for primary"}


def _header(report: dict[str, Any], zone: str) -> str:
    w = report["window"]
    lines = "".join(f'<li class="verdict" data-state="{_e(v["state"])}">{_e(v["sentence"])}</li>'
                    for v in map(_verdict_of, report["origins"]))
    length = span(Window(w["start_ms"], w["end_ms"]))
    return (f'<header><h1>ql-bridge cutover report</h1><section id="verdicts" aria-label="Verdict per origin">'
            f'<ul class="verdicts">{lines}</ul></section>'
            f'<p id="window">Window <b>{_e(when(w["start_ms"], zone))}</b> to <b>{_e(when(w["end_ms"], zone))}</b>'
            f" ({_e(length)}). Times are 2.x's, in {_e(zone)}, with their offset from UTC.</p>"
            f"{_release(report.get('legacy_release'))}</header>")


def _release(release: Any) -> str:
    """Which 2.x release the report measured (absent from reports written before the field existed)."""
    if not isinstance(release, dict):
        return ""
    return (f'<p id="legacy-release">2.x release <b>{_e(release.get("name"))}</b> '
            f'(from {_e(release.get("evidence"))})</p>')


def _thresholds(t: dict[str, Any]) -> str:
    rows = [("Minimum executions", t["min_executions"]), ("Completeness", percent(t["completeness"])),
            ("Status agreement", percent(t["terminal_status_agreement"])),
            ("Exit-code agreement", percent(t["exit_code_agreement"])), ("Maximum duplicates", t["max_duplicates"]),
            ("Stale mismatch kinds", ", ".join(t["stale_mismatch_kinds"]) or "none")]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv" id="thresholds"><caption class="muted">Thresholds</caption>{body}</table>'


def _state(entry: dict[str, Any]) -> str:
    cls, words = STATE_WORDS.get(_verdict_of(entry)["state"], ("nodata", "unknown state"))
    return f'<span class="{cls}">{_e(words)}</span>'


def _td(label: str, content: str, cls: str = "") -> str:
    """A cell that names its column, so a phone can show the row as a card (``td::before``)."""
    klass = f' class="{cls}"' if cls else ""
    return f'<td data-label="{_e(label)}"{klass}><div>{content}</div></td>'


def _origin_table(origins: list[dict[str, Any]]) -> str:
    # "No outcome": Runs that ended without a reported outcome, in neither agreement (a report written before
    # the figure existed shows –).
    head = ("Origin", "Mode", "Executions", "Completeness", "Status agreement", "Exit-code agreement", "No outcome",
            "Unmatched", "Ambiguous", "Duplicates", "Stuck", "Verdict")
    rows = []
    for o in origins:
        f, r = o["figures"], o["ratios"]
        unknown = f.get("ended_without_outcome")
        values = [_e(o["origin"]), _e(o["mode"] or "–"), f"{f['executions_observed']:,}",
                  *(percent(r[key], gate["threshold"] if (gate := _gate(o, key)) else None) for key, *_ in METRICS),
                  "–" if unknown is None else f"{unknown:,}",
                  *(f"{f[k]:,}" for k in ("unmatched_callbacks", "ambiguous_callbacks", "duplicates", "stuck_runs")),
                  _state(o)]
        cells = [_td(h, v, "num" if 2 <= i <= 10 else "") for i, (h, v) in enumerate(zip(head, values, strict=True))]
        rows.append(f'<tr data-origin="{_e(o["origin"])}">{"".join(cells)}</tr>')
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return (f'<table id="origin-table" class="cards"><thead><tr>{header}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _gate(entry: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((g for g in entry["gates"] if g["gate"] == name), None)


def axis_start(values: list[float]) -> float:
    """Where the agreement axis starts: the highest of AXIS_STARTS that leaves the lowest value (or threshold)
    a tenth of the axis, so 99.5 % and 99.9 % differ by a fifth of a bar instead of a pixel."""
    low = min(values, default=1.0)
    return next((start for start in AXIS_STARTS if low - start >= 0.1 * (1 - start)), 0.0)


def agreement_chart(origins: list[dict[str, Any]]) -> str:
    """Bars per origin with executions (completeness, status, exit code) on an axis that starts near the lowest
    value, each with its figure and counts, and the threshold as a black line."""
    shown = [o for o in origins if o["observable"] and o["figures"]["executions_observed"] > 0]
    idle = [o["origin"] for o in origins if o["observable"] and o not in shown]
    values = [v for o in shown for key, *_ in METRICS for v in (o["ratios"][key], _threshold(o, key))
              if v is not None]
    start = axis_start(values)
    x0, x1, top, row, group_h = 4, CHART_W - 4, 30, 34, 20 + len(METRICS) * 34 + 10
    height = top + max(len(shown), 1) * group_h
    out = [f'<svg id="agreement-chart" xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{height}" '
           f'viewBox="0 0 {CHART_W} {height}" role="img" aria-label="Agreement per origin">']
    for tick, anchor in ((start, "start"), ((start + 1) / 2, "middle"), (1.0, "end")):
        x = x0 + (tick - start) / (1 - start) * (x1 - x0)
        out.append(f'<line x1="{x:.1f}" y1="{top - 10}" x2="{x:.1f}" y2="{height}" stroke="{GRID}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{top - 14}" text-anchor="{anchor}">{_axis_pct(tick)}</text>')
    if not shown:
        out.append(f'<text x="{x0}" y="{top + 20}">No origin had executions in this window.</text>')
    for i, o in enumerate(shown):
        y0 = top + i * group_h
        n = o["figures"]["executions_observed"]
        out.append(f'<text x="{x0}" y="{y0 + 14}"><tspan class="origin">{_e(o["origin"])}</tspan>'
                   f'<tspan class="muted" dx="8">{n:,} execution{"s" if n != 1 else ""}</tspan></text>')
        for j, (key, label, agree, pairs) in enumerate(METRICS):
            counts = (o["figures"][agree], o["figures"][pairs])
            out.append(_bar(x0, x1, start, y0 + 20 + j * row, label, o["ratios"][key], counts, _gate(o, key)))
    out.append("</svg>")
    axis = (f"The axis starts at {_axis_pct(start)}, not 0%, so that near values look different"
            if start > 0 else "The axis starts at 0%")
    out.append(f'<p class="muted" id="agreement-axis">{axis}; each bar carries its figure, and the black line is '
               "its threshold.</p>")
    if idle:
        out.append(f'<p class="muted">No executions: {_e(", ".join(idle))}.</p>')
    return "".join(out)


def _threshold(entry: dict[str, Any], key: str) -> float | None:
    gate = _gate(entry, key)
    return float(gate["threshold"]) if gate else None


def _axis_pct(value: float) -> str:
    return f"{round(value * 100, 3):g}%"


def _bar(x0: int, x1: int, start: float, y: int, label: str, value: float | None, counts: tuple[int, int],
         gate: dict[str, Any] | None) -> str:
    threshold = float(gate["threshold"]) if gate else None
    width = x1 - x0

    def at(v: float) -> float:
        return x0 + max(v - start, 0) / (1 - start) * width

    if value is None:
        figure = (gate["reason"] if gate else "no data").replace("_", " ")
        bar = (f'<rect class="bar-nodata" x="{x0}" y="{y + 20}" width="{width}" height="10" fill="none" '
               f'stroke="{NODATA}" stroke-dasharray="4 3"><title>{_e(label)}: {_e(figure)}</title></rect>')
    else:
        figure = f"{percent(value, threshold)} · {counts[0]:,} of {counts[1]:,}"
        color = PASS if threshold is None or value >= threshold else FAIL
        bar = (f'<rect class="track" x="{x0}" y="{y + 20}" width="{width}" height="10" fill="{TRACK}"/>'
               f'<rect class="bar" x="{x0}" y="{y + 20}" width="{max(at(value) - x0, 1):.1f}" height="10" '
               f'fill="{color}"><title>{_e(label)}: {_e(figure)}</title></rect>')
    muted = ' class="muted"' if value is None else ""
    parts = [f'<text x="{x0}" y="{y + 14}">{_e(label)}</text>',
             f'<text x="{x1}" y="{y + 14}" text-anchor="end"{muted}>{_e(figure)}</text>', bar]
    if threshold is not None:
        x = at(threshold)
        parts.append(f'<line class="threshold" x1="{x:.1f}" y1="{y + 17}" x2="{x:.1f}" y2="{y + 33}" '
                     f'stroke="{INK}" stroke-width="2"><title>threshold {percent(threshold)}</title></line>')
    return "".join(parts)


def timeline_chart(rows: list[dict[str, Any]], window: dict[str, Any]) -> str:
    """Stacked bars: mismatches opened per UTC day, one colour per kind, each day's total on its bar."""
    first, last = window["start_ms"] // DAY_MS, window["end_ms"] // DAY_MS
    first = max(first, last - 365)
    days = list(range(first, last + 1))
    kinds = sorted({r["kind"] for r in rows})
    colors = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    counts: dict[tuple[str, str], int] = {(r["day"], r["kind"]): int(r["opened"]) for r in rows}
    totals = [sum(counts.get((day_name(d), k), 0) for k in kinds) for d in days]
    left, top, plot_h = 30, 18, 150
    plot_w, height = CHART_W - left - 4, top + plot_h + 24
    out = [f'<svg id="mismatch-timeline" xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{height}" '
           f'viewBox="0 0 {CHART_W} {height}" role="img" aria-label="Mismatches opened per UTC day">']
    peak = max(totals, default=0) or 1
    for tick in sorted({0, (peak + 1) // 2, peak}):
        y = top + plot_h - tick / peak * plot_h
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>'
                   f'<text class="tick" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    slot = plot_w / len(days)
    for i, d in enumerate(days):
        x, base = left + i * slot, float(top + plot_h)
        for k in kinds:
            n = counts.get((day_name(d), k), 0)
            if n:
                h = n / peak * plot_h
                base -= h
                out.append(f'<rect class="bar" x="{x + slot * 0.1:.1f}" y="{base:.1f}" width="{max(slot * 0.8, 1):.1f}"'
                           f' height="{h:.1f}" fill="{colors[k]}"><title>{_e(day_name(d))} {_e(k)}: {n}</title>'
                           "</rect>")
        if totals[i] and len(str(totals[i])) * 7 <= slot - 2:  # the figure fits above its bar
            out.append(f'<text class="total" x="{x + slot / 2:.1f}" y="{base - 3:.1f}" text-anchor="middle">'
                       f"{totals[i]}</text>")
    step = -(-44 // max(int(slot), 1))  # a MM-DD label every `step` days keeps labels 44 units apart
    for i in range(0, len(days), step):
        out.append(f'<text class="tick" x="{left + (i + 0.5) * slot:.1f}" y="{top + plot_h + 16}" '
                   f'text-anchor="middle">{_e(day_name(days[i])[5:])}</text>')
    if not kinds:
        out.append(f'<text x="{left + 10}" y="{top + plot_h / 2:.0f}">No mismatch was opened in this window.</text>')
    out.append("</svg>")
    out.append(f'<p class="muted" id="timeline-days">UTC days {_e(day_name(days[0]))} to {_e(day_name(days[-1]))}'
               "; each day's total stands on its bar.</p>")
    if kinds:
        out.append('<ul class="legend">' + "".join(f'<li><span class="swatch" style="background:{colors[k]}">'
                                                   f"</span>{_e(k)}</li>" for k in kinds) + "</ul>")
    return "".join(out)


def _verdicts(origins: list[dict[str, Any]]) -> str:
    out = []
    for o in origins:
        out.append(f'<h3 id="gates-{_e(o["origin"])}">{_e(o["origin"])} <span class="muted">·</span> {_state(o)}</h3>')
        if not o["gates"]:
            out.append(f'<p class="muted">{_e(o.get("note") or "no gates evaluated")}</p>')
            continue
        items = []
        for g in o["gates"]:
            cls, word = (("pass", "PASS") if g["passed"] else ("nodata", "INSUFFICIENT DATA")
                         if g["reason"] == INSUFFICIENT_DATA else ("fail", "FAIL"))
            value, threshold = g["value"], g["threshold"]
            shown = "–" if value is None else (percent(value, threshold) if isinstance(value, float) else str(value))
            limit = percent(threshold) if isinstance(threshold, float) else f"≤ {threshold}"
            items.append(f'<li><span class="{cls}">{word}</span> <b>{_e(GATE_WORDS.get(g["gate"], g["gate"]))}</b>: '
                         f'{_e(shown)} (threshold {_e(limit)}) — {_e(g["reason"].replace("_", " "))}'
                         f'{" · " + _e(g["detail"]) if g.get("detail") else ""}</li>')
        out.append(f'<ul class="gates">{"".join(items)}</ul>')
    return "".join(out)


def _side(name: str, values: dict[str, Any] | None, nothing: str) -> str:
    text = nothing if values is None else ", ".join(f"{k} = {_value(v, name == '2.x' and k == 'status')}"
                                                    for k, v in values.items())
    return f'<div class="side"><b>{_e(name)}</b> {_e(text)}</div>' if values != {} else ""


def _value(value: Any, instance_status: bool = False) -> str:
    if value is None:
        return "none"
    if instance_status and isinstance(value, int) and value in {s.value for s in InstanceStatus}:
        return f"{value} ({InstanceStatus(value).name.lower()})"  # RunningInstances.status is a number
    if isinstance(value, bool):
        return str(value).lower()
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def _lifecycle(origins: list[dict[str, Any]]) -> str:
    """Per origin: open now, and closed inside the window as resolved or as expired. Open is not what the gates
    count: the verdict sentence says how many of those do and why the rest do not."""
    head = ("Origin", "Open", "Resolved in window", "Expired in window")
    rows = []
    for o in origins:
        f = o["figures"]
        expired = f.get("expired_mismatches_by_reason", {})
        why = ", ".join(f"{_e(reason)} {n:,}" for reason, n in sorted(expired.items()))
        values = [_e(o["origin"]), f"{sum(f['open_mismatches_by_kind'].values()):,}",
                  f"{sum(f.get('resolved_mismatches_by_kind', {}).values()):,}",
                  f"{sum(expired.values()):,}" + (f" ({why})" if why else "")]
        rows.append("<tr>" + "".join(_td(h, v, "num" if i else "") for i, (h, v) in enumerate(zip(head, values,
                                                                                                  strict=True)))
                    + "</tr>")
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return (f'<table id="mismatch-lifecycle" class="cards"><thead><tr>{header}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _examples(origins: list[dict[str, Any]], zone: str) -> str:
    rows = []
    for o in origins:
        for ex in o["figures"]["examples"]:
            sides = ex.get("sides") or diff_sides(ex["kind"], ex["diff"])
            told = (_side("2.x", sides["legacy"], "no instance") + _side("shadow", sides["shadow"], "no Run")
                    + _side("context", sides["context"], ""))
            cells = [("Origin", _e(o["origin"])), ("Kind", _e(ex["kind"])), ("Cron", _e(ex["cron_id"])),
                     ("Run", f"<code>{_e(ex['run_id'] or '–')}</code>"),
                     ("First seen", _e(when(ex["first_seen_ms"], zone))), ("Seen", _e(f"{ex['occurrences']:,}")),
                     ("2.x vs shadow", told or '<span class="muted">no detail</span>')]
            classes = {"Seen": "num", "2.x vs shadow": "sides"}
            rows.append("<tr>" + "".join(_td(h, v, classes.get(h, "")) for h, v in cells) + "</tr>")
    if not rows:
        return '<p class="muted" id="examples-table">No open mismatch.</p>'
    head = "".join(f"<th>{h}</th>" for h in ("Origin", "Kind", "Cron", "Run", "First seen", "Seen", "2.x vs shadow"))
    return (f'<table id="examples-table" class="cards"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')
