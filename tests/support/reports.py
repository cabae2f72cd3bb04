"""A fully populated weekly report with realistic figures (two 4-GPU hosts, one H200 and one H100)
and, with ``hostile=True``, keys built to break tables, CSV and HTML."""

from __future__ import annotations

from analytics.report.model import (
    BenchRow,
    CostRow,
    DayRow,
    Delta,
    FailureRow,
    IdleRow,
    PriceRow,
    QueueRow,
    RentRow,
    Report,
    StalledRow,
    VerdictRow,
)
from domain.week import iso_week

HOSTILE_USER = '<script>alert("x")</script>'
HOSTILE_HOST = 'node"7\\|a,b'
HOSTILE_PARTITION = "long\nqueue-ü"
HOSTILE_JOB = "slurm:4711|train,final"
HOSTILE_NOTE = "<img src=x onerror=alert(1)> & | pipe"
REASONS = ["Slurm accounting could not be read for 6 hours", "node gpu-b sent no samples on Thursday"]
SIZES, SPEEDUP = (1, 2, 4, 8), (1.0, 1.94, 3.71, 6.62)
ENERGY_PRICE = 0.15 * 1.3  # per kWh, PUE included


def cost_row(group: str, key: str, gpus: int, util: float, rate: float, coverage: float = 0.97) -> CostRow:
    """A group's week from its GPUs, utilisation and hourly rate, derived as the cost model would."""
    available = gpus * 168.0
    sampled = available * coverage
    busy = sampled * util
    energy = sampled * (0.12 + 0.55 * util)  # kWh: idle draw plus load
    hardware = available * rate
    total = hardware + energy * ENERGY_PRICE
    allocated = None if group in ("job", "user") else min(sampled, busy * 1.25)
    return CostRow(
        group=group,
        key=key,
        gpus=gpus,
        available_gpu_hours=available,
        sampled_gpu_hours=sampled,
        busy_gpu_hours=busy,
        sm_active_gpu_hours=busy * 0.71,
        useful_gpu_hours=busy,
        utilization=util,
        sm_activity=0.71 * util,
        allocated_gpu_hours=allocated,
        allocated_idle_gpu_hours=None if allocated is None else allocated - busy,
        energy_kwh=energy,
        energy_cost=energy * ENERGY_PRICE,
        hardware_cost=hardware,
        total_cost=total,
        cost_per_useful_gpu_hour=total / busy,
        idle_cost=total * (1 - busy / available),
        coverage=coverage,
    )


