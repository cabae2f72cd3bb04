"""Adding a window's parts up (``analytics.daycache``): its kept days and the days read between
them give the figures one read of the whole window gives. Every figure is a sum of the parts'; a
figure no part measured stays None; a measure two parts disagree on is "mixed"; a GPU's days are
the parts' in order and its hours are put on the window's hours (``rebin``)."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

from domain.frozen import evolve
from domain.jobs import JobKey
from domain.week import Day, GpuDay, GpuWeek, JobWeek, Window, job_clusters

MIXED = "mixed"


def union(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _optional_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the days that measured it; None where none did (as one read of the window)."""
    got = [v for v in values if v is not None]
    return math.fsum(got) if got else None


def _measure(pairs: Iterable[tuple[float, str]]) -> str:
    """One measure of the days that sampled anything: theirs where they agree, else mixed."""
    seen = {m for sampled, m in pairs if sampled > 0}
    return seen.pop() if len(seen) == 1 else (MIXED if seen else "")


def _last(values: Iterable[str]) -> str:
    """The last day's non-empty label (a GPU's host, model, index, cluster)."""
    out = ""
    for v in values:
        out = v or out
    return out


def merge_gpus(parts: Sequence[tuple[Sequence[Day], Sequence[GpuWeek]]], w: Window) -> tuple[GpuWeek, ...]:
    """Each GPU's parts added up: a part it is absent from counts nothing (its days zero, its
    hours zero). Its hours are the window's (``rebin``)."""
    by_part = [{g.uuid: g for g in gpus} for _, gpus in parts]
    out = []
    for uuid in sorted({u for part in by_part for u in part}):
        mine = [part.get(uuid) for part in by_part]
        present = [g for g in mine if g is not None]
        by_hour: tuple[float, ...] | None = None
        if any(g.energy_by_hour is not None for g in present):
            by_hour = rebin([(ds, g.energy_by_hour if g else None) for (ds, _), g in zip(parts, mine, strict=True)], w)
        out.append(
            GpuWeek(
                uuid=uuid,
                host=_last(g.host for g in present),
                model=_last(g.model for g in present),
                gpu=_last(g.gpu for g in present),
                sampled_s=math.fsum(g.sampled_s for g in present),
                busy_s=math.fsum(g.busy_s for g in present),
                sm_active_s=_optional_sum(g.sm_active_s for g in present),
                allocated_s=_optional_sum(g.allocated_s for g in present),
                allocated_idle_s=_optional_sum(g.allocated_idle_s for g in present),
                energy_j=_optional_sum(g.energy_j for g in present),
                energy_by_hour=by_hour,
                daily=tuple(
                    d
                    for (ds, _), g in zip(parts, mine, strict=True)
                    for d in (g.daily if g is not None else (GpuDay(0.0, 0.0, None),) * len(ds))
                ),
                stalled_s=_optional_sum(g.stalled_s for g in present),
                cluster=_last(g.cluster for g in present),
                busy_measure=_measure((g.sampled_s, g.busy_measure) for g in present),
                energy_measure=_measure((g.sampled_s, g.energy_measure) for g in present),
            )
        )
    return tuple(out)


def rebin(parts: Sequence[tuple[Sequence[Day], Sequence[float] | None]], w: Window) -> tuple[float, ...]:
    """The parts' hours (each part's from its own start, the last one cut at its end) as the
    window's hours (from the window's start, as one read of the window gives them): where they line
    up (a window of whole local days in a zone of whole-hour offsets), the same numbers; where
    not (a rolling window's minute), each part-hour spread over the window's hours it overlaps, in
    proportion. The sum is kept exactly."""
    n = math.ceil(w.seconds / 3600.0)
    out = [0.0] * n
    for ds, hours in parts:
        if not hours:
            continue
        start, end = ds[0].start, ds[-1].end
        first, k = (start - w.start) / 3600.0, len(hours)
        if first.is_integer() and end - start == 3600.0 * k and 0 <= first and first + k <= n:
            f = int(first)  # whole hours on the window's: added as they are, in C (10,000 GPUs x 168 hours)
            out[f : f + k] = map(operator.add, out[f : f + k], hours)
            continue
        for j, joules in enumerate(hours):
            a, b = start + j * 3600.0, min(start + (j + 1) * 3600.0, end)
            if b <= a:  # a part-hour past the part's end: onto its last hour
                a, b = max(start, end - 3600.0), end
            first = int((a - w.start) // 3600.0)
            if (a - w.start) % 3600.0 == 0.0 and b - a == 3600.0 and 0 <= first < n:
                out[first] += joules
                continue
            for i in range(max(first, 0), min(n, math.ceil((b - w.start) / 3600.0))):
                lo, hi = max(a, w.start + i * 3600.0), min(b, w.start + (i + 1) * 3600.0)
                if hi > lo:
                    out[i] += joules * (hi - lo) / (b - a)
    return tuple(out)


def merge_jobs(per_day: Sequence[Sequence[JobWeek]], gpus: Sequence[GpuWeek]) -> tuple[JobWeek, ...]:
    """Each (GPU, job)'s days added up, in GPU order; a job takes its GPU's cluster over the window
    (as ``WeekData`` would). A row of one day is that day's row, as it is."""
    by_gpu: dict[str, dict[JobKey, JobWeek | list[JobWeek]]] = {}  # a row of one day as it is, else its days
    for jobs in per_day:
        for j in jobs:
            if (mine := by_gpu.get(j.uuid)) is None:
                mine = by_gpu[j.uuid] = {}
            if (got := mine.get(j.job)) is None:
                mine[j.job] = j
            elif isinstance(got, list):
                got.append(j)
            else:
                mine[j.job] = [got, j]
    clusters = job_clusters(gpus)
    out = []
    for uuid in sorted(by_gpu):  # 10,000 GPUs sorted, not 200,000 rows
        cluster = clusters.get(uuid, "")
        for got in by_gpu[uuid].values():
            if not isinstance(got, list):
                out.append(got if got.cluster == cluster else evolve(got, cluster=cluster))
            else:
                out.append(_added(got, cluster))
    return tuple(out)


def _added(mine: list[JobWeek], cluster: str) -> JobWeek:
    """One (GPU, job)'s days added up."""
    return evolve(
        mine[0],
        host=_last(j.host for j in mine),
        sampled_s=math.fsum(j.sampled_s for j in mine),
        busy_s=math.fsum(j.busy_s for j in mine),
        energy_j=math.fsum(j.energy_j for j in mine),
        sm_active_s=_optional_sum(j.sm_active_s for j in mine),
        allocated_idle_s=_optional_sum(j.allocated_idle_s for j in mine),
        charged_s=_optional_sum(j.charged_s for j in mine),
        stalled_s=_optional_sum(j.stalled_s for j in mine),
        nvlink_bytes=_optional_sum(j.nvlink_bytes for j in mine),
        pcie_bytes=_optional_sum(j.pcie_bytes for j in mine),
        cluster=cluster,
    )
