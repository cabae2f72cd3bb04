"""Chargeback on columns: every job row of a window charged on its GPU at once (numpy), and the
sums of the charged rows by job and by groupings' keys.

The rules (docs/cost-model.md): a job row pays its GPU's rate for its charged time (its held time
where the source has no shares) and its energy at the GPU's price; in each column the jobs on one
GPU together never have more than the GPU (one factor per GPU and column, the same for each of its
jobs); what no job was charged is the GPU's ``rest`` (``analytics.report.ledger``). Each step is
one array operation over the ~200,000 job rows of a 10,000-GPU week instead of a Python object per
row and step (issue 25: the build took 5 s of a 20 s report there).

The rows are charged GPU by GPU (the window's GPU order), each GPU's jobs in the window's order;
every sum (per GPU, per job, per key) adds the rows in that order (``np.bincount`` adds its weights
in index order), so the figures are those of adding the rows one at a time. A figure a source did
not measure (None) is NaN here, and a sum of a group none of whose rows measured it is None again
(``Acc``'s rule).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from analytics.cost import JOULES_PER_KWH
from analytics.report.ledger import Acc, Fig, busy_measure, energy_measure, rest
from analytics.report.model import CostRow
from analytics.report.useful import BUSY, MIXED, SM
from domain.jobtable import JobTable
from domain.week import JobAttrs, JobWeek

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]
K = TypeVar("K", bound=Hashable)

# the columns of a charged job row (its Fig's figures): summed, and those a source may lack (NaN
# where it does, None in a sum of none); alloc: the held seconds, whatever was shared
SUMMED = ("time", "busy", "useful", "hardware", "energy_cost", "idle_cost", "stalled_cost", "energy")
KNOWN = ("sm", "alloc", "idle", "stalled", "co2e")


@dataclass(frozen=True)
class Charged:
    """The window's job rows charged: ``jobs`` as the window has them, ``order`` the positions of
    those on GPUs with figures in charging order (every column below is in that order)."""

    jobs: JobTable
    order: Ints
    uuids: list[str]  # the GPUs charged (``gpu`` indexes them)
    gpu: Ints  # each charged row's GPU
    cols: dict[str, Floats]  # SUMMED and KNOWN
    use_sm: npt.NDArray[np.bool_]  # the row's useful seconds are SM-active ones
    busy_measure: list[str]  # each GPU's (GpuWeek.busy_measure)
    energy_measure: list[str]
    unallocated: Acc  # each GPU's rest: what no job was charged
    orphans: list[JobWeek]  # rows on GPUs the window has no figures for (not charged)

    def row(self, at: int) -> JobWeek:
        """The charged row at position ``at`` of the charging order."""
        return self.jobs[int(self.order[at])]


def _scale(total: Floats, cap: Floats) -> Floats:
    """``cap / total`` per GPU where the total is over its cap (``ledger``'s rule: the jobs on one
    GPU never have more than the GPU), else 1 (also without a cap: NaN)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # where it is not taken
        k = np.maximum(cap, 0.0) / total
    return np.asarray(np.where(np.isnan(cap) | (total <= cap) | (total <= 0), 1.0, k), dtype=np.float64)


