"""The cutover report as one self-contained HTML page: inline CSS, inline SVG charts drawn here, no script.

Input is the ``ql-bridge/cutover-report@1`` document itself, so the page shows nothing the JSON lacks.
Every string from the document is escaped with ``html.escape``.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from projections.report import DAY_MS, day_name, rfc3339

PASS, FAIL, NODATA, INK, GRID = "#2e7d32", "#c62828", "#9e9e9e", "#212121", "#e0e0e0"
PALETTE = ("#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#37474f", "#f9a825",
           "#283593", "#00695c", "#c62828")
METRICS = (("completeness", "completeness"), ("terminal_status_agreement", "status"),
           ("exit_code_agreement", "exit code"))
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212121;margin:24px auto;
max-width:1200px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e0e0e0;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 4px}
table{border-collapse:collapse;width:100%;margin:8px 0}th,td{border:1px solid #e0e0e0;padding:4px 8px;text-align:left;
vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#2e7d32;font-weight:600}.fail{color:#c62828;font-weight:600}.muted{color:#757575}
table.kv{width:auto}code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
ul.gates{list-style:none;padding-left:0;margin:4px 0}ul.gates li{margin:2px 0}
svg{display:block;max-width:100%;height:auto}svg text{font:12px system-ui,sans-serif;fill:#212121}
svg text.origin{font-weight:600}svg text.muted{fill:#757575}
"""


def render_html(report: dict[str, Any]) -> str:
    """The whole page for one report document."""
    window = report["window"]
    title = f"Cutover report {window['start']} – {window['end']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        _header(report),
        "<section><h2>Origins</h2>", _origin_table(report["origins"]), "</section>",
        "<section><h2>Agreement per origin</h2>", agreement_chart(report["origins"]), "</section>",
        "<section><h2>Mismatches opened per day</h2>", timeline_chart(report["mismatch_timeline"], window),
        "</section>",
        "<section><h2>Gate verdicts</h2>", _verdicts(report["origins"]), "</section>",
        "<section><h2>Examples of open mismatches</h2>", _examples(report["origins"]), "</section>",
        "<section><h2>Notes</h2><ul>", *(f"<li>{_e(n)}</li>" for n in report["notes"]), "</ul></section>",
        f'<footer class="muted"><p>Schema {_e(report["schema"])}; generated {_e(report["generated_at"])}.</p>'
        "</footer></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f}%"


def _header(report: dict[str, Any]) -> str:
    w, t = report["window"], report["thresholds"]
    rows = [("Minimum executions", t["min_executions"]), ("Completeness", _pct(t["completeness"])),
            ("Terminal-status agreement", _pct(t["terminal_status_agreement"])),
            ("Exit-code agreement", _pct(t["exit_code_agreement"])), ("Maximum duplicates", t["max_duplicates"]),
            ("Stale mismatch kinds", ", ".join(t["stale_mismatch_kinds"]) or "none")]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return (f"<header><h1>ql-bridge cutover report</h1><p>Window <b>{_e(w['start'])}</b> to <b>{_e(w['end'])}</b>"
            f" (UTC); generated {_e(report['generated_at'])}.</p>"
            f'<table class="kv" id="thresholds"><caption class="muted">Thresholds</caption>{body}</table></header>')


def _verdict(entry: dict[str, Any]) -> str:
    if entry.get("seam"):
        return f'<span class="fail">not ready</span> <span class="muted">({_e(entry["seam"])})</span>'
    if not entry["observable"]:
        return f'<span class="muted">{_e(entry.get("note") or "not observable")}</span>'
    if entry["ready_for_primary"]:
        return '<span class="pass">ready for primary</span>'
    failing = [g for g in entry["gates"] if not g["passed"]]
    if failing and all(g["reason"] == "insufficient_data" for g in failing):
        why = "insufficient data"
    elif failing:
        why = ", ".join(g["gate"] for g in failing)
    else:
        why = entry.get("note") or "not promotable"
    return f'<span class="fail">not ready</span> <span class="muted">({_e(why)})</span>'


