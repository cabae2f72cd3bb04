"""The report as one self-contained HTML5 page: inline CSS and SVG, no script, no URL, no web font.

Every text taken from the report (keys, user names, partitions, notes, reasons, even the currency)
goes through :func:`esc`; a Content-Security-Policy that forbids scripts and loads is a second line.
"""

from __future__ import annotations

import html

from analytics.report import svg
from analytics.report.model import Report
from analytics.report.text import (
    BUSBW,
    DASH,
    EXAMPLE_PRICES,
    SPEEDUP,
    Table,
    facts,
    headline,
    money,
    pct,
    subtitle,
    summary,
    tables,
    title,
)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"

STYLE = """
:root { color-scheme: light; --ink: #1f2933; --muted: #5f6b7a; --line: #d9dee5; --accent: #2f6db5; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); margin: 0 auto;
       padding: 24px; max-width: 1200px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid
     var(--line); padding-bottom: 4px; }
.meta { color: var(--muted); margin: 2px 0; }
.banner { border-radius: 6px; padding: 12px 16px; margin: 16px 0; print-color-adjust: exact;
          -webkit-print-color-adjust: exact; }
.incomplete { background: #fde7e4; border: 2px solid #b3261e; color: #5c0f0a; }
.incomplete strong { font-size: 18px; letter-spacing: .04em; }
.example { background: #fff4d6; border: 1px solid #e0a800; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: var(--muted); font-size: 12px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 16px; margin: 12px 0; }
svg.chart { width: 100%; max-width: 640px; height: auto; border: 1px solid var(--line); border-radius: 6px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; } td.num, th.num { text-align: right; } td.num { white-space: nowrap; }
td.key { overflow-wrap: anywhere; min-width: 9em; max-width: 28em; } .flag { color: #b3261e; font-weight: 600; }
.empty { color: var(--muted); font-style: italic; }
footer { color: var(--muted); margin-top: 32px; font-size: 12px; }
@media print {
  body { padding: 0; font-size: 10pt; max-width: none; } .scroll { overflow: visible; }
  table { font-size: 8pt; } thead { display: table-header-group; } tr, svg.chart, .card { break-inside: avoid; }
  h2 { break-after: avoid; } .charts { grid-template-columns: 1fr 1fr; }
}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(headers: list[str], rows: list[list[str]], numeric: list[bool]) -> str:
    def cls(i: int) -> str:
        return ' class="num"' if numeric[i] else ' class="key"' if i == 0 else ""

    head = "".join(f'<th scope="col"{" class=num" if numeric[i] else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = f'<span class="flag">{esc(cell)}</span>' if cell.startswith("⚠") else esc(cell)
            cells.append(f"<td{cls(i)}>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _charts(r: Report) -> dict[str, list[str]]:
    """Section slug -> its charts. Charts only for data that exists; None stays a gap."""
    out: dict[str, list[str]] = {}
    if r.daily:
        days = [d.date[5:] for d in r.daily]
        busy = [d.busy_gpu_hours for d in r.daily]
        idle = [max(d.sampled_gpu_hours - d.busy_gpu_hours, 0.0) for d in r.daily]
        out["daily"] = [svg.bar_chart("GPU-hours per day: busy and sampled", days, busy, idle,
                                      ("busy", "sampled, not busy"), stacked=True, unit="GPU-h")]  # fmt: skip
    hosts = r.group("host") or [r.fleet]
    keys = [h.key for h in hosts]
    hw, energy = [h.hardware_cost for h in hosts], [h.energy_cost for h in hosts]
    util = [None if h.utilization is None else h.utilization * 100 for h in hosts]
    idle_share = [h.idle_cost / h.total_cost * 100 if h.total_cost else None for h in [r.fleet, *r.group("host")]]
    out["hosts"] = [
        svg.hbar_chart("Utilisation per host (busy / sampled)", keys, util),
        svg.bar_chart("Cost per host: hardware and energy", keys, hw, energy, ("hardware", "energy"), True, r.currency),
        svg.hbar_chart("Idle share of cost", ["fleet", *(h.key for h in r.group("host"))], idle_share),
    ]
    if r.queue:
        top = max((q.wait_p95_s or 0.0 for q in r.queue), default=0.0)
        scale, unit = (3600.0, "hours") if top >= 3 * 3600 else (60.0, "minutes")
        p50 = [None if q.wait_p50_s is None else q.wait_p50_s / scale for q in r.queue]
        p95 = [None if q.wait_p95_s is None else q.wait_p95_s / scale for q in r.queue]
        out["queue"] = [svg.bar_chart("Queue wait per partition", [q.partition for q in r.queue], p50, p95,
                                      ("p50", "p95"), unit=unit)]  # fmt: skip
    busbw = sorted((b for b in r.benchmarks if b.metric == BUSBW), key=lambda b: b.world_size)
    speedup = sorted((b for b in r.benchmarks if b.metric == SPEEDUP), key=lambda b: b.world_size)
    charts = []
    if busbw:
        labels = [f"{b.world_size} GPUs" + (" ⚠" if b.dropped else "") for b in busbw]
        now, before = [b.value / 1e9 for b in busbw], [None if b.previous is None else b.previous / 1e9 for b in busbw]
        charts.append(svg.bar_chart("All-reduce bus bandwidth", labels, now, before, ("this week", "previous"),
                                    unit="GB/s"))  # fmt: skip
    if speedup:
        charts.append(svg.line_chart("Training speedup vs GPUs (dashed: ideal)", [b.world_size for b in speedup],
                                     [b.value for b in speedup], ideal=True, x_unit="GPUs"))  # fmt: skip
    if charts:
        out["benchmarks"] = charts
    return out


def _cards(r: Report) -> str:
    f, cur = r.fleet, r.currency
    cards = [("Total cost", money(f.total_cost, cur)), ("Per useful GPU-hour", money(f.cost_per_useful_gpu_hour, cur)),
             ("Utilisation", pct(f.utilization)), ("Idle cost", money(f.idle_cost, cur)),
             ("Energy cost", money(f.energy_cost, cur)), ("Coverage", pct(f.coverage))]  # fmt: skip
    inner = "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
                    for k, v in cards)  # fmt: skip
    return f'<div class="cards">{inner}</div>'


def _banners(r: Report) -> str:
    out = ""
    if not r.complete:
        reasons = "".join(f"<li>{esc(x)}</li>" for x in r.incomplete_reasons)
        out += (f'<div class="banner incomplete" id="incomplete" role="alert"><strong>⚠ INCOMPLETE</strong> — parts '
                f"of this week could not be read; the figures below are partial.<ul>{reasons}</ul></div>")  # fmt: skip
    if r.example_prices:
        out += f'<div class="banner example" id="example-prices">{esc(EXAMPLE_PRICES)}</div>'
    return out


def _section(t: Table, charts: list[str]) -> str:
    table = _table(t.headers, t.rows, t.numeric()) if t.rows else f'<p class="empty">{esc(t.empty)}</p>'
    figures = f'<div class="charts">{"".join(charts)}</div>' if charts else ""
    return f'<section id="{esc(t.slug)}"><h2>{esc(t.title)}</h2>{figures}{table}</section>'


def _lists(r: Report) -> str:
    out = ""
    for slug, heading, items in (("approximations", "Approximations", r.approximations), ("notes", "Notes", r.notes)):
        if items:
            lis = "".join(f"<li>{esc(x)}</li>" for x in items)
            out += f'<section id="{slug}"><h2>{heading}</h2><ul>{lis}</ul></section>'
    return out


def to_html(report: Report) -> str:
    r, charts = report, _charts(report)
    head = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta name="generator" content="gpuledger {esc(r.schema)}">\n<link rel="icon" href="data:,">\n'
            f"<title>{esc(title(r))}</title>\n<style>{STYLE}</style>\n</head>\n")  # fmt: skip
    headline_rows = [list(kv) for kv in headline(r)]
    body = [
        f'<header><h1>{esc(title(r))}</h1><p class="meta">{esc(subtitle(r))}</p><p class="meta">{esc(facts(r))}</p>'
        f"</header>",
        _banners(r),
        f'<section id="headline"><h2>Headline</h2><p>{esc(summary(r))}</p>{_cards(r)}',
        _table(["Figure", "Value"], headline_rows, [False, True]) + "</section>",
        *(_section(t, charts.get(t.slug, [])) for t in tables(r)),
        _lists(r),
        f"<footer>{esc(r.schema)} · {esc(DASH)} = not measured by this source</footer>",
    ]
    return head + "<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