def charge_all(
    jobs: Sequence[JobWeek],
    gpus: Mapping[str, Fig],
    rate: Mapping[str, float],
    per_joule: Mapping[str, float],
    co2e_per_joule: Mapping[str, float | None],
) -> Charged:
    """Every job row on a GPU of ``gpus`` charged: its charged time (held time without shares) at
    the GPU's ``rate``, its energy at the GPU's price and emissions, the idle cost of its charged
    time that was not useful; SM-active time counted as useful where its GPU counts it and the
    source has the job's; each column of a GPU's jobs scaled down to the GPU's figure where they
    would exceed it. Each GPU's ``rest`` is added into ``unallocated``."""
    uuids = list(gpus)
    index = {u: i for i, u in enumerate(uuids)}
    n = len(uuids)
    table = JobTable.of(jobs)  # None is NaN in its columns
    at = np.array([index.get(u, -1) for u in table.texts["uuid"]], dtype=np.intp)
    order = np.flatnonzero(at >= 0)
    order = order[np.argsort(at[order], kind="stable")]  # GPU by GPU, each GPU's in the window's order
    g = at[order]
    figs = [gpus[u] for u in uuids]

    def col(name: str) -> Floats:
        return table.numbers[name][order]

    def per_gpu(get: Callable[[Fig], float | None]) -> Floats:
        return np.array([get(f) for f in figs], dtype=np.float64)

    def total(x: Floats) -> Floats:  # each GPU's sum of its rows (a None counted as 0)
        return _sums(g, np.nan_to_num(x, nan=0.0), n)

    r = np.array([rate[u] for u in uuids], dtype=np.float64)[g]
    held = col("sampled_s")
    charged = np.where(np.isnan(shares := col("charged_s")), held, shares)
    t = charged * _scale(total(charged), per_gpu(lambda f: f.sampled_s))[g]
    busy_s = col("busy_s")
    busy = np.minimum(busy_s * _scale(total(busy_s), per_gpu(lambda f: f.busy_s))[g], t)
    stalled_s = col("stalled_s")
    stalled = np.minimum(stalled_s * _scale(total(stalled_s), per_gpu(lambda f: f.stalled_s))[g], busy)
    sm_s = col("sm_active_s")
    sm = np.minimum(sm_s * _scale(total(sm_s), per_gpu(lambda f: f.sm_s))[g], t)  # NaN stays NaN
    use_sm = np.array([f.use_sm for f in figs], dtype=np.bool_)[g] & ~np.isnan(sm)
    useful = np.where(use_sm, sm, np.maximum(0.0, busy - np.nan_to_num(stalled, nan=0.0)))
    useful = useful * _scale(total(useful), per_gpu(lambda f: f.useful_s))[g]
    energy_j = col("energy_j")
    energy = energy_j * _scale(total(energy_j), per_gpu(lambda f: f.energy_j))[g]
    idle = r * np.maximum(0.0, t - useful) / 3600
    idle_cost = idle * _scale(total(idle), per_gpu(lambda f: f.idle_cost))[g]
    alloc_idle = col("allocated_idle_s")
    idle_s = alloc_idle * _scale(total(alloc_idle), per_gpu(lambda f: f.idle_s))[g]
    co2e = np.array([co2e_per_joule[u] for u in uuids], dtype=np.float64)[g]
    cols = {
        "time": t,
        "busy": busy,
        "useful": useful,
        "hardware": r * t / 3600,
        "energy_cost": energy * np.array([per_joule[u] for u in uuids], dtype=np.float64)[g],
        "idle_cost": idle_cost,
        "stalled_cost": r * np.nan_to_num(stalled, nan=0.0) / 3600,
        "energy": energy,
        "sm": sm,
        "alloc": held,
        "idle": idle_s,
        "stalled": stalled,
        "co2e": energy * co2e,
    }
    unallocated = Acc()
    sums = {name: total(cols[name]).tolist() for name in (*SUMMED, "sm", "stalled", "co2e")}
    for i, (u, f) in enumerate(zip(uuids, figs, strict=True)):
        unallocated.add(rest(u, f, {name: s[i] for name, s in sums.items()}))
    orphans = [table[i] for i in np.flatnonzero(at < 0).tolist()]
    busy_m, energy_m = [f.busy_measure for f in figs], [f.energy_measure for f in figs]
    return Charged(table, order, uuids, g, cols, use_sm, busy_m, energy_m, unallocated, orphans)


def keyed(ch: Charged, key: Callable[[JobAttrs], K]) -> tuple[list[K], Ints]:
    """The distinct keys of the charged rows in the order they first come in the charging order,
    and each charged row's (an index into them). ``key`` reads the rows' views (``JobView``)."""
    first: dict[K, int] = {}
    codes = np.array([first.setdefault(key(j), len(first)) for j in ch.jobs.views()], dtype=np.intp)[ch.order]
    present, pos = np.unique(codes, return_index=True)
    present = present[np.argsort(pos, kind="stable")]  # by first place in the charging order
    renumber = np.zeros(len(first), dtype=np.intp)
    renumber[present] = np.arange(len(present), dtype=np.intp)
    keys = list(first)
    return [keys[c] for c in present.tolist()], renumber[codes]


