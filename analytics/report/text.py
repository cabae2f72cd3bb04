"""The report as text: the report's sections as tables of display strings, which the Markdown
(analytics.report.markdown) and HTML renderers share; the numbers in them are formatted by
analytics.report.numbers (re-exported here). JSON is in analytics.report.jsonio, CSV in
analytics.report.csvio."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from analytics.report import groupings as table
from analytics.report.columns import (
    BENCH,
    COST,
    DAILY,
    FAILURES,
    GPU_COLUMNS,
    IDLE,
    LINKS,
    MULTI_GPU,
    PRICES,
    QUEUE,
    RENT,
    SCALING,
    STALLED,
    Columns,
    T,
)
from analytics.report.columns import BUSBW as BUSBW
from analytics.report.columns import SPEEDUP as SPEEDUP
from analytics.report.columns import measure as measure
from analytics.report.groupings import Grouping
from analytics.report.model import (
    TOP_IDLE,
    TOP_LINKS,
    TOP_STALLED,
    UNALLOCATED,
    CostRow,
    Delta,
    Report,
)
from analytics.report.numbers import DASH as DASH
from analytics.report.numbers import bandwidth as bandwidth
from analytics.report.numbers import co2e as co2e
from analytics.report.numbers import duration as duration
from analytics.report.numbers import hours as hours
from analytics.report.numbers import kwh as kwh
from analytics.report.numbers import local_time as local_time
from analytics.report.numbers import money as money
from analytics.report.numbers import num as num
from analytics.report.numbers import pct as pct
from analytics.report.numbers import times as times
from analytics.report.rows import top

TOP_JOBS = 20
TOP_ROWS = 50  # rows of a host, GPU or grouping table before the rest are added up into one
NO_IDLE = "No job held a GPU idle."


def figure_value(figure: str, v: float | None, currency: str) -> str:
    """A week-over-week figure, formatted by what its name says it is."""
    name = figure.lower()
    if "cost" in name or "price" in name:
        return money(v, currency)
    if any(w in name for w in ("utili", "coverage", "activity", "share", "efficiency")):
        return pct(v)
    if "hour" in name:
        return hours(v)
    return kwh(v) if "kwh" in name else num(v)


# ---------------------------------------------------------------- the report as tables


@dataclass(frozen=True)
class Table:
    """One section of the report: cells are display strings, not yet escaped for any format."""

    slug: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    empty: str = "Not measured by this source."

    def numeric(self) -> list[bool]:
        """Columns to right-align: every cell a number or a dash (the first column is a key)."""
        starts = "0123456789+-≤" + DASH
        cols = range(len(self.headers))
        return [i > 0 and all(row[i][:1] and row[i][0] in starts for row in self.rows) for i in cols]


def headline(r: Report) -> list[tuple[str, str]]:
    f, cur = r.fleet, r.currency
    return [
        ("GPUs", f"{f.gpus:,}"),
        ("Total cost", money(f.total_cost, cur)),
        ("Cost per useful GPU-hour", money(f.cost_per_useful_gpu_hour, cur)),
        ("Useful hours count", measure(f)),
        ("Utilisation (busy / sampled)", pct(f.utilization)),
        ("SM activity", pct(f.sm_activity)),
        ("Idle cost", money(f.idle_cost, cur)),
        ("Hardware cost", money(f.hardware_cost, cur)),
        ("Energy cost", money(f.energy_cost, cur)),
        ("Energy", kwh(f.energy_kwh)),
        ("Emissions (energy × PUE × grid intensity)", co2e(f.co2e_kg)),
        ("Available GPU-hours", hours(f.available_gpu_hours)),
        ("Sampled GPU-hours", hours(f.sampled_gpu_hours)),
        ("Busy GPU-hours", hours(f.busy_gpu_hours)),
        ("Stalled GPU-hours (busy, not working)", hours(f.stalled_gpu_hours)),
        ("Useful GPU-hours", hours(f.useful_gpu_hours)),
        ("Allocated GPU-hours", hours(f.allocated_gpu_hours)),
        ("Allocated but idle GPU-hours", hours(f.allocated_idle_gpu_hours)),
        ("Coverage", pct(f.coverage)),
    ]


def _key(row: CostRow) -> str:
    return "(unallocated)" if row.group == UNALLOCATED else row.key


def groupings(r: Report) -> list[Grouping]:
    """The report's groupings that have rows, in the report's order; those shown ``always`` (users:
    their table shows what no job was charged even where no job was seen) first."""
    present = (g for group in dict.fromkeys(row.group for row in r.rows) if (g := table.find(group)) is not None)
    return list({g.name: g for g in (*(g for g in table.rows() if g.always), *present)}.values())


def grouping_rows(r: Report, g: Grouping) -> list[CostRow]:
    """A grouping's rows as its table shows them: a job grouping's with the unallocated row last
    (so the table adds up to the fleet), a GPU grouping's as they are."""
    return r.group(g.name) if g.scope == table.GPU else [*r.group(g.name), *r.group(UNALLOCATED)]


