"""Adding a window's parts up (``analytics.daycache``): its kept days and the days read between
them give the figures one read of the whole window gives. Every figure is a sum of the parts'; a
figure no part measured stays None; a measure two parts disagree on is "mixed"; a GPU's days are
the parts' in order and its hours are put on the window's hours (``rebin``). Both the GPUs and the
jobs are added up on columns (``analytics.gpucolumns``, ``domain.jobtable``), each sum the one
``math.fsum`` gives, to the bit (tests/analytics/test_gpucolumns.py, test_jobtable.py)."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from analytics.gpucolumns import NUMBERS as GPU_NUMBERS
from analytics.gpucolumns import OPTIONAL as GPU_OPTIONAL
from analytics.gpucolumns import TEXTS as GPU_TEXTS
from analytics.gpucolumns import GpuColumns, none_of
from domain.frozen import construct
from domain.jobs import JobKey
from domain.jobtable import NUMBERS, Floats, JobTable
from domain.week import Day, GpuDay, GpuWeek, JobWeek, Window, job_clusters

MIXED = "mixed"
Parts = Sequence[tuple[Sequence[Day], GpuColumns]]
At = list[npt.NDArray[np.intp]]  # each part's GPUs' places among the window's


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


def merge_gpus(parts: Sequence[tuple[Sequence[Day], Sequence[GpuWeek] | GpuColumns]], w: Window) -> tuple[GpuWeek, ...]:
    """Each GPU's parts added up: a part it is absent from counts nothing (its days zero, its
    hours zero). Its hours are the window's (``rebin``). On columns (``analytics.gpucolumns``)
    where every part's hours lie on the window's whole hours; else GPU by GPU (``merge_rows``):
    the same figures."""
    try:
        cols = [(ds, g if isinstance(g, GpuColumns) else GpuColumns.of(g, len(ds))) for ds, g in parts]
    except ValueError:  # rows of another count of days than their part's
        cols = None
    got = merged(cols, w) if cols is not None else None
    if got is not None:
        return got
    return merge_rows([(ds, g.rows() if isinstance(g, GpuColumns) else g) for ds, g in parts], w)


def merge_rows(parts: Sequence[tuple[Sequence[Day], Sequence[GpuWeek]]], w: Window) -> tuple[GpuWeek, ...]:
    """``merge_gpus`` GPU by GPU, on rows."""
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


def merged(parts: Parts, w: Window) -> tuple[GpuWeek, ...] | None:
    """``analytics.dayparts.merge_gpus`` on columns, the same figures to the bit (each sum a
    ``math.fsum`` of the parts'); None where a part's hours do not lie on the window's whole hours
    (a rolling window's minute: ``rebin`` spreads them, GPU by GPU)."""
    n_hours = math.ceil(w.seconds / 3600.0)
    uuids = sorted(set().union(*(c.texts["uuid"] for _, c in parts)))
    index = {u: i for i, u in enumerate(uuids)}
    n = len(uuids)
    at = [np.array([index[u] for u in c.texts["uuid"]], dtype=np.intp) for _, c in parts]
    by_hour = np.zeros((n, n_hours))
    has_hours = np.zeros(n, dtype=np.bool_)
    for p, (ds, c) in zip(at, parts, strict=True):
        got = c.hours_n >= 0
        if not got.any():
            continue
        rows = c.hour_rows()
        if rows is None:
            return None  # a part's GPUs with hours of different counts
        k = rows.shape[1]
        start, end = ds[0].start, ds[-1].end
        first = (start - w.start) / 3600.0
        if not (first.is_integer() and end - start == 3600.0 * k and 0 <= first and first + k <= n_hours):
            return None
        f = int(first)
        by_hour[p[got], f : f + k] += rows[got]
        has_hours[p[got]] = True
    sums: dict[str, list[float | None]] = {}
    for name in GPU_NUMBERS:
        parts_of = np.zeros((n, len(parts)))  # a part a GPU is absent from adds 0 (so does an unmeasured one)
        known = np.zeros(n, dtype=np.bool_)
        for j, (p, (_, c)) in enumerate(zip(at, parts, strict=True)):
            col = c.numbers[name]
            parts_of[p, j] = np.nan_to_num(col, nan=0.0)
            known[p] |= ~np.isnan(col)
        total: list[float | None] = list(map(math.fsum, parts_of.tolist()))
        if name in GPU_OPTIONAL:
            total = [t if k else None for t, k in zip(total, known.tolist(), strict=True)]
        sums[name] = total
    texts = {name: _last_by_gpu(at, parts, name, n) for name in ("host", "model", "gpu", "cluster")}
    for name in ("busy_measure", "energy_measure"):
        texts[name] = _measures_by_gpu(at, parts, name, n)
    n_days = sum(len(ds) for ds, _ in parts)
    daily = np.zeros((n, n_days, 3))
    daily[:, :, 2] = np.nan  # a day a GPU is absent from: GpuDay(0.0, 0.0, None)
    d0 = 0
    for p, (ds, c) in zip(at, parts, strict=True):
        daily[p, d0 : d0 + len(ds)] = c.daily
        d0 += len(ds)
    days = daily.tolist()
    hours = by_hour.tolist()
    out = []
    for i, uuid in enumerate(uuids):
        values: dict[str, object] = {name: texts[name][i] for name in GPU_TEXTS if name != "uuid"}
        values.update({name: sums[name][i] for name in GPU_NUMBERS})
        values["uuid"] = uuid
        values["daily"] = tuple(GpuDay(s, b, none_of(e)) for s, b, e in days[i])
        values["energy_by_hour"] = tuple(hours[i]) if has_hours[i] else None
        out.append(construct(GpuWeek, values))
    return tuple(out)


def _last_by_gpu(at: At, parts: Parts, name: str, n: int) -> list[str]:
    """Each GPU's last part's non-empty ``name`` (its host, model, index, cluster)."""
    out = [""] * n
    for p, (_, c) in zip(at, parts, strict=True):
        for i, v in zip(p.tolist(), c.texts[name], strict=True):
            if v:
                out[i] = v
    return out


def _measures_by_gpu(at: At, parts: Parts, name: str, n: int) -> list[str]:
    """Each GPU's measure over the parts that sampled it: theirs where they agree, else mixed."""
    seen: list[set[str]] = [set() for _ in range(n)]
    for p, (_, c) in zip(at, parts, strict=True):
        sampled = c.numbers["sampled_s"].tolist()
        for i, m, s in zip(p.tolist(), c.texts[name], sampled, strict=True):
            if s > 0:
                seen[i].add(m)
    return [s.pop() if len(s) == 1 else (MIXED if s else "") for s in seen]


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


def merge_jobs(per_day: Sequence[Sequence[JobWeek]], gpus: Sequence[GpuWeek]) -> JobTable:
    """Each (GPU, job)'s days added up, as columns (``domain.jobtable``): in GPU order, a GPU's jobs
    in the order they first appear; each figure the sum of the days that measured it (None where
    none did), the host the last day's that names one, the rest the first day's; and the job takes
    its GPU's cluster over the window (as ``WeekData`` would). A sum of two days is their
    addition, which is ``math.fsum``'s; one of three or more days is ``math.fsum``'s."""
    t = JobTable.joined([JobTable.of(rows) for rows in per_day])
    uuid = t.texts["uuid"]
    first: dict[tuple[str, JobKey], int] = {}
    group = np.fromiter((first.setdefault(p, len(first)) for p in zip(uuid, t.keys, strict=True)), np.intp, t.n)
    m = len(first)
    lead = np.unique(group, return_index=True)[1]  # each (GPU, job)'s first row
    rank = {u: i for i, u in enumerate(sorted(set(uuid)))}
    order = np.argsort(np.array([rank[uuid[i]] for i in lead.tolist()], dtype=np.intp), kind="stable")
    counts = np.bincount(group, minlength=m)
    numbers: dict[str, Floats] = {}
    texts: dict[str, list[str]] = {}
    if m < t.n:  # some job has rows of several days
        for name in NUMBERS:
            col = t.numbers[name]
            known = ~np.isnan(col)
            sums = np.bincount(group, weights=np.where(known, col, 0.0), minlength=m).astype(np.float64)
            sums[np.bincount(group, weights=known, minlength=m) == 0] = np.nan
            numbers[name] = sums
        _fsums(numbers, t, group, counts)
        host = [t.texts["host"][i] for i in lead.tolist()]
        for i in np.flatnonzero(counts[group] > 1).tolist():  # the last day's non-empty host
            host[group[i]] = t.texts["host"][i] or host[group[i]]
        texts["host"] = host
    out = t.taken(lead[order])
    if numbers or texts:
        out = out.with_(
            texts={k: [v[i] for i in order.tolist()] for k, v in texts.items()},
            numbers={k: v[order] for k, v in numbers.items()},
        )
    return out.in_clusters(job_clusters(gpus))


def _fsums(sums: dict[str, Floats], t: JobTable, group: npt.NDArray[np.intp], counts: npt.NDArray[np.intp]) -> None:
    """The sums of the jobs of three or more rows, made again with ``math.fsum`` (exact to the bit)."""
    many = np.flatnonzero(counts > 2)
    if not len(many):
        return
    rows = np.flatnonzero(np.isin(group, many))
    by_group = rows[np.argsort(group[rows], kind="stable")]
    ends = np.cumsum(counts[many])
    for g, mine in zip(many.tolist(), np.split(by_group, ends[:-1]), strict=True):
        for name in NUMBERS:
            values = t.numbers[name][mine]
            known = values[~np.isnan(values)]
            sums[name][g] = math.fsum(known.tolist()) if len(known) else math.nan
