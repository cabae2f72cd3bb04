"""The report's rows that are not costs: daily hours, queue waits, failures, rent vs buy."""

from __future__ import annotations

from analytics.cost import JOULES_PER_KWH, CostModel, breakeven_utilisation
from analytics.report import judge
from analytics.report.ledger import sum_known
from analytics.report.model import CostRow, DayRow, FailureRow, QueueRow, RentRow
from domain import states
from domain.week import WeekData, days

_FAILED_NOT_TIMEOUT = frozenset(states.FAILED) - {states.TIMEOUT}  # timeout has its own column
_NOT_OTHER = frozenset({states.COMPLETED, states.CANCELLED, *states.FAILED})


def _daily(data: WeekData) -> list[DayRow]:
    out = []
    for i, day in enumerate(days(data.window)):
        per = [g.daily[i] for g in data.gpus if i < len(g.daily)]
        energy = sum_known(d.energy_j for d in per)
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
    """The columns split the finished jobs by ``domain.states``: failed + timeout is what
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
