"""Week data + cost model -> the report. Pure arithmetic, no I/O.

Per GPU: hardware cost = the matching rule's hourly rate × the window's charged hours (a GPU costs
whether or not it works; only what happened: from the first data, when the history begins inside
the window, up to now, when the window ends later); energy cost from its energy (flat price or
tariff, × PUE); useful hours = busy or SM-active hours (``cost.useful``); effective cost per
useful GPU-hour = total / useful (None below ``cost.min_useful_gpu_hours``); idle cost = the
hardware (or rental) rate × the charged hours that were not useful (so it adds up across GPUs and
across days; the energy an idle GPU draws stays in the energy cost). Groups (host, model, fleet)
sum their GPUs; users and jobs are charged for the hours they held a GPU at its hourly rate plus
their apportioned energy.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from analytics.cost import JOULES_PER_KWH, CostModel, PriceRule, breakeven_utilisation, gpu_cost
from analytics.report import judge
from analytics.report.model import (
    TOP_IDLE,
    CostRow,
    DayRow,
    FailureRow,
    IdleRow,
    PriceRow,
    QueueRow,
    RentRow,
    Report,
    window_notes,
)
from analytics.week_data import GpuWeek, WeekData, days
from exporter.slurm import states

_FAILED_NOT_TIMEOUT = frozenset(states.FAILED) - {states.TIMEOUT}  # timeout has its own column
_NOT_OTHER = frozenset({states.COMPLETED, states.CANCELLED, *states.FAILED})


def _useful(g: GpuWeek, cost: CostModel) -> float:
    if cost.useful == "sm_active" and g.sm_active_s is not None:
        return g.sm_active_s
    return g.busy_s


def _ratio(a: float | None, b: float) -> float | None:
    return None if a is None or b <= 0 else a / b


def _sum(values: Iterable[float | None]) -> float | None:
    vs = list(values)
    return None if all(v is None for v in vs) else sum(v or 0.0 for v in vs)


@dataclass(frozen=True, slots=True)
class _Fig:
    """One GPU's (or job's) week, in seconds, joules and money."""

    gpus: int
    available_s: float
    sampled_s: float
    busy_s: float
    useful_s: float
    sm_s: float | None
    alloc_s: float | None
    idle_s: float | None
    energy_j: float | None
    hardware: float
    energy_cost: float
    idle_cost: float  # the hardware rate x the hours that were not useful
    uuids: frozenset[str] = frozenset()  # a job's GPUs: a group counts distinct GPUs


class _Acc:
    """Adds GPUs (or jobs) up into one CostRow."""

    def __init__(self) -> None:
        self.gpus = 0
        self.available = self.sampled = self.busy = self.useful = 0.0
        self.sm: list[float | None] = []
        self.alloc: list[float | None] = []
        self.idle: list[float | None] = []
        self.energy: list[float | None] = []
        self.hardware = self.energy_cost = self.idle_cost = 0.0
        self.uuids: set[str] = set()

    def add(self, f: _Fig) -> None:
        self.gpus += f.gpus
        self.uuids |= f.uuids
        self.available += f.available_s
        self.sampled += f.sampled_s
        self.busy += f.busy_s
        self.useful += f.useful_s
        self.sm.append(f.sm_s)
        self.alloc.append(f.alloc_s)
        self.idle.append(f.idle_s)
        self.energy.append(f.energy_j)
        self.hardware += f.hardware
        self.energy_cost += f.energy_cost
        self.idle_cost += f.idle_cost

    def row(self, group: str, key: str, min_useful_h: float = 0.0) -> CostRow:
        h = 3600.0
        useful_h = self.useful / h
        sm = _sum(self.sm)
        total = self.hardware + self.energy_cost
        energy = _sum(self.energy)
        return CostRow(
            group=group,
            key=key,
            gpus=self.gpus + len(self.uuids),
            available_gpu_hours=self.available / h,
            sampled_gpu_hours=self.sampled / h,
            busy_gpu_hours=self.busy / h,
            sm_active_gpu_hours=None if sm is None else sm / h,
            useful_gpu_hours=self.useful / h,
            utilization=_ratio(self.busy, self.sampled),
            sm_activity=_ratio(sm, self.sampled),
            allocated_gpu_hours=None if (a := _sum(self.alloc)) is None else a / h,
            allocated_idle_gpu_hours=None if (i := _sum(self.idle)) is None else i / h,
            energy_kwh=None if energy is None else energy / JOULES_PER_KWH,
            energy_cost=self.energy_cost,
            hardware_cost=self.hardware,
            total_cost=total,
            cost_per_useful_gpu_hour=total / useful_h if useful_h > 0 and useful_h >= min_useful_h else None,
            idle_cost=self.idle_cost,
            coverage=self.sampled / self.available if self.available > 0 else 0.0,
        )


def build(
    data: WeekData,
    cost: CostModel,
    *,
    previous: WeekData | None = None,
    min_coverage: float = 0.99,
    now: float | None = None,
) -> Report:
    w = data.window
    generated = now or time.time()
    # only what happened: charge from the first data (a window starting before the history) up
    # to now (a window ending later)
    first = data.history_start
    clipped = first is not None and first > w.start
    start = min(first, w.end) if first is not None and clipped else w.start
    end = max(start, min(w.end, generated))
    charged_s = end - start
    groups: dict[str, dict[str, _Acc]] = defaultdict(lambda: defaultdict(_Acc))
    fleet = _Acc()
    hourly: dict[str, float] = {}  # uuid -> hardware cost of an hour
    per_joule: dict[str, float] = {}  # uuid -> the GPU's effective energy price (tariff included)
    unpriced: set[str] = set()
    priced: dict[tuple[str, str], PriceRule] = {}  # (host, model) -> the rule that prices its GPUs
    priced_gpus: Counter[tuple[str, str]] = Counter()
    for g in data.gpus:
        rule = cost.rule_for(g.model, g.host)
        if rule is None:
            unpriced.add(f"{g.model} on {g.host}")
        else:
            priced.setdefault((g.host, g.model), rule)
            priced_gpus[(g.host, g.model)] += 1
        hourly[g.uuid] = rule.hourly() if rule is not None else 0.0
        c = gpu_cost(cost, rule, charged_s / 3600, g.energy_j, g.energy_by_hour, w.start, w.timezone)
        per_joule[g.uuid] = c.energy / g.energy_j if g.energy_j else 0.0
        useful = _useful(g, cost)
        fig = _Fig(
            gpus=1,
            available_s=charged_s,
            sampled_s=g.sampled_s,
            busy_s=g.busy_s,
            useful_s=useful,
            sm_s=g.sm_active_s,
            alloc_s=g.allocated_s,
            idle_s=g.allocated_idle_s,
            energy_j=g.energy_j,
            hardware=c.hardware,
            energy_cost=c.energy,
            idle_cost=hourly[g.uuid] * max(0.0, charged_s - useful) / 3600,
        )
        fleet.add(fig)
        for group, key in (("host", g.host), ("model", g.model), ("gpu", f"{g.host}/{g.gpu} {g.uuid}")):
            groups[group][key].add(fig)
    holders: dict[str, tuple[str, str]] = {}  # job key -> (user, partition)
    for j in data.jobs:
        # a job pays its GPU's hourly rate for the hours it held it, and its share of the energy
        rate = hourly.get(j.uuid, 0.0)
        fig = _Fig(
            gpus=0,
            available_s=j.sampled_s,
            sampled_s=j.sampled_s,
            busy_s=j.busy_s,
            useful_s=j.busy_s,
            sm_s=j.sm_active_s,
            alloc_s=j.sampled_s,
            idle_s=j.allocated_idle_s,
            energy_j=j.energy_j,
            hardware=rate * j.sampled_s / 3600,
            energy_cost=j.energy_j * per_joule.get(j.uuid, 0.0),
            idle_cost=rate * max(0.0, j.sampled_s - j.busy_s) / 3600,
            uuids=frozenset({j.uuid}),
        )
        groups["user"][j.job.user or "(unknown)"].add(fig)
        key = j.job.job_id or (f"{j.job.namespace}/{j.job.pod}" if j.job.pod else f"{j.job.user or '?'} (no job)")
        groups["job"][key].add(fig)
        user, part = holders.get(key, ("", ""))
        holders[key] = (user or j.job.user or "(unknown)", part or j.partition)
    min_h = cost.min_useful_gpu_hours
    rows = [
        acc.row(group, key, min_h)
        for group in ("host", "model", "gpu", "user", "job")
        for key, acc in sorted(groups[group].items())
    ]
    fleet_row = fleet.row("fleet", "fleet", min_h)
    reasons = list(data.problems)
    if not data.gpus:
        reasons.append("no GPU data in this window")
    elif fleet_row.coverage < min_coverage:
        gaps = sum(1 for g in data.gpus if g.sampled_s < min_coverage * charged_s)
        reasons.append(
            f"coverage {100 * fleet_row.coverage:.1f} % (< {100 * min_coverage:.0f} %): "
            f"{gaps} of {len(data.gpus)} GPUs have gaps"
        )
    if unpriced:
        reasons.append("no price for " + ", ".join(sorted(unpriced)))
    prev_report = build(previous, cost, min_coverage=min_coverage, now=generated) if previous is not None else None
    in_progress = w.end > generated
    elapsed = (end - w.start) / w.seconds if w.seconds > 0 else 1.0
    notes = ["example prices: set [cost] for yours"] if cost.example_prices else []
    notes += window_notes(in_progress, elapsed, start if clipped else None, w.timezone)
    return Report(
        week=w.label,
        start=w.start,
        end=w.end,
        timezone=w.timezone,
        generated_at=generated,
        currency=cost.currency,
        useful_measure=cost.useful,
        source=data.source,
        approximations=list(data.approximations),
        example_prices=cost.example_prices,
        complete=not reasons,
        incomplete_reasons=reasons,
        coverage=fleet_row.coverage,
        fleet=fleet_row,
        rows=rows,
        daily=_daily(data),
        queue=_queue(data),
        failures=_failures(data),
        benchmarks=judge.benchmarks(data.bench, previous.bench if previous else None, data.window.timezone),
        multi_gpu=judge.multi_gpu(data.bench, fleet_row),
        rent_vs_buy=_rent(data, cost, rows),
        deltas=judge.deltas(
            fleet_row,
            prev_report.fleet if prev_report else None,
            _queue(data),
            prev_report.queue if prev_report else [],
        ),
        notes=notes,
        prices=[
            PriceRow(
                host,
                model,
                rule.kind,
                priced_gpus[(host, model)],
                rule.hourly(),
                rule.energy_included,
                cost.example_prices,
            )
            for (host, model), rule in sorted(priced.items())
        ],
        charged_start=start,
        charged_end=end,
        history_start=start if clipped else None,
        in_progress=in_progress,
        elapsed=elapsed,
        idle_holders=_idle_holders(groups["job"], holders),
    )


def _idle_holders(jobs: dict[str, _Acc], holders: dict[str, tuple[str, str]]) -> list[IdleRow]:
    """The jobs that held GPUs idle, worst (highest idle cost) first: whatever their total cost."""
    rows = [
        IdleRow(
            holders[key][0],
            key,
            holders[key][1],
            len(acc.uuids),
            max(0.0, acc.sampled - acc.busy) / 3600,
            acc.idle_cost,
        )
        for key, acc in jobs.items()
        for user, part in [holders[key]]
        if acc.sampled > acc.busy
    ]
    return sorted(rows, key=lambda r: (-r.idle_cost, -r.idle_gpu_hours, r.job))[:TOP_IDLE]


def _daily(data: WeekData) -> list[DayRow]:
    out = []
    for i, day in enumerate(days(data.window)):
        per = [g.daily[i] for g in data.gpus if i < len(g.daily)]
        energy = _sum(d.energy_j for d in per)
        sampled, busy = sum(d.sampled_s for d in per), sum(d.busy_s for d in per)
        out.append(DayRow(day.date, sampled / 3600, busy / 3600, None if energy is None else energy / JOULES_PER_KWH))
    return out


def _queue(data: WeekData) -> list[QueueRow]:
    return [
        QueueRow(
            q.partition,
            q.source,
            q.started,
            q.wait_mean,
            q.wait_p50,
            q.wait_p95,
            q.wait_max,
            q.wait_max_is_bound,
            q.pending_gpu_hours,
        )
        for q in data.queue
    ]


def _failures(data: WeekData) -> list[FailureRow]:
    """The columns split the finished jobs by ``exporter.slurm.states``: failed + timeout is what
    the dashboards' failed share counts; other is every state neither completed, cancelled nor
    failed (PREEMPTED, or one a later Slurm adds)."""
    out = []
    for f in data.failures:
        s = f.finished
        row = FailureRow(
            partition=f.partition,
            completed=s.get(states.COMPLETED, 0),
            failed=sum(n for state, n in s.items() if state in _FAILED_NOT_TIMEOUT),
            cancelled=s.get(states.CANCELLED, 0),
            timeout=s.get(states.TIMEOUT, 0),
            other=sum(n for state, n in s.items() if state not in _NOT_OTHER),
            requeued=f.requeued,
            failed_gpu_hours=f.failed_gpu_hours,
        )
        out.append(row)
    return out


def _rent(data: WeekData, cost: CostModel, rows: list[CostRow]) -> list[RentRow]:
    models = {r.key: r for r in rows if r.group == "model"}
    out = []
    for model, row in sorted(models.items()):
        host = next((g.host for g in data.gpus if g.model == model), "")
        rule = cost.rule_for(model, host)
        if rule is None or rule.kind != "owned":
            continue
        energy_per_busy = row.energy_cost / row.busy_gpu_hours if row.busy_gpu_hours > 0 else 0.0
        cloud = rule.cloud_reference_per_gpu_hour
        breakeven = breakeven_utilisation(rule, cloud, energy_per_busy) if cloud is not None else None
        # renting would be needed for the hours the GPU was busy, whatever the useful measure
        util = row.busy_gpu_hours / row.available_gpu_hours if row.available_gpu_hours > 0 else None
        out.append(judge.rent_row(model, rule.hourly(), energy_per_busy, cloud, breakeven, util))
    return out