def sample_report(hostile: bool = True) -> Report:
    user = HOSTILE_USER if hostile else "carol"
    host_b = HOSTILE_HOST if hostile else "gpu-b"
    partition = HOSTILE_PARTITION if hostile else "long"
    job = HOSTILE_JOB if hostile else "slurm:4711"
    window = iso_week("2026-W48", "Europe/Berlin")
    fleet = cost_row("fleet", "fleet", 8, 0.64, 1.85)
    rows = [
        cost_row("host", "gpu-a", 4, 0.81, 2.10),
        cost_row("host", host_b, 4, 0.47, 1.60),
        cost_row("model", "NVIDIA H200", 4, 0.81, 2.10),
        cost_row("model", "NVIDIA H100 80GB HBM3", 4, 0.47, 1.60),
        cost_row("gpu", "gpu-a/0", 1, 0.88, 2.10),
        cost_row("gpu", "gpu-a/1", 1, 0.74, 2.10),
        cost_row("gpu", f"{host_b}/0", 1, 0.52, 1.60),
        cost_row("gpu", f"{host_b}/1", 1, 0.41, 1.60),
        cost_row("user", "alice", 4, 0.86, 2.10, 0.6),
        cost_row("user", user, 2, 0.55, 1.60, 0.5),
        cost_row("user", "bob", 1, 0.43, 1.60, 0.3),
        cost_row("job", "slurm:4242", 4, 0.89, 2.10, 0.4),
        cost_row("job", job, 2, 0.58, 1.60, 0.25),
        cost_row("job", "slurm:4301", 1, 0.40, 1.60, 0.1),
    ]
    busy = [0.58, 0.71, 0.77, 0.69, 0.74, 0.52, 0.44]
    daily = [DayRow(f"2026-11-{23 + i}", 186.2, 186.2 * u, 186.2 * (0.12 + 0.55 * u)) for i, u in enumerate(busy)]
    queue = [
        QueueRow("gpu", "exact", 212, 384.0, 95.0, 1_520.0, 9_840.0, False, 61.5),
        QueueRow(partition, "histogram", 37, 2_710.0, 1_800.0, 10_800.0, 21_600.0, True, None),
    ]
    failures = [FailureRow("gpu", 171, 14, 19, 3, 2, 4, 38.2), FailureRow(partition, 28, 2, 5, 1, 0, 0, None)]
    benchmarks = [
        BenchRow("allreduce_busbw_bytes_per_second", 2, 368e9, 371e9, 368 / 371 - 1, False),
        BenchRow("allreduce_busbw_bytes_per_second", 4, 352e9, 349e9, 352 / 349 - 1, False),
        BenchRow("allreduce_busbw_bytes_per_second", 8, 291e9, 347e9, 291 / 347 - 1, True),
        *(BenchRow("train_speedup", n, s, None, None, False) for n, s in zip(SIZES, SPEEDUP, strict=True)),
        *(BenchRow("train_efficiency", n, s / n, None, None, False) for n, s in zip(SIZES, SPEEDUP, strict=True)),
    ]
    verdicts = [
        VerdictRow(2, 1.94, 0.97, 0.41, 0.42, 1 / 0.97 - 1, "worth it: 3 % extra cost"),
        VerdictRow(4, 3.71, 0.93, 0.41, 0.44, 1 / 0.93 - 1, "worth it: 8 % extra cost"),
        VerdictRow(8, 6.62, 0.83, 0.41, 0.49, 1 / 0.83 - 1, "costly: 21 % extra per sample"),
    ]
    rent = [
        RentRow("NVIDIA H200", 2.10, 0.13, 4.50, 0.48, 0.81, "owning is cheaper"),
        RentRow("NVIDIA H100 80GB HBM3", 1.60, 0.11, None, None, 0.47, "no cloud price configured"),
    ]
    deltas = [
        Delta("total_cost", fleet.total_cost, 2_701.34, fleet.total_cost / 2_701.34 - 1),
        Delta("utilization", 0.64, 0.58, 0.64 / 0.58 - 1),
        Delta("cost_per_useful_gpu_hour", fleet.cost_per_useful_gpu_hour, 3.41, None),
        Delta("energy_kwh", fleet.energy_kwh, None, None),
    ]
    return Report(
        week=window.label,
        start=window.start,
        end=window.end,
        timezone=window.timezone,
        generated_at=window.end + 6 * 3600,
        currency="USD",
        useful_measure="busy",
        source="prometheus",
        approximations=[f"queue waits in {partition} estimated from histogram buckets"],
        example_prices=True,
        complete=False,
        incomplete_reasons=list(REASONS),
        coverage=fleet.coverage,
        fleet=fleet,
        rows=rows,
        daily=daily,
        queue=queue,
        failures=failures,
        benchmarks=benchmarks,
        multi_gpu=verdicts,
        rent_vs_buy=rent,
        deltas=deltas,
        notes=["prices from the example rule", HOSTILE_NOTE if hostile else "no notes"],
        prices=[PriceRow(host, "NVIDIA H200", "owned", 4, 1.14, False, True) for host in ("gpu-a", HOSTILE_HOST)],
        idle_holders=[IdleRow(user, job, partition, 2, 6.4, 7.30), IdleRow("bob", "slurm:4301", "", 1, 1.5, 1.71)],
        stalled_jobs=[StalledRow(user, job, partition, 2, 3.5, 3.99)],
    )
