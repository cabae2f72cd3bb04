"""The exact figures a fleet's scrapes hold over a window (start, end], from the physical model.

A scrape stands for the interval before it. Per device-instance scrape the *busy fraction* is
util/100 on a whole GPU and GR under MIG. A scrape is *stalled* when busy >= ``util_above`` while
SM < ``sm_below``, tensor < ``tensor_below`` and DRAM < ``dram_below`` (None, not measured, where
the instance lacks one of those fields); a run of consecutive stalled scrapes of an instance (a
missing scrape breaks it) counts only if it lasts ``min_seconds`` (scrapes x interval), judged
over all scrapes, so a run crossing the window's edge is judged whole.

Per GPU: sampled = its distinct scrape times x interval; busy, SM-active and stalled time = per
scrape the instance's figure x interval x its share, summed; energy = the counter's growth (after
a reset, the reading itself: the growth since the reload). Per holder of a device-instance (k
holders listed at a scrape): held = interval x share; charged, busy, SM, stalled and energy = the
instance's figure x share / k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from analytics.synthetic_dcgm.labels import TARGETS
from analytics.synthetic_dcgm.model import Instance, Node, Scrape, SlurmJob
from domain.jobs import JobKey


@dataclass(frozen=True, slots=True)
class StallRule:
    util_above: float = 0.90
    sm_below: float = 0.25
    tensor_below: float = 0.05
    dram_below: float = 0.05
    min_seconds: float = 300.0

    def stalled(self, s: Scrape) -> bool | None:
        if s.sm is None or s.tensor is None or s.dram is None:
            return None
        return (
            s.busy >= self.util_above
            and s.sm < self.sm_below
            and s.tensor < self.tensor_below
            and s.dram < self.dram_below
        )


@dataclass(frozen=True, slots=True)
class GpuFigures:
    sampled_s: float
    busy_s: float
    sm_active_s: float | None  # None: the node writes no SM_ACTIVE
    stalled_s: float | None  # None: not measured
    energy_j: float
    host: str  # the node
    cluster: str
    model: str
    mig: bool  # in MIG mode at any time

    @property
    def util(self) -> float:
        return self.busy_s / self.sampled_s if self.sampled_s else 0.0


@dataclass(frozen=True, slots=True)
class HolderFigures:
    held_s: float  # interval x share over its listed scrapes
    charged_s: float  # interval x share / k
    busy_s: float
    sm_active_s: float | None
    stalled_s: float | None
    energy_j: float


@dataclass(frozen=True)
class Truth:
    gpu: dict[str, GpuFigures]  # uuid -> figures
    holders: dict[tuple[str, JobKey], HolderFigures]  # (uuid, pod or Slurm job) -> figures
    slurm_jobs: dict[str, SlurmJob]  # job id -> the scheduler's record (user, account, partition, qos)
    exporter_pods: frozenset[tuple[str, str]]  # (namespace, pod) of every dcgm-exporter pod
    history_start: float  # the fleet's first scrape in the window

    @property
    def host(self) -> dict[str, str]:
        return {u: f.host for u, f in self.gpu.items()}


def _counted(ss: list[Scrape], interval: float, rule: StallRule) -> set[float]:
    """Times of an instance's scrapes that are stalled and in a run of at least min_seconds."""
    out: set[float] = set()
    run: list[float] = []

    def close() -> None:
        if len(run) * interval >= rule.min_seconds - 1e-9:
            out.update(run)
        run.clear()

    for s in ss:
        if run and abs(s.t - run[-1] - interval) > 1e-6:
            close()
        if rule.stalled(s):
            run.append(s.t)
        else:
            close()
    close()
    return out


def _growth(ss: Iterable[Scrape]) -> dict[float, float]:
    """Scrape time -> the energy counter's growth (mJ) since the GPU's previous scrape."""
    out: dict[float, float] = {}
    prev: int | None = None
    for s in ss:
        if s.t in out:
            continue
        e = s.energy_mj
        out[s.t] = 0.0 if prev is None else float(e - prev if e >= prev else e)
        prev = e
    return out


@dataclass
class _Acc:
    held: float = 0.0
    charged: float = 0.0
    busy: float = 0.0
    sm: float | None = None
    stalled: float | None = None
    energy: float = 0.0


def compute(
    nodes: Iterable[Node],
    scrapes: Mapping[str, list[Scrape]],
    interval: float,
    start: float,
    end: float,
    rule: StallRule,
    cluster: str = "",
) -> Truth:
    gpus: dict[str, GpuFigures] = {}
    holders: dict[tuple[str, JobKey], _Acc] = defaultdict(_Acc)
    slurm: dict[str, SlurmJob] = {}
    exporter_pods: set[tuple[str, str]] = set()
    first = float("inf")
    i = interval
    for node in nodes:
        if node.kind != "slurm":
            exporter_pods |= {(TARGETS[node.kind].namespace, e.pod) for e in node.exporters}
        for g in node.gpus:
            ss = scrapes.get(g.uuid, [])
            inside = [s for s in ss if start < s.t <= end]
            if not inside:
                continue
            first = min(first, inside[0].t)
            by_inst: dict[Instance, list[Scrape]] = defaultdict(list)
            for s in ss:
                by_inst[s.instance].append(s)
            counted = {inst: _counted(xs, i, rule) for inst, xs in by_inst.items()}
            growth = _growth(ss)
            has_sm = any(s.sm is not None for s in ss)
            measured = any(rule.stalled(s) is not None for s in ss)
            busy = sm = stalled = 0.0
            for s in inside:
                share = s.instance.share
                b = s.busy * i * share
                st = b if s.t in counted[s.instance] else 0.0
                busy += b
                sm += (s.sm or 0.0) * i * share
                stalled += st
                k = len(s.holders)
                for h in s.holders:
                    if isinstance(h, SlurmJob):
                        slurm[h.job_id] = h
                    a = holders[g.uuid, h.key()]
                    a.held += i * share
                    a.charged += i * share / k
                    a.busy += b / k
                    a.energy += growth[s.t] * share / k
                    if s.sm is not None:
                        a.sm = (a.sm or 0.0) + s.sm * i * share / k
                    if rule.stalled(s) is not None:
                        a.stalled = (a.stalled or 0.0) + st / k
            times = sorted({s.t for s in inside})
            gpus[g.uuid] = GpuFigures(
                sampled_s=len(times) * i,
                busy_s=busy,
                sm_active_s=sm if has_sm else None,
                stalled_s=stalled if measured else None,
                energy_j=sum(growth[t] for t in times) / 1000,
                host=node.name,
                cluster=cluster,
                model=g.model,
                mig=g.ever_mig,
            )
    figures = {
        k: HolderFigures(a.held, a.charged, a.busy, a.sm, a.stalled, a.energy / 1000) for k, a in holders.items()
    }
    return Truth(gpus, figures, slurm, frozenset(exporter_pods), first)
