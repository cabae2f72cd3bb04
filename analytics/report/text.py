"""The report as text: the report's sections as tables of display strings, which the Markdown
(analytics.report.markdown) and HTML renderers share; the numbers in them are formatted by
analytics.report.numbers (re-exported here). JSON is in analytics.report.jsonio, CSV in
analytics.report.csvio."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from analytics.report import groupings as table
from analytics.report.groupings import Grouping
from analytics.report.model import (
    TOP_IDLE,
    TOP_LINKS,
    TOP_STALLED,
    UNALLOCATED,
    BenchRow,
    CostRow,
    DayRow,
    Delta,
    FailureRow,
    IdleRow,
    LinkRow,
    PriceRow,
    QueueRow,
    RentRow,
    Report,
    ScalingRow,
    StalledRow,
    VerdictRow,
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
from analytics.report.useful import label

TOP_JOBS = 20
TOP_ROWS = 50  # rows of a host, GPU or grouping table before the rest are added up into one
NO_IDLE = "No job held a GPU idle."


def measure(row: CostRow) -> str:
    """What a row's useful hours count: ``sm_active``, ``busy`` or ``mixed: 62 % sm_active, 38 % busy``."""
    return label(row.useful_measure, row.useful_sm_share) or DASH


BUSBW, SPEEDUP = "allreduce_busbw_bytes_per_second", "train_speedup"


def bench_metric(metric: str) -> tuple[str, Callable[[float | None], str]]:
    """Display name and value format of a benchmark metric."""
    known = {BUSBW: ("All-reduce bus bandwidth", bandwidth), SPEEDUP: ("Training speedup", times)}
    return known.get(metric, ("Training efficiency", pct) if metric == "train_efficiency" else (metric, num))


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


T = TypeVar("T")
Columns = list[tuple[str, Callable[[T], str]]]  # header ("{cur}" becomes the currency), cell

COST: Columns[CostRow] = [
    ("GPUs", lambda c: f"{c.gpus:,}"),
    # the conserved figure: a grouping's rows and the unallocated row add up to the fleet's
    ("Charged GPU-h", lambda c: hours(c.sampled_gpu_hours)),
    # a job's or user's hours holding the GPUs (a shared GPU's hours count once per holder)
    ("Held GPU-h", lambda c: hours(c.allocated_gpu_hours)),
    ("Utilisation", lambda c: pct(c.utilization)),
    ("SM activity", lambda c: pct(c.sm_activity)),
    ("Useful GPU-h", lambda c: hours(c.useful_gpu_hours)),
    ("Useful by", lambda c: measure(c)),
    ("Alloc. idle GPU-h", lambda c: hours(c.allocated_idle_gpu_hours)),
    ("Energy kWh", lambda c: num(c.energy_kwh, 1)),
    ("kg CO2e", lambda c: num(c.co2e_kg, 1)),
    ("Hardware ({cur})", lambda c: money(c.hardware_cost)),
    ("Energy ({cur})", lambda c: money(c.energy_cost)),
    ("Total ({cur})", lambda c: money(c.total_cost)),
    ("Per useful GPU-h ({cur})", lambda c: money(c.cost_per_useful_gpu_hour)),
    ("Idle cost ({cur})", lambda c: money(c.idle_cost)),
    ("Coverage", lambda c: pct(c.coverage)),
]
DAILY: Columns[DayRow] = [
    ("Date", lambda d: d.date),
    ("Sampled GPU-h", lambda d: hours(d.sampled_gpu_hours)),
    ("Busy GPU-h", lambda d: hours(d.busy_gpu_hours)),
    ("Utilisation", lambda d: pct(d.busy_gpu_hours / d.sampled_gpu_hours if d.sampled_gpu_hours else None)),
    ("Energy kWh", lambda d: num(d.energy_kwh, 1)),
]
# "≤ 6 h": the maximum is a histogram bucket's upper bound, not an observed wait
QUEUE: Columns[QueueRow] = [
    ("Partition", lambda q: q.partition),
    ("Source", lambda q: q.source),
    ("Jobs started", lambda q: f"{q.jobs_started:,}"),
    ("Wait mean", lambda q: duration(q.wait_mean_s)),
    ("Wait p50", lambda q: duration(q.wait_p50_s)),
    ("Wait p95", lambda q: duration(q.wait_p95_s)),
    ("Wait max", lambda q: ("≤ " if q.wait_max_is_bound and q.wait_max_s is not None else "") + duration(q.wait_max_s)),
    ("Pending GPU-h", lambda q: hours(q.pending_gpu_hours)),
]
FAILURES: Columns[FailureRow] = [
    ("Partition", lambda f: f.partition),
    *(
        (name.capitalize(), lambda f, n=name: f"{getattr(f, n):,}")
        for name in ("completed", "failed", "cancelled", "timeout", "other", "requeued")
    ),
    ("Failed GPU-h", lambda f: hours(f.failed_gpu_hours)),
]
BENCH: Columns[BenchRow] = [
    ("Metric", lambda b: bench_metric(b.metric)[0]),
    ("GPUs", lambda b: str(b.world_size)),
    ("Runs", lambda b: str(b.runs)),
    ("Median", lambda b: bench_metric(b.metric)[1](b.value)),
    ("Previous median", lambda b: bench_metric(b.metric)[1](b.previous)),
    ("Change", lambda b: pct(b.change, signed=True)),
    ("Worst run", lambda b: _worst_run(b)),
    ("Flag", lambda b: f"⚠ DROP {b.worst_date}".rstrip() if b.dropped else ""),
]