def _origin_table(origins: list[dict[str, Any]]) -> str:
    head = ("Origin", "Mode", "Executions", "Completeness", "Status agreement", "Exit-code agreement", "Unmatched",
            "Ambiguous", "Duplicates", "Stuck", "Verdict")
    rows = []
    for o in origins:
        f, r = o["figures"], o["ratios"]
        cells = [f"<td>{_e(o['origin'])}</td>", f"<td>{_e(o['mode'] or '–')}</td>"]
        cells += [f'<td class="num">{_e(v)}</td>' for v in (f["executions_observed"],)]
        cells += [f'<td class="num">{_pct(r[k])}</td>' for k, _ in METRICS]
        cells += [f'<td class="num">{_e(f[k])}</td>' for k in ("unmatched_callbacks", "ambiguous_callbacks",
                                                                "duplicates", "stuck_runs")]
        cells.append(f"<td>{_verdict(o)}</td>")
        rows.append(f'<tr data-origin="{_e(o["origin"])}">{"".join(cells)}</tr>')
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table id="origin-table"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def agreement_chart(origins: list[dict[str, Any]]) -> str:
    """Horizontal bars per origin with executions (completeness, status, exit code), each with its threshold line."""
    shown = [o for o in origins if o["observable"] and o["figures"]["executions_observed"] > 0]
    idle = [o["origin"] for o in origins if o["observable"] and o not in shown]
    label_w, plot_w, bar_h, gap, top = 130, 640, 16, 4, 30
    group_h = 22 + len(METRICS) * (bar_h + gap) + 10
    height = top + max(len(shown), 1) * group_h + (24 if idle else 0) + 10
    width = label_w + plot_w + 90
    out = [f'<svg id="agreement-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="Agreement per origin">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + tick * plot_w
        out.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{top + max(len(shown), 1) * group_h}" '
                   f'stroke="{GRID}"/><text x="{x:.1f}" y="{top - 10}" text-anchor="middle">{int(tick * 100)}%</text>')
    if not shown:
        out.append(f'<text x="{label_w}" y="{top + 20}">No origin had executions in this window.</text>')
    for i, o in enumerate(shown):
        y0 = top + i * group_h
        n = o["figures"]["executions_observed"]
        out.append(f'<text class="origin" x="0" y="{y0 + 14}">{_e(o["origin"])}</text>'
                   f'<text class="muted" x="{label_w}" y="{y0 + 14}">{_e(n)} execution{"s" if n != 1 else ""}</text>')
        gates = {g["gate"]: g for g in o["gates"]}
        for j, (key, label) in enumerate(METRICS):
            y = y0 + 22 + j * (bar_h + gap)
            out.append(_bar(label_w, plot_w, y, bar_h, label, o["ratios"][key], gates.get(key)))
    if idle:
        y = top + max(len(shown), 1) * group_h + 16
        out.append(f'<text class="muted" x="0" y="{y}">No executions: {_e(", ".join(idle))}</text>')
    out.append("</svg>")
    return "".join(out)


def _bar(left: int, width: int, y: int, h: int, label: str, value: float | None, gate: dict[str, Any] | None) -> str:
    threshold = float(gate["threshold"]) if gate else None
    parts = [f'<text x="{left - 8}" y="{y + h - 4}" text-anchor="end">{_e(label)}</text>']
    if value is None:
        reason = gate["reason"] if gate else "no data"
        parts.append(f'<rect class="bar-nodata" x="{left}" y="{y}" width="{width}" height="{h}" fill="none" '
                     f'stroke="{NODATA}" stroke-dasharray="4 3"><title>{_e(label)}: {_e(reason)}</title></rect>'
                     f'<text x="{left + 6}" y="{y + h - 4}" fill="{NODATA}">{_e(reason.replace("_", " "))}</text>')
    else:
        color = PASS if threshold is None or value >= threshold else FAIL
        parts.append(f'<rect class="bar" x="{left}" y="{y}" width="{max(value * width, 1):.1f}" height="{h}" '
                     f'fill="{color}"><title>{_e(label)}: {_pct(value)}</title></rect>'
                     f'<text x="{left + width + 6}" y="{y + h - 4}">{_pct(value)}</text>')
    if threshold is not None:
        x = left + threshold * width
        parts.append(f'<line class="threshold" x1="{x:.1f}" y1="{y - 2}" x2="{x:.1f}" y2="{y + h + 2}" '
                     f'stroke="{INK}" stroke-width="2"><title>threshold {_pct(threshold)}</title></line>')
    return "".join(parts)


