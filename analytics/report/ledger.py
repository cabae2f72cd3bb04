"""The ledger's arithmetic: one GPU's (or job's) figures, their sums into a cost row, and
chargeback on one GPU (each job charged its share, the jobs together never more than the GPU,
the rest unallocated). ``analytics.report.build`` applies it to a window's GPUs and jobs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from analytics.cost import JOULES_PER_KWH
from analytics.report.model import CostRow
from analytics.report.useful import measure, useful_seconds
from domain.week import JobWeek


def ratio(a: float | None, b: float) -> float | None:
    return None if a is None or b <= 0 else a / b


def sum_known(values: Iterable[float | None]) -> float | None:
    vs = list(values)
    return None if all(v is None for v in vs) else sum(v or 0.0 for v in vs)


@dataclass(slots=True)  # not frozen: made 200,000 times a report at 10,000 GPUs, 3x faster; never changed once made
class Fig:
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
    stalled_s: float | None = None
    stalled_cost: float = 0.0  # the rate x the stalled hours (part of idle_cost: stalled is not useful)
    co2e_kg: float | None = None  # energy x PUE x grid intensity; None: no intensity or no energy
    use_sm: bool = False  # its useful seconds are SM-active ones (else busy less stalled)
    busy_measure: str = ""  # what its busy time counts (GpuWeek.busy_measure): "" utilisation
    energy_measure: str = ""  # where its energy comes from (GpuWeek.energy_measure): "" the counter


def plus(total: float | None, v: float | None) -> float | None:
    """``total`` + ``v`` where a figure may be unknown (None): unknown only while every part is."""
    if v is None:
        return total
    return v if total is None else total + v


class Acc:
    """Adds GPUs (or jobs) up into one CostRow. A figure some parts lack (None) is the sum of the
    parts that have it, None where none has it (``sum_known``)."""

    __slots__ = (
        *("gpus", "available", "sampled", "busy", "useful", "sm", "alloc", "idle", "energy", "stalled", "co2e"),
        *("hardware", "energy_cost", "idle_cost", "stalled_cost", "uuids", "measured", "parts"),
        *("busy_measures", "energy_measures"),
    )  # 1.3 M additions into 120,000 rows at 10,000 GPUs

    def __init__(self) -> None:
        self.gpus = 0
        self.available = self.sampled = self.busy = self.useful = 0.0
        self.sm: float | None = None
        self.alloc: float | None = None
        self.idle: float | None = None
        self.energy: float | None = None
        self.stalled: float | None = None
        self.co2e: float | None = None
        self.hardware = self.energy_cost = self.idle_cost = self.stalled_cost = 0.0
        self.uuids: set[str] = set()
        self.measured = [0.0, 0.0]  # sampled seconds whose useful seconds are SM-active, busy
        self.parts = [0, 0]  # figures counted each way (for a row without sampled time)
        self.busy_measures: set[str] = set()
        self.energy_measures: set[str] = set()

    def add(self, f: Fig) -> None:
        """Add one GPU's (or job's) figures (``plus`` written out: the hottest loop of a report)."""
        self.gpus += f.gpus
        if f.uuids:
            self.uuids |= f.uuids
        self.available += f.available_s
        self.sampled += f.sampled_s
        self.busy += f.busy_s
        self.useful += f.useful_s
        if f.sm_s is not None:
            self.sm = f.sm_s if self.sm is None else self.sm + f.sm_s
        if f.alloc_s is not None:
            self.alloc = f.alloc_s if self.alloc is None else self.alloc + f.alloc_s
        if f.idle_s is not None:
            self.idle = f.idle_s if self.idle is None else self.idle + f.idle_s
        if f.energy_j is not None:
            self.energy = f.energy_j if self.energy is None else self.energy + f.energy_j
        if f.stalled_s is not None:
            self.stalled = f.stalled_s if self.stalled is None else self.stalled + f.stalled_s
        if f.co2e_kg is not None:
            self.co2e = f.co2e_kg if self.co2e is None else self.co2e + f.co2e_kg
        self.hardware += f.hardware
        self.energy_cost += f.energy_cost
        self.idle_cost += f.idle_cost
        self.stalled_cost += f.stalled_cost
        way = 0 if f.use_sm else 1
        self.measured[way] += f.sampled_s
        self.parts[way] += 1
        self.busy_measures.add(f.busy_measure)
        self.energy_measures.add(f.energy_measure)

    def merge(self, o: Acc) -> None:
        """Add another row's sums: the same as adding each of its parts here."""
        self.gpus += o.gpus
        self.uuids |= o.uuids
        self.available += o.available
        self.sampled += o.sampled
        self.busy += o.busy
        self.useful += o.useful
        self.sm = plus(self.sm, o.sm)
        self.alloc = plus(self.alloc, o.alloc)
        self.idle = plus(self.idle, o.idle)
        self.energy = plus(self.energy, o.energy)
        self.stalled = plus(self.stalled, o.stalled)
        self.co2e = plus(self.co2e, o.co2e)
        self.hardware += o.hardware
        self.energy_cost += o.energy_cost
        self.idle_cost += o.idle_cost
        self.stalled_cost += o.stalled_cost
        self.measured = [a + b for a, b in zip(self.measured, o.measured, strict=True)]
        self.parts = [a + b for a, b in zip(self.parts, o.parts, strict=True)]
        self.busy_measures |= o.busy_measures
        self.energy_measures |= o.energy_measures

    def row(self, group: str, key: str, min_useful_h: float = 0.0) -> CostRow:
        h = 3600.0
        useful_h = self.useful / h
        sm, energy, stalled = self.sm, self.energy, self.stalled
        total = self.hardware + self.energy_cost
        useful_measure, sm_share = measure(*self.measured, *self.parts)
        return CostRow(
            group=group,
            key=key,
            gpus=self.gpus + len(self.uuids),
            available_gpu_hours=self.available / h,
            sampled_gpu_hours=self.sampled / h,
            busy_gpu_hours=self.busy / h,
            sm_active_gpu_hours=None if sm is None else sm / h,
            useful_gpu_hours=self.useful / h,
            utilization=ratio(self.busy, self.sampled),
            sm_activity=ratio(sm, self.sampled),
            allocated_gpu_hours=None if self.alloc is None else self.alloc / h,
            allocated_idle_gpu_hours=None if self.idle is None else self.idle / h,
            energy_kwh=None if energy is None else energy / JOULES_PER_KWH,
            energy_cost=self.energy_cost,
            hardware_cost=self.hardware,
            total_cost=total,
            cost_per_useful_gpu_hour=total / useful_h if useful_h > 0 and useful_h >= min_useful_h else None,
            idle_cost=self.idle_cost,
            coverage=self.sampled / self.available if self.available > 0 else 0.0,
            stalled_gpu_hours=None if stalled is None else stalled / h,
            co2e_kg=self.co2e,
            useful_measure=useful_measure,
            useful_sm_share=sm_share,
            busy_measure=busy_measure(self.busy_measures),
            energy_measure=energy_measure(self.energy_measures),
        )


