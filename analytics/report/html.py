"""The report as one self-contained HTML5 page (inline CSS and SVG, no script, no URL, no web
font), and the analytics daemon's landing page with the latest figures, in the same look.

Both are Jinja2 templates (``templates/`` here, extending ``daemonkit``'s shared base) rendered
with autoescape: every text taken from the report (keys, user names, partitions, notes, reasons,
even the currency) is escaped by the template; only the SVG charts, which :mod:`svg` builds with
every text escaped, go in as markup. A Content-Security-Policy that forbids scripts and loads is a
second line.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from analytics.report import svg
from analytics.report.groupings import GPU, Grouping
from analytics.report.model import UNALLOCATED, CostRow, Report
from analytics.report.text import (
    BUSBW,
    DASH,
    EXAMPLE_PRICES,
    SPEEDUP,
    facts,
    groupings,
    headline,
    measure,
    money,
    pct,
    subtitle,
    summary,
    tables,
    title,
)
from daemonkit.pages import render

TEMPLATES = Path(__file__).parent / "templates"
WINDOWS = {"week": "Last full week", "rolling_7d": "Rolling 7 days"}
"""The windows the daemon serves, in the order its landing page shows them."""


CHART_TOP = 12  # bars of a grouping's chart: its top keys by total cost, then the rest in one bar


def _chart(drawn: str) -> Markup:
    """An SVG chart from :mod:`svg`, which escapes every text it draws: safe as markup."""
    return Markup(drawn)


def _grouping_chart(r: Report, g: Grouping) -> Markup:
    """Total cost per key of one grouping: the top ``CHART_TOP`` keys, the rest summed in one
    bar, and for a job grouping what no job was charged (so the bars add up to the fleet)."""
    ranked = sorted(r.group(g.name), key=lambda x: (-x.total_cost, x.key))
    bars: list[tuple[str, float]] = [(x.key, x.total_cost) for x in ranked[:CHART_TOP]]
    rest: list[CostRow] = ranked[CHART_TOP:]
    if rest:
        bars.append((f"({len(rest)} more)", sum(x.total_cost for x in rest)))
    if g.scope != GPU:
        bars += [("(unallocated)", x.total_cost) for x in r.group(UNALLOCATED)]
    top = svg.nice_ticks(max((v for _, v in bars), default=0.0))[-1]
    return _chart(
        svg.hbar_chart(
            f"Total cost per {g.per}",
            [k for k, _ in bars],
            [v for _, v in bars],
            maximum=top,
            unit=r.currency,
        )
    )


def _charts(r: Report) -> dict[str, list[Markup]]:
    """Section slug -> its charts. Charts only for data that exists; None stays a gap."""
    out: dict[str, list[Markup]] = {}
    if r.daily:
        days = [d.date[5:] for d in r.daily]
        busy = [d.busy_gpu_hours for d in r.daily]
        idle = [max(d.sampled_gpu_hours - d.busy_gpu_hours, 0.0) for d in r.daily]
        out["daily"] = [
            _chart(
                svg.bar_chart(
                    "GPU-hours per day: busy and sampled",
                    days,
                    busy,
                    idle,
                    ("busy", "sampled, not busy"),
                    stacked=True,
                    unit="GPU-h",
                )
            )
        ]
    hosts = r.group("host") or [r.fleet]
    keys = [h.key for h in hosts]
    hw, energy = [h.hardware_cost for h in hosts], [h.energy_cost for h in hosts]
    util = [None if h.utilization is None else h.utilization * 100 for h in hosts]
    idle_share = [h.idle_cost / h.total_cost * 100 if h.total_cost else None for h in [r.fleet, *r.group("host")]]
    out["hosts"] = [
        _chart(svg.hbar_chart("Utilisation per host (busy / sampled)", keys, util)),
        _chart(
            svg.bar_chart(
                "Cost per host: hardware and energy", keys, hw, energy, ("hardware", "energy"), True, r.currency
            )
        ),
        _chart(svg.hbar_chart("Idle share of cost", ["fleet", *(h.key for h in r.group("host"))], idle_share)),
    ]
    for g in groupings(r):
        if r.group(g.name):
            out.setdefault(g.slug, []).append(_grouping_chart(r, g))
    if r.queue:
        top = max((q.wait_p95_s or 0.0 for q in r.queue), default=0.0)
        scale, unit = (3600.0, "hours") if top >= 3 * 3600 else (60.0, "minutes")
        p50 = [None if q.wait_p50_s is None else q.wait_p50_s / scale for q in r.queue]
        p95 = [None if q.wait_p95_s is None else q.wait_p95_s / scale for q in r.queue]
        out["queue"] = [
            _chart(
                svg.bar_chart(
                    "Queue wait per partition", [q.partition for q in r.queue], p50, p95, ("p50", "p95"), unit=unit
                )
            )
        ]
    busbw = sorted((b for b in r.benchmarks if b.metric == BUSBW), key=lambda b: b.world_size)
    speedup = sorted((b for b in r.benchmarks if b.metric == SPEEDUP), key=lambda b: b.world_size)
    charts = []
    if busbw:
        labels = [f"{b.world_size} GPUs" + (" ⚠" if b.dropped else "") for b in busbw]
        now, before = [b.value / 1e9 for b in busbw], [None if b.previous is None else b.previous / 1e9 for b in busbw]
        charts.append(
            _chart(
                svg.bar_chart("All-reduce bus bandwidth", labels, now, before, ("this week", "previous"), unit="GB/s")
            )
        )
    if speedup:
        charts.append(
            _chart(
                svg.line_chart(
                    "Training speedup vs GPUs (dashed: ideal)",
                    [b.world_size for b in speedup],
                    [b.value for b in speedup],
                    ideal=True,
                    x_unit="GPUs",
                )
            )
        )
    if charts:
        out["benchmarks"] = charts
    return out


def cards(r: Report) -> list[tuple[str, str]]:
    """The headline figures shown as cards: (what, value)."""
    f, cur = r.fleet, r.currency
    return [
        ("Total cost", money(f.total_cost, cur)),
        (f"Per useful GPU-hour ({measure(f)})", money(f.cost_per_useful_gpu_hour, cur)),
        ("Utilisation", pct(f.utilization)),
        ("Idle cost", money(f.idle_cost, cur)),
        ("Energy cost", money(f.energy_cost, cur)),
        ("Coverage", pct(f.coverage)),
    ]


def to_html(report: Report) -> str:
    r, charts = report, _charts(report)
    return render(
        TEMPLATES,
        "report.html",
        generator=f"gpuledger {r.schema}",
        page_title=title(r),
        subtitle=subtitle(r),
        facts=facts(r),
        summary=summary(r),
        r=r,
        example_prices=EXAMPLE_PRICES,
        headline_cards=cards(r),
        headline_rows=[list(kv) for kv in headline(r)],
        sections=[(t, charts.get(t.slug, [])) for t in tables(r)],
        lists=[("approximations", "Approximations", r.approximations), ("notes", "Notes", r.notes)],
        dash=DASH,
    )


@dataclass(frozen=True)
class _Window:
    name: str
    heading: str
    subtitle: str
    summary: str
    report: Report
    cards: list[tuple[str, str]]
    files: list[tuple[str, str]]


def landing_page(
    reports: Mapping[str, Report], files: Collection[str], source: str, timezone: str, version: str
) -> str:
    """The analytics daemon's page at /: each served window's headline figures, and links to the
    report files (``files``: names in the reports folder, served under /reports/)."""
    order = [*(w for w in WINDOWS if w in reports), *sorted(set(reports) - WINDOWS.keys())]
    windows = []
    for name in order:
        r = reports[name]
        own = [
            (f"/reports/gpuledger-{r.week}{ext}", ext.lstrip(".").upper())
            for ext in (".html", ".md", ".json")
            if f"gpuledger-{r.week}{ext}" in files
        ]
        heading = WINDOWS.get(name, name) + ("" if r.week.startswith("rolling") else f" · {r.week}")
        windows.append(_Window(name, heading, subtitle(r), summary(r), r, cards(r), own))
    pages = sorted((f for f in files if f.startswith("gpuledger-") and f.endswith(".html")), reverse=True)[:20]
    return render(
        TEMPLATES,
        "landing.html",
        generator=f"gpuledger {version}",
        page_title=f"gpuledger analytics {version}",
        source=source,
        timezone=timezone,
        version=version,
        windows=windows,
        reports=[(f"/reports/{f}", f.removesuffix(".html")) for f in pages],
        example_prices=EXAMPLE_PRICES,
        dash=DASH,
    )