def grouping_title(g: Grouping) -> str:
    """Its section's title: a job grouping's says the table holds what no job was charged."""
    return g.title + ("" if g.scope == table.GPU else " (and what no job was charged)")


def _table(slug: str, title: str, cols: Columns[T], rows: Iterable[T], cur: str, empty: str = "") -> Table:
    headers = [h.replace("{cur}", cur) for h, _ in cols]
    return Table(slug, title, headers, [[cell(x) for _, cell in cols] for x in rows], empty or Table.empty)


def tables(r: Report) -> list[Table]:
    """Every section after the headline, in reading order; made once for the Markdown and the HTML
    of one report (ranking and adding up 96,000 job rows is 0.7 s at 10,000 GPUs). The tables are
    shared: read them, do not change them."""
    return r.derived("tables", lambda: _tables(r))


def _tables(r: Report) -> list[Table]:
    c = r.currency
    job_rows = r.group("job")  # sorted here only where top() keeps them all (it ranks the rest)
    by_cost = sorted(job_rows, key=lambda row: -row.total_cost) if len(job_rows) <= TOP_JOBS else job_rows
    jobs = top([*by_cost, *r.group(UNALLOCATED)], TOP_JOBS)  # what no job was charged last: + jobs = fleet
    deltas: Columns[Delta] = [
        ("Figure", lambda d: d.figure),
        ("This week", lambda d: figure_value(d.figure, d.value, c)),
        ("Previous week", lambda d: figure_value(d.figure, d.previous, c)),
        ("Change", lambda d: pct(d.change, signed=True)),
    ]
    groups = [
        ("hosts", "Hosts", "Host", top(r.group("host"), TOP_ROWS)),
        ("models", "GPU models", "Model", r.group("model")),
    ]
    groups += [(g.slug, grouping_title(g), g.column, top(grouping_rows(r, g), TOP_ROWS)) for g in groupings(r)]
    key: Columns[CostRow] = [("Job", _key)]
    return [
        _table("daily", "Daily", DAILY, r.daily, c),
        *(_table(slug, name, [(first, _key), *COST], rows, c) for slug, name, first, rows in groups),
        _table("jobs", f"Jobs (top {TOP_JOBS} by total cost)", [*key, *COST], jobs, c),
        _table(
            "idle", f"Held but idle (top {TOP_IDLE} by idle cost)", IDLE, r.idle_holders, c, "No job held a GPU idle."
        ),
        _table(
            "stalled",
            f"Stalled: busy but not working (top {TOP_STALLED} by stalled GPU-hours)",
            STALLED,
            r.stalled_jobs,
            c,
            "No stalled time measured." if r.fleet.stalled_gpu_hours is None else "No job stalled.",
        ),
        _table("gpus", "GPUs", GPU_COLUMNS, top(r.group("gpu"), TOP_ROWS), c),
        _table("queue", "Queue", QUEUE, r.queue, c),
        _table("failures", "Failures", FAILURES, r.failures, c),
        _table("benchmarks", "Benchmarks", BENCH, r.benchmarks, c, "No benchmark results this week."),
        _table("multi-gpu", "Multi-GPU verdict", MULTI_GPU, r.multi_gpu, c, "No training benchmark this week."),
        _table(
            "scaling",
            "Your models: does multi-GPU pay? (gpuledger scaling, the last run of each)",
            SCALING,
            r.scaling,
            c,
            "No gpuledger scaling run recorded (gpuledger scaling --history FILE -- train.py ...).",
        ),
        _table(
            "multi-gpu-jobs",
            f"Multi-GPU jobs: traffic over the links (top {TOP_LINKS} by GPU-hours; sent + received)",
            LINKS,
            r.link_jobs,
            c,
            "No job held more than one GPU.",
        ),
        _table("rent", "Rent vs buy", RENT, r.rent_vs_buy, c),
        _table("deltas", "Week over week", deltas, r.deltas, c, "No previous week to compare."),
        _table("prices", "Prices applied", PRICES, r.prices, c, "No priced GPUs."),
    ]


def title(r: Report) -> str:
    return f"GPU report {r.week}"


def subtitle(r: Report) -> str:
    return f"{local_time(r.start, r.timezone)} → {local_time(r.end, r.timezone)} ({r.timezone})"


def facts(r: Report) -> str:
    return (
        f"Source: {r.source} · useful measure: {measure(r.fleet)} · coverage: {pct(r.coverage)} · "
        f"currency: {r.currency} · generated {local_time(r.generated_at, r.timezone)}"
    )


def summary(r: Report) -> str:
    f, cur = r.fleet, r.currency
    per_hour, idle = money(f.cost_per_useful_gpu_hour, cur), money(f.idle_cost, cur)
    total = money(f.total_cost, cur)
    per_hour += f" per useful GPU-hour ({measure(f)})"
    return f"{f.gpus:,} GPUs, {pct(f.utilization)} busy; {total} in total, {per_hour}, {idle} idle."


EXAMPLE_PRICES = "Example prices: set [cost] in the configuration for yours; these figures are illustrations."