UTILISATION, MIXED_BUSY = "utilization", "mixed"


def busy_measure(measures: set[str]) -> str:
    """A row's busy measure from its parts': ``utilization`` (NVML's or DCGM's utilisation, "" in a
    part), ``gr_engine_active`` (MIG GPUs' instances, dcgm-exporter's), ``mig_sm_active`` (MIG GPUs'
    instances' SM activity, gpuledger's exporter), or ``mixed``."""
    named = {m or UTILISATION for m in measures} or {UTILISATION}
    return named.pop() if len(named) == 1 else MIXED_BUSY


COUNTER, MIXED_ENERGY = "counter", "mixed"


def energy_measure(measures: set[str]) -> str:
    """A row's energy measure from its parts': ``counter`` (an energy counter, "" in a part),
    ``power`` (integrated from power samples), or ``mixed``."""
    named = {m or COUNTER for m in measures} or {COUNTER}
    return named.pop() if len(named) == 1 else MIXED_ENERGY


def scale_to(total: float, cap: float | None) -> float:
    """The factor that brings ``total`` down to ``cap`` (1 where it is within it)."""
    if cap is None or total <= cap or total <= 0:
        return 1.0
    return max(0.0, cap) / total


def charge(
    jobs: list[JobWeek],
    gpu: Fig | None,
    rate: float,
    per_joule: float,
    co2e_per_joule: float | None = None,
) -> list[Fig]:
    """The jobs on one GPU, charged: each its charged time (or held time) at the GPU's rate, its
    energy at the GPU's price, and the idle cost of its charged time that was not useful; in each
    column the jobs together at most what the GPU has (one factor per column, the same for every
    job on the GPU, where a source's figures overshoot: held times that overlap, counters read
    at slightly different times). Emissions follow energy: each job its energy x the GPU's kg
    CO2e per joule (None where the GPU's emissions are not known). A job counts SM-active time as
    useful where its GPU does and the source has the job's SM-active time; else busy time."""
    charged = [j.charged_s if j.charged_s is not None else j.sampled_s for j in jobs]
    k_time = scale_to(sum(charged), gpu.sampled_s if gpu else None)
    time = [c * k_time for c in charged]
    k_busy = scale_to(sum(j.busy_s for j in jobs), gpu.busy_s if gpu else None)
    busy = [min(j.busy_s * k_busy, t) for j, t in zip(jobs, time, strict=True)]
    k_stall = scale_to(sum(j.stalled_s or 0.0 for j in jobs), gpu.stalled_s if gpu else None)
    stalled = [None if j.stalled_s is None else min(j.stalled_s * k_stall, b) for j, b in zip(jobs, busy, strict=True)]
    k_sm = scale_to(sum(j.sm_active_s or 0.0 for j in jobs), gpu.sm_s if gpu else None)
    sm = [None if j.sm_active_s is None else min(j.sm_active_s * k_sm, t) for j, t in zip(jobs, time, strict=True)]
    use_sm = [gpu is not None and gpu.use_sm and s is not None for s in sm]
    useful = [useful_seconds(b, s, st, u) for b, s, st, u in zip(busy, sm, stalled, use_sm, strict=True)]
    k_useful = scale_to(sum(useful), gpu.useful_s if gpu else None)
    useful = [u * k_useful for u in useful]
    k_energy = scale_to(sum(j.energy_j for j in jobs), gpu.energy_j if gpu else None)
    energy = [j.energy_j * k_energy for j in jobs]
    idle = [rate * max(0.0, t - u) / 3600 for t, u in zip(time, useful, strict=True)]
    k_idle = scale_to(sum(idle), gpu.idle_cost if gpu else None)
    k_alloc_idle = scale_to(sum(j.allocated_idle_s or 0.0 for j in jobs), gpu.idle_s if gpu else None)
    return [
        Fig(
            gpus=0,
            available_s=t,
            sampled_s=t,
            busy_s=b,
            useful_s=u,
            sm_s=s,
            alloc_s=j.sampled_s,  # held: what the job had, whatever it shared
            idle_s=None if j.allocated_idle_s is None else j.allocated_idle_s * k_alloc_idle,
            energy_j=e,
            hardware=rate * t / 3600,
            energy_cost=e * per_joule,
            idle_cost=i * k_idle,
            uuids=frozenset({j.uuid}),
            stalled_s=st,
            stalled_cost=rate * (st or 0.0) / 3600,
            co2e_kg=None if co2e_per_joule is None else e * co2e_per_joule,
            use_sm=us,
            busy_measure=gpu.busy_measure if gpu else "",
            energy_measure=gpu.energy_measure if gpu else "",
        )
        for j, t, b, u, s, e, i, st, us in zip(jobs, time, busy, useful, sm, energy, idle, stalled, use_sm, strict=True)
    ]


