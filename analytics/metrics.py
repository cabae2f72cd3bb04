"""The analytics daemon's /metrics: the latest reports as ``gpuledger_report_*`` gauges (label
``window``: ``rolling_7d`` refreshed hourly, ``week`` the last weekly report) and the prices as
``gpuledger_price_*``, so dashboards can compute cost live. One table, as in the exporter."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from analytics.budgets import BudgetFigure
from analytics.cost import CostModel
from analytics.report.groupings import is_grouping
from analytics.report.model import CostRow, Report
from analytics.report.rows import top

# GPUs and jobs stay in the reports (too many series); the unallocated row makes the groupings add up.
# The groupings (the rows of analytics.report.groupings that [analytics] group_by chose: user,
# namespace, account, ..., label:<name>) are bounded: each its top N keys by total cost and one
# OTHER row summing the rest (ReportCollector's top_n). The rest (fleet, host, model, unallocated)
# are exported in full; gpu and job not at all.
NOT_EXPORTED = ("gpu", "job")
OTHER = "(other)"  # the key of the row summing a grouping's keys beyond the top N
TOP_N = 20  # [analytics] group_top_n's default
Sample = tuple[tuple[str, ...], float]


def _rows(r: Report) -> Iterator[CostRow]:
    yield r.fleet
    yield from (row for row in r.rows if row.group not in NOT_EXPORTED)


def bounded(r: Report, top_n: int = TOP_N, min_useful_h: float = 0.0) -> Report:
    """``r`` with each grouping's rows cut to its top ``top_n`` keys by total cost (ties by key)
    and an ``(other)`` row summing the rest, so a grouping exports at most ``top_n + 1`` keys and
    still adds up; the host, model and unallocated rows as they are."""
    chosen = {group for group in {row.group for row in r.rows} if is_grouping(group)}
    per: dict[str, list[CostRow]] = defaultdict(list)
    for row in r.rows:
        if row.group in chosen:
            per[row.group].append(row)
    if all(len(rows) <= top_n for rows in per.values()):
        return r
    kept = [row for row in r.rows if row.group not in per]
    for rows in per.values():
        kept += top(rows, top_n, OTHER, min_useful_h)
    return dataclasses.replace(r, rows=kept)


def _per_row(fn: Callable[[CostRow], float | None]) -> Callable[[Report], Iterator[Sample]]:
    def get(r: Report) -> Iterator[Sample]:
        for row in _rows(r):
            v = fn(row)
            if v is not None:
                yield (row.group, row.key), float(v)

    return get


def _kinds(**fields: Callable[[CostRow], float | None]) -> Callable[[Report], Iterator[Sample]]:
    def get(r: Report) -> Iterator[Sample]:
        for row in _rows(r):
            for kind, fn in fields.items():
                v = fn(row)
                if v is not None:
                    yield (row.group, row.key, kind), float(v)

    return get


def _queue(r: Report) -> Iterator[Sample]:
    for q in r.queue:
        for stat, v in (("mean", q.wait_mean_s), ("p50", q.wait_p50_s), ("p95", q.wait_p95_s), ("max", q.wait_max_s)):
            if v is not None:
                yield (q.partition, stat), v


def _failures(r: Report) -> Iterator[Sample]:
    for f in r.failures:
        for state, n in (
            ("COMPLETED", f.completed),
            ("FAILED", f.failed),
            ("CANCELLED", f.cancelled),
            ("TIMEOUT", f.timeout),
            ("other", f.other),
            ("requeued", f.requeued),
        ):
            yield (f.partition, state), float(n)


@dataclass(frozen=True)
class ReportMetric:
    name: str
    help: str
    labels: tuple[str, ...]  # after "window"
    samples: Callable[[Report], Iterator[Sample]]


GPU_ROW = ("group", "key")
# fmt: off
REPORT_METRICS: tuple[ReportMetric, ...] = (
    ReportMetric("gpuledger_report_complete", "1 when the report had full data (see its incomplete reasons).", (),
                 lambda r: iter([((), float(r.complete))])),
    ReportMetric("gpuledger_report_coverage_ratio", "Sampled / available GPU-hours of the fleet: the share of the "
                 "window's GPU-hours with data.", (),
                 lambda r: iter([((), r.coverage)])),
    ReportMetric("gpuledger_report_generated_timestamp_seconds", "When the report was built.", (),
                 lambda r: iter([((), r.generated_at)])),
    ReportMetric("gpuledger_report_gpu_hours", "GPU-hours by kind: available (the GPUs x the window, up to now), "
                 "sampled, busy, useful (busy less stalled, or SM-active: [cost] useful), allocated, allocated_idle.",
                 (*GPU_ROW, "kind"), _kinds(
                     available=lambda x: x.available_gpu_hours, sampled=lambda x: x.sampled_gpu_hours,
                     busy=lambda x: x.busy_gpu_hours, useful=lambda x: x.useful_gpu_hours,
                     allocated=lambda x: x.allocated_gpu_hours, allocated_idle=lambda x: x.allocated_idle_gpu_hours)),
    ReportMetric("gpuledger_report_useful_sm_active_ratio", "Share of the sampled GPU-hours whose useful hours "
                 "are SM-active ones (the rest count busy time): 1 all SM activity, 0 all busy, between: mixed "
                 "(GPUs without SM activity; see gpuledger_report_info's useful label).", GPU_ROW,
                 _per_row(lambda x: x.useful_sm_share)),
    ReportMetric("gpuledger_report_utilization_ratio", "Busy / sampled GPU-hours.", GPU_ROW,
                 _per_row(lambda x: x.utilization)),
    ReportMetric("gpuledger_report_sm_activity_ratio", "SM-active / sampled GPU-hours (no series without SM "
                 "activity data).", GPU_ROW,
                 _per_row(lambda x: x.sm_activity)),
    ReportMetric("gpuledger_report_energy_kwh", "Energy in kWh (no series where energy was not measured).", GPU_ROW,
                 _per_row(lambda x: x.energy_kwh)),
    ReportMetric("gpuledger_report_co2e_kg", "Emissions in kg CO2e: energy x PUE x grid carbon intensity (no "
                 "series without a configured intensity or measured energy).", GPU_ROW,
                 _per_row(lambda x: x.co2e_kg)),
    ReportMetric("gpuledger_report_cost", "Cost in the report's currency by kind: hardware, energy, total, idle "
                 "(the hardware cost of the hours that were not useful, part of hardware).",
                 (*GPU_ROW, "kind"), _kinds(hardware=lambda x: x.hardware_cost, energy=lambda x: x.energy_cost,
                                            total=lambda x: x.total_cost, idle=lambda x: x.idle_cost)),
    ReportMetric("gpuledger_report_cost_per_useful_gpu_hour", "Total cost / useful GPU-hours (no series below "
                 "[cost] min_useful_gpu_hours useful GPU-hours).", GPU_ROW,
                 _per_row(lambda x: x.cost_per_useful_gpu_hour)),
    ReportMetric("gpuledger_report_queue_wait_seconds", "Queue wait by partition (a Slurm partition, or kubernetes: "
                 "GPU pods, created to scheduled) and statistic (mean, p50, p95, max).",
                 ("partition", "stat"), _queue),
    ReportMetric("gpuledger_report_queue_jobs_started", "Jobs (or GPU pods: partition kubernetes) started in the "
                 "window.", ("partition",),
                 lambda r: (((q.partition,), float(q.jobs_started)) for q in r.queue)),
    ReportMetric("gpuledger_report_jobs", "Jobs that ended in the window by state class (domain/states.py): "
                 "COMPLETED, FAILED (every failed state but TIMEOUT), CANCELLED, TIMEOUT, other; and requeued.",
                 ("partition", "state"), _failures),
    ReportMetric("gpuledger_report_failed_gpu_hours", "GPU-hours of jobs that failed or timed out.", ("partition",),
                 lambda r: (((f.partition,), f.failed_gpu_hours) for f in r.failures
                            if f.failed_gpu_hours is not None)),
    ReportMetric("gpuledger_report_multi_gpu_efficiency_ratio", "Measured scaling efficiency at N GPUs.",
                 ("world_size",), lambda r: (((str(v.world_size),), v.efficiency) for v in r.multi_gpu)),
    ReportMetric("gpuledger_report_multi_gpu_extra_cost_ratio", "Extra cost per sample at N GPUs over one "
                 "(1 / efficiency - 1: 0.25 = 25 % more).",
                 ("world_size",), lambda r: (((str(v.world_size),), v.extra_cost) for v in r.multi_gpu)),
    ReportMetric("gpuledger_report_breakeven_utilization_ratio", "Utilisation above which owning beats renting "
                 "(owned GPUs with a cloud_reference_per_gpu_hour; over 1: never; no series where the cloud price is "
                 "at or under the energy cost).",
                 ("model",), lambda r: (((x.model,), x.breakeven_utilization) for x in r.rent_vs_buy
                                        if x.breakeven_utilization is not None)),
    ReportMetric("gpuledger_report_change_ratio", "Change of a headline figure over the window before it "
                 "(week-over-week; 0.1 = +10 %).",
                 ("figure",), lambda r: (((d.figure,), d.change) for d in r.deltas if d.change is not None)),
)
# fmt: on


@dataclass(frozen=True)
class Family:
    """A metric family the daemon serves besides the report table: its documentation and its maker."""

    name: str
    kind: str  # gauge | counter
    help: str
    labels: tuple[str, ...] = ()

    def make(self) -> GaugeMetricFamily | CounterMetricFamily:
        cls = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        return cls(self.name.removesuffix("_total"), self.help, labels=self.labels)


INFO = Family(
    "gpuledger_report_info",
    "gauge",
    "The report behind the window's figures; always 1. useful: what the fleet's useful hours count (sm_active, "
    "busy, or mixed where some GPUs lack SM activity: gpuledger_report_useful_sm_active_ratio says how much).",
    ("window", "week", "source", "useful", "currency"),
)
PRICE_ENERGY = Family(
    "gpuledger_price_energy_kwh", "gauge", "Energy price per kWh now (tariff applied).", ("currency",)
)
PRICE_PUE = Family("gpuledger_price_pue", "gauge", "Power usage effectiveness applied to energy.")
PRICE_GPU = Family(
    "gpuledger_price_gpu_hour",
    "gauge",
    "Hardware (kind owned) or rental (kind cloud) cost of a GPU-hour, per host and model, as the reports held "
    "price them.",
    ("host", "model", "kind", "currency"),
)
RUNS = Family(
    "gpuledger_analytics_runs_total",
    "counter",
    "Report runs by task (refresh, weekly; budgets, statements, focus where configured; days, the settled days "
    "kept after each refresh, with a prometheus or dcgm source and analytics.day_cache; each from 0 at start) "
    "and result: ok; no_data (the source answered, no GPU data in the window: nothing written; days: no day to "
    "keep); error (the source could not answer).",
    ("task", "result"),
)
RUN_RESULTS = ("ok", "no_data", "error")
LAST_OK = Family(
    "gpuledger_analytics_last_success_timestamp_seconds",
    "gauge",
    "When a task last succeeded (result ok or no_data).",
    ("task",),
)


BUDGET_LABELS = ("group", "key", "unit")  # unit: the currency code, or gpu_hours
BUDGET_SPENT = Family(
    "gpuledger_budget_spent",
    "gauge",
    "A [budgets] rule's month-to-date spent: total cost, or charged GPU-hours (unit gpu_hours).",
    BUDGET_LABELS,
)
BUDGET_LIMIT = Family("gpuledger_budget_limit", "gauge", "A [budgets] rule's monthly budget.", BUDGET_LABELS)
BUDGET_FORECAST = Family(
    "gpuledger_budget_forecast",
    "gauge",
    "A [budgets] rule's month-end forecast: spent / the share of the month's hours charged so far "
    "(analytics/budgets.py).",
    BUDGET_LABELS,
)


def families() -> list[Family]:
    """Everything the analytics daemon serves, for docs/metrics.md."""
    table = [Family(m.name, "gauge", m.help, ("window", *m.labels)) for m in REPORT_METRICS]
    budgets = [BUDGET_SPENT, BUDGET_LIMIT, BUDGET_FORECAST]
    return [INFO, *table, PRICE_ENERGY, PRICE_PUE, PRICE_GPU, *budgets, RUNS, LAST_OK]


class ReportCollector(Collector):
    """Collects from whatever reports the daemon holds now (``window`` label -> report)."""

    def __init__(
        self,
        reports: Callable[[], dict[str, Report]],
        cost: CostModel,
        timezone: str,
        clock: Callable[[], float] = time.time,
        top_n: int = TOP_N,
    ) -> None:
        self.reports = reports
        self.top_n = top_n  # per grouping: the top N keys by total cost, the rest in one (other) row
        self.cost = cost
        self.timezone = timezone
        self.clock = clock  # the energy price now (a tariff's hour)

    def collect(self) -> Iterator[Metric]:
        min_h = self.cost.min_useful_gpu_hours
        reports = {window: bounded(r, self.top_n, min_h) for window, r in self.reports().items()}
        info = INFO.make()
        for window, r in reports.items():
            info.add_metric((window, r.week, r.source, r.useful_measure, r.currency), 1.0)
        yield info
        for m in REPORT_METRICS:
            fam = GaugeMetricFamily(m.name, m.help, labels=("window", *m.labels))
            for window, r in reports.items():
                for labels, value in m.samples(r):
                    fam.add_metric((window, *labels), value)
            yield fam
        yield from self._prices(reports)

    def _prices(self, reports: dict[str, Report]) -> Iterator[Metric]:
        c = self.cost
        energy = PRICE_ENERGY.make()
        energy.add_metric((c.currency,), c.price_at(self.clock(), self.timezone))
        pue = PRICE_PUE.make()
        pue.add_metric((), c.pue)
        gpu = PRICE_GPU.make()
        seen: set[tuple[str, str]] = set()
        for r in reports.values():
            for p in r.prices:
                if (p.host, p.model) not in seen:
                    seen.add((p.host, p.model))
                    gpu.add_metric((p.host, p.model, p.kind, r.currency), p.per_gpu_hour)
        yield from (energy, pue, gpu)


class RunsCollector(Collector):
    """The daemon's own health: runs by task and result, and each task's last success."""

    def __init__(
        self, state: Callable[[], tuple[dict[tuple[str, str], int], dict[str, float]]], tasks: Iterable[str] = ()
    ) -> None:
        self.state = state
        # the tasks the daemon runs: their counters exist from the start, at 0 (rate() and
        # increase() need the zero; an alert on errors has a series to watch)
        self.zeros = {(task, result): 0 for task in tasks for result in RUN_RESULTS}

    def collect(self) -> Iterator[Metric]:
        runs_now, last_now = self.state()
        runs, last = RUNS.make(), LAST_OK.make()
        for (task, result), n in sorted((self.zeros | runs_now).items()):
            runs.add_metric((task, result), n)
        for task, t in sorted(last_now.items()):
            last.add_metric((task,), t)
        yield from (runs, last)


class BudgetCollector(Collector):
    """The budgets ([budgets] rules): limits always; spent and forecast once a month report exists."""

    def __init__(self, figures: Callable[[], list[BudgetFigure]]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        spent, limit, forecast = BUDGET_SPENT.make(), BUDGET_LIMIT.make(), BUDGET_FORECAST.make()
        for f in self.figures():
            labels = (f.group, f.key, f.unit)
            limit.add_metric(labels, f.limit)
            if f.spent is not None:
                spent.add_metric(labels, f.spent)
            if f.forecast is not None:
                forecast.add_metric(labels, f.forecast)
        yield from (spent, limit, forecast)