def _worst_run(b: BenchRow) -> str:
    """The week's lowest run, its night and how far under the previous median: '137.5 GB/s 2026-11-29 (-19.9 %)'."""
    if b.worst is None:
        return DASH
    change = f" ({pct(b.worst_change, signed=True)})" if b.worst_change is not None else ""
    return f"{bench_metric(b.metric)[1](b.worst)} {b.worst_date}".rstrip() + change


MULTI_GPU: Columns[VerdictRow] = [
    ("GPUs", lambda v: str(v.world_size)),
    ("Speedup", lambda v: times(v.speedup)),
    ("Efficiency", lambda v: pct(v.efficiency)),
    ("Per M samples, 1 GPU ({cur})", lambda v: money(v.cost_per_million_samples_1)),
    ("Per M samples, N GPUs ({cur})", lambda v: money(v.cost_per_million_samples_n)),
    ("Extra cost", lambda v: pct(v.extra_cost, signed=True)),
    ("Verdict", lambda v: v.verdict),
]
RENT: Columns[RentRow] = [
    ("Model", lambda x: x.model),
    ("Owned / GPU-h ({cur})", lambda x: money(x.owned_per_gpu_hour)),
    ("Energy / busy h ({cur})", lambda x: money(x.energy_per_busy_hour)),
    ("Cloud / GPU-h ({cur})", lambda x: money(x.cloud_per_gpu_hour)),
    ("Break-even utilisation", lambda x: pct(x.breakeven_utilization)),
    ("Utilisation", lambda x: pct(x.utilization)),
    ("Verdict", lambda x: x.verdict),
]

STALLED: Columns[StalledRow] = [
    ("User", lambda x: x.user),
    ("Job", lambda x: x.job),
    ("Partition", lambda x: x.partition or DASH),
    ("GPUs", lambda x: f"{x.gpus:,}"),
    ("Stalled GPU-h", lambda x: hours(x.stalled_gpu_hours)),
    ("Stalled cost ({cur})", lambda x: money(x.stalled_cost)),
]

SCALING: Columns[ScalingRow] = [
    ("Model", lambda x: x.name),
    ("Run", lambda x: x.date),
    ("Currency", lambda x: x.currency or DASH),
    ("Scaling", lambda x: x.scaling),
    ("N", lambda x: f"{x.gpus} {x.unit}"),
    ("Step (ms)", lambda x: num(None if x.step_seconds is None else x.step_seconds * 1e3, 1)),
    ("Samples/s", lambda x: num(x.samples_per_second, 1)),
    ("Speedup", lambda x: times(x.speedup)),
    ("Efficiency", lambda x: pct(x.efficiency)),
    ("Per 1,000 steps", lambda x: num(x.cost_per_1000_steps, 4)),
    ("Verdict", lambda x: x.verdict if x.status == "ok" else x.status),
]

LINKS: Columns[LinkRow] = [
    ("User", lambda x: x.user),
    ("Job", lambda x: x.job),
    ("Partition", lambda x: x.partition or DASH),
    ("GPUs", lambda x: f"{x.gpus:,}"),
    ("GPU-h", lambda x: hours(x.gpu_hours)),
    ("Utilisation", lambda x: pct(x.utilization)),
    ("NVLink GB per GPU-h", lambda x: num(x.nvlink_gb_per_gpu_hour, 1)),
    ("PCIe GB per GPU-h", lambda x: num(x.pcie_gb_per_gpu_hour, 1)),
]

IDLE: Columns[IdleRow] = [
    ("User", lambda x: x.user),
    ("Job", lambda x: x.job),
    ("Partition", lambda x: x.partition or DASH),
    ("GPUs", lambda x: f"{x.gpus:,}"),
    ("Held idle GPU-h", lambda x: hours(x.idle_gpu_hours)),
    ("Idle cost ({cur})", lambda x: money(x.idle_cost)),
]

PRICES: Columns[PriceRow] = [
    ("Host", lambda p: p.host),
    ("Model", lambda p: p.model),
    ("GPUs", lambda p: f"{p.gpus:,}"),
    ("Kind", lambda p: p.kind + (" (example)" if p.example else "")),
    ("Per GPU-hour ({cur})", lambda p: money(p.per_gpu_hour)),
    ("Energy", lambda p: "included" if p.energy_included else "charged"),
]


BUSY_FROM = {
    "utilization": "utilisation",
    "gr_engine_active": "GR engine (MIG)",
    "mig_sm_active": "instances' SM activity (MIG)",
    "mixed": "mixed",
}


def _busy_from(row: CostRow) -> str:
    """What a GPU row's busy hours count: utilisation, or (a MIG GPU) its instances' GR engine activity
    (dcgm-exporter's) or SM activity (gpuledger's exporter)."""
    return BUSY_FROM.get(row.busy_measure, row.busy_measure) or DASH


ENERGY_FROM = {"counter": "energy counter", "power": "power samples (no counter)", "mixed": "mixed"}


def _energy_from(row: CostRow) -> str:
    """Where a GPU row's energy comes from: its energy counter, or power integrated (before Volta)."""
    return ENERGY_FROM.get(row.energy_measure, row.energy_measure) or DASH


GPU_COLUMNS: Columns[CostRow] = [
    ("GPU", lambda x: x.key),
    *COST,
    ("Busy from", _busy_from),
    ("Energy from", _energy_from),
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
    """Every section after the headline, in reading order."""
    c = r.currency
    by_cost = sorted(r.group("job"), key=lambda row: -row.total_cost)
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