def timeline_chart(rows: list[dict[str, Any]], window: dict[str, Any]) -> str:
    """Stacked bars: mismatches opened per UTC day, one colour per kind."""
    first, last = window["start_ms"] // DAY_MS, window["end_ms"] // DAY_MS
    first = max(first, last - 365)
    days = list(range(first, last + 1))
    kinds = sorted({r["kind"] for r in rows})
    colors = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    counts: dict[tuple[str, str], int] = {(r["day"], r["kind"]): int(r["opened"]) for r in rows}
    totals = [sum(counts.get((day_name(d), k), 0) for k in kinds) for d in days]
    left, plot_w, plot_h, top = 50, 760, 220, 20
    legend_h = 20 * ((len(kinds) + 2) // 3)
    height = top + plot_h + 40 + legend_h
    out = [f'<svg id="mismatch-timeline" xmlns="http://www.w3.org/2000/svg" width="{left + plot_w + 20}" '
           f'height="{height}" viewBox="0 0 {left + plot_w + 20} {height}" role="img" '
           f'aria-label="Mismatches opened per day">']
    peak = max(totals, default=0) or 1
    for tick in sorted({0, (peak + 1) // 2, peak}):
        y = top + plot_h - tick / peak * plot_h
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    slot = plot_w / len(days)
    for i, d in enumerate(days):
        x, base = left + i * slot, top + plot_h
        for k in kinds:
            n = counts.get((day_name(d), k), 0)
            if n:
                h = n / peak * plot_h
                base -= h
                out.append(f'<rect class="bar" x="{x + slot * 0.1:.1f}" y="{base:.1f}" width="{max(slot * 0.8, 1):.1f}"'
                           f' height="{h:.1f}" fill="{colors[k]}"><title>{_e(day_name(d))} {_e(k)}: {n}</title>'
                           "</rect>")
    every_day = len(days) <= 16  # then each bar gets its MM-DD label, else first, middle and last dates
    for i in range(len(days)) if every_day else sorted({0, len(days) // 2, len(days) - 1}):
        label = day_name(days[i])[5:] if every_day else day_name(days[i])
        out.append(f'<text x="{left + (i + 0.5) * slot:.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                   f"{_e(label)}</text>")
    if not kinds:
        out.append(f'<text x="{left + 10}" y="{top + plot_h / 2:.0f}">No mismatch was opened in this window.</text>')
    for i, k in enumerate(kinds):
        x, y = left + (i % 3) * 250, top + plot_h + 34 + (i // 3) * 20
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colors[k]}"/>'
                   f'<text x="{x + 18}" y="{y}">{_e(k)}</text>')
    out.append("</svg>")
    return "".join(out)


def _verdicts(origins: list[dict[str, Any]]) -> str:
    out = []
    for o in origins:
        out.append(f'<h3 id="gates-{_e(o["origin"])}">{_e(o["origin"])}: {_verdict(o)}</h3>')
        if not o["gates"]:
            out.append(f'<p class="muted">{_e(o.get("note") or "no gates evaluated")}</p>')
            continue
        items = []
        for g in o["gates"]:
            cls, word = ("pass", "PASS") if g["passed"] else ("fail", "FAIL")
            value = g["value"]
            shown = "–" if value is None else (_pct(value) if isinstance(value, float) else str(value))
            threshold = g["threshold"]
            limit = _pct(threshold) if isinstance(threshold, float) else f"≤ {threshold}"
            items.append(f'<li><span class="{cls}">{word}</span> <b>{_e(g["gate"])}</b>: {_e(shown)} '
                         f'(threshold {_e(limit)}) — {_e(g["reason"])}'
                         f'{" · " + _e(g["detail"]) if g.get("detail") else ""}</li>')
        out.append(f'<ul class="gates">{"".join(items)}</ul>')
    return "".join(out)


def _examples(origins: list[dict[str, Any]]) -> str:
    rows = []
    for o in origins:
        for ex in o["figures"]["examples"]:
            diff = json.dumps(ex["diff"], sort_keys=True, ensure_ascii=False)
            diff = diff if len(diff) <= 300 else diff[:297] + "..."
            rows.append(f"<tr><td>{_e(o['origin'])}</td><td>{_e(ex['kind'])}</td><td>{_e(ex['cron_id'])}</td>"
                        f"<td><code>{_e(ex['run_id'] or '–')}</code></td><td>{_e(rfc3339(ex['first_seen_ms']))}</td>"
                        f"<td class=\"num\">{_e(ex['occurrences'])}</td><td><code>{_e(diff)}</code></td></tr>")
    if not rows:
        return '<p class="muted" id="examples-table">No open mismatch.</p>'
    head = "".join(f"<th>{h}</th>" for h in ("Origin", "Kind", "Cron", "Run", "First seen", "Seen", "Diff summary"))
    return f'<table id="examples-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