def rest(uuid: str, gpu: Fig, jobs: list[Fig]) -> Fig:
    """What of one GPU no job was charged: the GPU less its jobs, column by column; its useful
    seconds counted as the GPU's are (SM-active or busy)."""

    def less(v: float | None, parts: Iterable[float | None]) -> float | None:
        if v is None:
            return None
        left = v - sum(p or 0.0 for p in parts)
        return 0.0 if abs(left) <= 1e-9 * max(abs(v), 1.0) else left  # float residue is nothing left

    def money(v: float, parts: Iterable[float]) -> float:
        return less(v, parts) or 0.0

    time = less(gpu.available_s, (f.available_s for f in jobs)) or 0.0
    return Fig(
        gpus=0,
        available_s=time,
        sampled_s=less(gpu.sampled_s, (f.sampled_s for f in jobs)) or 0.0,
        busy_s=less(gpu.busy_s, (f.busy_s for f in jobs)) or 0.0,
        useful_s=less(gpu.useful_s, (f.useful_s for f in jobs)) or 0.0,
        sm_s=less(gpu.sm_s, (f.sm_s for f in jobs)),
        alloc_s=None,
        idle_s=None,
        energy_j=less(gpu.energy_j, (f.energy_j for f in jobs)),
        hardware=money(gpu.hardware, (f.hardware for f in jobs)),
        energy_cost=money(gpu.energy_cost, (f.energy_cost for f in jobs)),
        idle_cost=money(gpu.idle_cost, (f.idle_cost for f in jobs)),
        uuids=frozenset({uuid}) if time > 0 else frozenset(),
        stalled_s=less(gpu.stalled_s, (f.stalled_s for f in jobs)),
        co2e_kg=less(gpu.co2e_kg, (f.co2e_kg for f in jobs)),
        use_sm=gpu.use_sm,
        busy_measure=gpu.busy_measure,
        energy_measure=gpu.energy_measure,
    )