@dataclass(frozen=True)
class Sums:
    """The charged rows added up by group (``summed``): per figure, one value per group, as if
    each row's ``Fig`` had been added to its group's ``Acc`` in turn."""

    summed: dict[str, Floats]  # SUMMED
    known: dict[str, Floats]  # KNOWN: NaN where no row of the group has it
    measured: tuple[Floats, Floats, Ints, Ints]  # sampled seconds and rows counted by SM activity, by busy time
    gpus: list[int]  # how many distinct GPUs the group's rows are on
    busy_measures: list[frozenset[str]]  # the measures of its rows' GPUs
    energy_measures: list[frozenset[str]]
    uuids: list[frozenset[str]] | None  # the distinct GPUs themselves (``summed(..., uuids=True)``)

    def acc(self, i: int) -> Acc:
        """Group ``i``'s sums as an ``Acc`` (to merge into other rows)."""
        s = {name: float(x[i]) for name, x in self.summed.items()}
        k = {name: None if np.isnan(x[i]) else float(x[i]) for name, x in self.known.items()}
        a = Acc()
        a.available = a.sampled = s["time"]
        a.busy, a.useful, a.energy = s["busy"], s["useful"], s["energy"]
        a.hardware, a.energy_cost, a.idle_cost = s["hardware"], s["energy_cost"], s["idle_cost"]
        a.stalled_cost = s["stalled_cost"]
        a.sm, a.alloc, a.idle, a.stalled, a.co2e = k["sm"], k["alloc"], k["idle"], k["stalled"], k["co2e"]
        a.uuids = set(self.uuids[i]) if self.uuids is not None else set()
        sm_s, busy_s, sm_n, busy_n = (x[i].item() for x in self.measured)
        a.measured, a.parts = [sm_s, busy_s], [sm_n, busy_n]
        a.busy_measures, a.energy_measures = set(self.busy_measures[i]), set(self.energy_measures[i])
        return a

    def rows(self, group: str, keys: Sequence[str], at: Sequence[int], min_useful_h: float) -> list[CostRow]:
        """The cost rows of groups ``at`` (keyed ``keys[i]``), each as ``ledger.cost_row`` makes it
        from the same sums, column by column (tests/analytics/test_fast_values.py)."""
        ix = np.asarray(at, dtype=np.intp)
        s = {name: x[ix] for name, x in self.summed.items()}
        k = {name: x[ix] for name, x in self.known.items()}
        h = 3600.0
        sampled, busy, useful, sm = s["time"], s["busy"], s["useful"], k["sm"]
        useful_h = useful / h
        total = s["hardware"] + s["energy_cost"]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as Python: inf
            per_useful = np.where((useful_h > 0) & (useful_h >= min_useful_h), total / useful_h, np.nan)
            util = np.where(sampled > 0, busy / sampled, np.nan)
            sm_activity = np.where(sampled > 0, sm / sampled, np.nan)
        coverage = np.where(sampled > 0, 1.0, 0.0)  # a charged row's available seconds are its sampled ones
        sm_s, busy_s, sm_n, busy_n = self.measured
        names, share = _measure(sm_s[ix], busy_s[ix], sm_n[ix], busy_n[ix])
        label: dict[frozenset[str], str] = {}
        busy_m = [label.get(m) or label.setdefault(m, busy_measure(m)) for m in map(self.busy_measures.__getitem__, at)]
        label = {}
        energy_m = [
            label.get(m) or label.setdefault(m, energy_measure(m)) for m in map(self.energy_measures.__getitem__, at)
        ]
        n = len(ix)
        return list(
            map(
                CostRow,
                [group] * n,
                keys,
                [self.gpus[i] for i in ix.tolist()],
                (sampled / h).tolist(),
                (sampled / h).tolist(),
                (busy / h).tolist(),
                _opt(sm / h),
                (useful_h).tolist(),
                _opt(util),
                _opt(sm_activity),
                _opt(k["alloc"] / h),
                _opt(k["idle"] / h),
                _opt(s["energy"] / JOULES_PER_KWH),
                s["energy_cost"].tolist(),
                s["hardware"].tolist(),
                total.tolist(),
                _opt(per_useful),
                s["idle_cost"].tolist(),
                coverage.tolist(),
                _opt(k["stalled"] / h),
                _opt(k["co2e"]),
                names,
                share.tolist(),
                busy_m,
                energy_m,
            )
        )


