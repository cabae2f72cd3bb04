"""The report's tables as columns: a header and how a row shows in it, per table (the cost
tables, daily, queue, failures, benchmarks, verdicts, rent, stalled, scaling, link traffic, idle,
prices, GPUs). ``analytics.report.text`` lays the tables out; the numbers' formats are
``analytics.report.numbers``'."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from analytics.report.model import (
    BenchRow,
    CostRow,
    DayRow,
    FailureRow,
    IdleRow,
    LinkRow,
    PriceRow,
    QueueRow,
    RentRow,
    ScalingRow,
    StalledRow,
    VerdictRow,
)
from analytics.report.numbers import DASH, bandwidth, duration, hours, money, num, pct, times
from analytics.report.useful import label


def measure(row: CostRow) -> str:
    """What a row's useful hours count: ``sm_active``, ``busy`` or ``mixed: 62 % sm_active, 38 % busy``."""
    return label(row.useful_measure, row.useful_sm_share) or DASH


BUSBW, SPEEDUP = "allreduce_busbw_bytes_per_second", "train_speedup"


def bench_metric(metric: str) -> tuple[str, Callable[[float | None], str]]:
    """Display name and value format of a benchmark metric."""
    known = {BUSBW: ("All-reduce bus bandwidth", bandwidth), SPEEDUP: ("Training speedup", times)}
    return known.get(metric, ("Training efficiency", pct) if metric == "train_efficiency" else (metric, num))


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
