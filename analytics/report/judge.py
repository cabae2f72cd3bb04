"""The report's judgements: benchmark drift, the multi-GPU verdict (the synthetic benchmark's and the users'
own scripts'), rent vs buy, week over week."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from analytics.report.model import BenchRow, CostRow, Delta, QueueRow, RentRow, ScalingRow, VerdictRow
from domain.week import BenchWeek, Runs

DROP = 0.10  # a run more than 10 % under last week's median is flagged


def _bench_rows(
    metric: str, now: dict[int, float], runs: Runs, before: dict[int, float], timezone: str
) -> list[BenchRow]:
    out = []
    for n, v in sorted(now.items()):
        prev = before.get(n)
        change = v / prev - 1 if prev else None
        week = runs.get(n) or ()
        worst = min(week, key=lambda r: r.value) if week else None
        low = worst.value if worst is not None else v
        worst_change = low / prev - 1 if prev else None
        out.append(
            BenchRow(
                metric,
                n,
                v,
                prev,
                change,
                worst_change is not None and worst_change < -DROP,
                runs=len(week) or 1,
                worst=low,
                worst_change=worst_change,
                worst_at=worst.finished if worst is not None else None,
                worst_date=local_date(worst.finished, timezone) if worst is not None else "",
            )
        )
    return out


def local_date(t: float, timezone: str) -> str:
    """The night a run belongs to: its date in the report's time zone."""
    try:
        tz: dt.tzinfo = zoneinfo.ZoneInfo(timezone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        tz = dt.UTC
    return dt.datetime.fromtimestamp(t, tz).strftime("%Y-%m-%d")


def benchmarks(now: BenchWeek | None, before: BenchWeek | None, timezone: str = "UTC") -> list[BenchRow]:
    """Each figure the median of the week's runs against the previous week's median; a row is
    flagged when any run of the week is more than 10 % under that median (its worst run named)."""
    if now is None:
        return []
    b = before or BenchWeek()
    return (
        _bench_rows("allreduce_busbw_bytes_per_second", now.busbw, now.busbw_runs, b.busbw, timezone)
        + _bench_rows("train_speedup", now.speedup, now.speedup_runs, b.speedup, timezone)
        + _bench_rows("train_efficiency", now.efficiency, now.efficiency_runs, b.efficiency, timezone)
    )


def multi_gpu(bench: BenchWeek | None, fleet: CostRow) -> list[VerdictRow]:
    """Cost per million samples at N GPUs against one, at this fleet's average cost of a GPU-hour:
    N GPUs cost N × the hourly price and deliver speedup × the one-GPU throughput, so the cost per
    sample grows by 1 / efficiency − 1."""
    if bench is None or not bench.speedup:
        return []
    price = fleet.total_cost / fleet.available_gpu_hours if fleet.available_gpu_hours > 0 else None
    t1 = bench.throughput_1
    out = []
    for n, speedup in sorted(bench.speedup.items()):
        if n == 1:
            continue
        eff = bench.efficiency.get(n, speedup / n)
        if eff <= 0 or speedup <= 0:
            continue  # not a measurement
        per_m_1 = price / (t1 * 3600) * 1e6 if price is not None and t1 else None
        per_m_n = n * price / (t1 * speedup * 3600) * 1e6 if price is not None and t1 else None
        extra = 1 / eff - 1
        if eff >= 0.8:
            verdict = f"scales well: {n} GPUs cost {100 * extra:.0f} % more per sample and finish {speedup:.1f}x sooner"
        elif eff >= 0.6:
            verdict = (
                f"typical (60-80 % of linear): {100 * extra:.0f} % more per sample for {speedup:.1f}x; "
                "worth it when time to result matters"
            )
        else:
            verdict = f"poor: {100 * extra:.0f} % more per sample; prefer fewer GPUs per job or fix communication"
        out.append(VerdictRow(n, speedup, eff, per_m_1, per_m_n, extra, verdict))
    return out


def rent_row(
    model: str,
    owned_hourly: float,
    energy_per_busy: float,
    cloud: float | None,
    breakeven: float | None,
    util: float | None,
) -> RentRow:
    if cloud is None:
        verdict = "set cloud_reference_per_gpu_hour on the price rule to compare"
    elif breakeven is None:
        verdict = "renting is cheaper at any utilisation (the cloud price is under the energy cost)"
    elif breakeven > 1:
        verdict = f"renting is cheaper even at 100 % (owning pays only above {100 * breakeven:.0f} %)"
    elif util is None:
        verdict = f"owning beats renting above {100 * breakeven:.0f} % utilisation"
    elif util >= breakeven:
        verdict = f"owning pays: {100 * util:.0f} % used, break-even {100 * breakeven:.0f} %"
    else:
        verdict = f"renting would be cheaper: {100 * util:.0f} % used, owning pays above {100 * breakeven:.0f} %"
    return RentRow(model, owned_hourly, energy_per_busy, cloud, breakeven, util, verdict)


def deltas(now: CostRow, before: CostRow | None, queue: list[QueueRow], queue_before: list[QueueRow]) -> list[Delta]:
    def d(name: str, a: float | None, b: float | None) -> Delta:
        return Delta(name, a, b, (a / b - 1) if a is not None and b not in (None, 0) else None)

    def p95(rows: list[QueueRow]) -> float | None:
        vals = [r.wait_p95_s for r in rows if r.wait_p95_s is not None]
        return max(vals) if vals else None

    b = before
    return [
        d("utilisation", now.utilization, b.utilization if b else None),
        d("cost per useful GPU-hour", now.cost_per_useful_gpu_hour, b.cost_per_useful_gpu_hour if b else None),
        d("total cost", now.total_cost, b.total_cost if b else None),
        d("idle cost", now.idle_cost, b.idle_cost if b else None),
        d("useful GPU-hours", now.useful_gpu_hours, b.useful_gpu_hours if b else None),
        d("energy kWh", now.energy_kwh, b.energy_kwh if b else None),
        d("allocated-but-idle GPU-hours", now.allocated_idle_gpu_hours, b.allocated_idle_gpu_hours if b else None),
        d("worst queue-wait p95 (s)", p95(queue), p95(queue_before)),
    ]


def scaling(bench: BenchWeek | None, timezone: str = "UTC") -> list[ScalingRow]:
    """The users' own scripts (``gpuledger scaling --history``): a row per run and GPU count, the
    run's verdict for that count beside it."""
    if bench is None:
        return []
    tz = zoneinfo.ZoneInfo(timezone)
    out = []
    for run in bench.scaling:
        date = dt.datetime.fromtimestamp(run.finished, tz).date().isoformat()
        said = {v.split(":", 1)[0]: v.split(":", 1)[1].strip() for v in run.verdicts if ":" in v}
        for p in run.points:
            verdict = said.get(f"{p.n} {run.unit}", "") if p.n > 1 else ""
            figures = (p.step_seconds, p.samples_per_second, p.speedup, p.efficiency, p.cost_per_1000_steps)
            head = (run.name, date, run.scaling, p.n, run.unit, p.status)
            out.append(ScalingRow(*head, *figures, run.currency, verdict))
    return out