def _sums(at: Ints, x: Floats, n: int) -> Floats:
    """The values added up by group (``at``: each value's, 0..n-1), each group's in their order."""
    return np.bincount(at, weights=x, minlength=n).astype(np.float64)


def _opt(x: Floats) -> list[float | None]:
    """The values, None where NaN (not measured)."""
    return [None if v != v else v for v in x.tolist()]


def _labels(sets: list[frozenset[str]], at: Sequence[int], name: Callable[[frozenset[str]], str]) -> list[str]:
    """``name`` of each group's set of measures (the sets are few: each named once)."""
    named: dict[frozenset[str], str] = {}
    return [named.get(m) or named.setdefault(m, name(m)) for m in map(sets.__getitem__, at)]


def _measure(sm_s: Floats, busy_s: Floats, sm_n: Ints, busy_n: Ints) -> tuple[list[str], Floats]:
    """``useful.measure`` of each group: its measure's name and its SM-active share."""
    total, parts = sm_s + busy_s, sm_n + busy_n
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as Python: inf
        share = np.where(total > 0, sm_s / total, np.where(parts > 0, sm_n / parts, 0.0))
    share = np.minimum(1.0, np.maximum(0.0, share))
    names = np.where(share >= 1.0, SM, np.where(share <= 0.0, BUSY, MIXED))
    return names.tolist(), share


def summed(ch: Charged, at: Ints, n: int, *, uuids: bool = False) -> Sums:
    """The charged rows added up by ``at`` (each row's group, 0..n-1); ``uuids``: keep each
    group's GPUs, not only their count."""

    def by(x: Floats) -> Floats:
        return _sums(at, x, n)

    known = {}
    for name in KNOWN:
        x = ch.cols[name]
        seen = np.bincount(at, weights=~np.isnan(x), minlength=n) > 0
        known[name] = np.where(seen, by(np.nan_to_num(x, nan=0.0)), np.nan)
    t, way = ch.cols["time"], ch.use_sm
    parts_sm = np.bincount(at, weights=way, minlength=n).astype(np.intp)
    parts_busy = np.bincount(at, minlength=n) - parts_sm
    measured = (by(np.where(way, t, 0.0)), by(np.where(way, 0.0, t)), parts_sm, parts_busy)
    width = max(1, len(ch.uuids))
    group_of, gpu_of = np.divmod(np.unique(at * width + ch.gpu), width)  # each (group, GPU) once
    gpus = np.bincount(group_of, minlength=n).tolist()
    sets = None
    if uuids:
        held: list[set[str]] = [set() for _ in range(n)]
        for i, g in zip(group_of.tolist(), gpu_of.tolist(), strict=True):
            held[i].add(ch.uuids[g])
        sets = [frozenset(x) for x in held]
    return Sums(
        {name: by(ch.cols[name]) for name in SUMMED},
        known,
        measured,
        gpus,
        _measures(ch.busy_measure, ch.gpu, at, n),
        _measures(ch.energy_measure, ch.gpu, at, n),
        sets,
    )


def _measures(of_gpu: list[str], gpu: Ints, at: Ints, n: int) -> list[frozenset[str]]:
    """Each group's set of its rows' GPUs' measures (the sets are few: each made once)."""
    distinct = sorted(set(of_gpu))
    if len(distinct) <= 1:
        return [frozenset(distinct)] * n
    code = np.array([distinct.index(m) for m in of_gpu], dtype=np.intp)[gpu]
    mask = np.zeros(n, dtype=np.int64)  # bit c: a row of the group has measure c
    for c in range(len(distinct)):
        mask |= (np.bincount(at[code == c], minlength=n) > 0).astype(np.int64) << c
    sets = {m: frozenset(x for c, x in enumerate(distinct) if m >> c & 1) for m in np.unique(mask).tolist()}
    return list(map(sets.__getitem__, mask.tolist()))
