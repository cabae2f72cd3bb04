"""MIG instances in the sampler: each instance's exact counters, the whole GPU's busy share, and the
jobs on the instances.

**A slice is a share** (shared/DESIGN.md). An instance is a fraction of its GPU: its compute slices over
the GPU's (``MigLayout.share``: 1/7 for a ``1g.10gb`` of an H100). A job on it holds that fraction, and
every per-job counter scales by it: a job alone on a ``1g.10gb`` is charged 1/7 of each round (the
issue's "1/7 of the GPU's rate"), never more. Slices are the unit because they are what MIG hands out
and what a scheduler asks for (``nvidia.com/mig-1g.10gb``); SMs are not proportional to slices (16 of
the H100's 132 SMs is 12 %, not 14 %: the 7g profile keeps SMs the smaller ones cannot use), so the SM
share is exported as information (``gpuledger_mig_sm_share_ratio``) and charges nothing. Slices in no
instance are unallocated: the instances' shares plus ``MigLayout.unallocated`` make the GPU.

Under MIG NVML has no utilisation, so an instance's busy time is its GPU instance's SM activity (GPM);
stalled time is judged per instance on GPM's graphics activity (``fold_stall``);
the GPU's is the instances' activity weighted by their shares (slices in no instance are idle). A round
counts only when every instance's activity was read (the first read of a new instance only starts GPM's
interval); without GPM (an A100) busy time under MIG is not measured at all: nothing is guessed.

The GPU keeps its identity (its UUID, its counters) whatever its layout; an instance is known by its MIG
UUID, and one that has gone is forgotten (its series end).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import NamedTuple

from domain.jobs import JobKey
from exporter.attribution.kubelet import PodDevice
from exporter.attribution.procfs import Owner
from exporter.attribution.shares import shares
from exporter.readers import GpmActivity, MigLayout, Process
from exporter.sampling import stalls
from exporter.sampling.gpu_state import TrackedGpu
from exporter.snapshot import MigCounters


def busy(layout: MigLayout) -> float | None:
    """The GPU's busy share: each instance's SM activity times its share; None until all are read."""
    if any(i.gpm is None for i in layout.instances):
        return None
    return sum(layout.share(i) * i.gpm.sm for i in layout.instances if i.gpm is not None)


def activity(layout: MigLayout) -> GpmActivity | None:
    """The GPU's activity as the share-weighted sum of its instances' (for its SM, tensor and DRAM
    counters where the parent's own GPM does not answer under MIG); None until all are read."""
    if any(i.gpm is None for i in layout.instances):
        return None
    parts = [(layout.share(i), i.gpm) for i in layout.instances if i.gpm is not None]
    graphics = [(s, g.graphics) for s, g in parts if g.graphics is not None]
    return GpmActivity(
        sm=sum(s * g.sm for s, g in parts),
        tensor=sum(s * g.tensor for s, g in parts),
        dram=sum(s * g.dram for s, g in parts),
        sm_occupancy=sum(s * g.sm_occupancy for s, g in parts),
        graphics=sum(s * v for s, v in graphics) if len(graphics) == len(parts) else None,
    )


def fold(gpu: TrackedGpu, layout: MigLayout | None, dt: float | None, idle_below: float) -> None:
    """Keep the layout, forget instances that have gone, and integrate each instance over ``dt`` (None:
    the round is not covered). Caller holds the sampler lock."""
    gpu.mig = layout
    if layout is None:
        gpu.mig_counters = {}
        return
    gpu.mig_counters = {i.uuid: gpu.mig_counters.get(i.uuid) or MigCounters() for i in layout.instances}
    if dt is None:
        return
    for inst in layout.instances:
        g = inst.gpm
        if g is None:
            continue
        c = gpu.mig_counters[inst.uuid]
        c.sampled_seconds += dt
        c.busy_seconds += g.sm * dt
        c.sm_active_seconds += g.sm * dt
        c.tensor_active_seconds += g.tensor * dt
        c.dram_active_seconds += g.dram * dt
        if inst.processes:
            c.allocated_seconds += dt
            if g.sm < idle_below:
                c.allocated_idle_seconds += dt


class Holders(NamedTuple):
    held: dict[JobKey, float]  # each job's share of the GPU
    busy_of: dict[JobKey, float]  # each job's busy share of the GPU (its instances' SM activity)
    by_instance: dict[str, dict[JobKey, float]]  # per instance UUID, the GPU share each job holds through it


def holders(
    layout: MigLayout, owners: Mapping[int, Owner | None], pod_of: Callable[[str], PodDevice | None]
) -> Holders:
    """Each job's share of the GPU (its share of each instance's processes, ``attribution.shares``,
    times the instance's share), its busy share (the same times the instance's SM activity), and the
    shares instance by instance (for stalls, judged per instance). The pod is the kubelet's for the
    MIG device's UUID."""
    held: dict[JobKey, float] = {}
    busy_of: dict[JobKey, float] = {}
    by_instance: dict[str, dict[JobKey, float]] = {}
    for inst in layout.instances:
        within = shares(list(inst.processes or ()), owners, None, pod_of(inst.uuid))
        share = layout.share(inst)
        active = inst.gpm.sm if inst.gpm is not None else 0.0
        mine = by_instance[inst.uuid] = {}
        for key, w in within.items():
            mine[key] = share * w
            held[key] = held.get(key, 0.0) + share * w
            busy_of[key] = busy_of.get(key, 0.0) + share * w * active
    return Holders(held, busy_of, by_instance)


def fold_stall(
    gpu: TrackedGpu,
    layout: MigLayout | None,
    dt: float | None,
    by_instance: Mapping[str, Mapping[JobKey, float]] | None,
    rule: stalls.StallRule,
) -> None:
    """Stalled time under MIG (caller holds the sampler lock; after the jobs' integration). Each
    instance is judged on its own, as a GPU is: its graphics engine busy (GPM's GRAPHICS_UTIL, the
    "kernel resident" that utilisation says for a whole GPU) while its SMs, tensor cores and DRAM
    are near still, for ``rule.min_seconds`` without a break. What a stalled round counts is the
    busy time MIG counts for it (its share times its SM activity), for the GPU and for each job on
    the instance at its share of it: stalled never exceeds busy, for the GPU or a job. Only where
    every instance's graphics activity was read (an A100 has no GPM); an uncovered round breaks
    every instance's run. ``by_instance`` None: the processes were not read (the GPU still counts)."""
    gpu.stall.reset()  # the whole GPU's run is not MIG's
    if layout is None:
        gpu.mig_stall = {}
        return
    runs = gpu.mig_stall = {i.uuid: gpu.mig_stall.get(i.uuid) or stalls.StallRun() for i in layout.instances}
    judged = all(i.gpm is not None and i.gpm.graphics is not None for i in layout.instances)
    c = gpu.counters
    if judged and c.stalled_seconds is None:
        c.stalled_seconds = 0.0
    if dt is None or not judged:
        for run in runs.values():
            run.reset()
        return
    for inst in layout.instances:
        g = inst.gpm
        assert g is not None and g.graphics is not None  # judged
        active = g.sm * dt
        amounts: dict[Hashable, float] = {stalls.GPU: layout.share(inst) * active}
        for key, share in (by_instance or {}).get(inst.uuid, {}).items():
            job = gpu.jobs.jobs.get(key)
            if job is not None and job.stalled_seconds is None:
                job.stalled_seconds = 0.0
            amounts[key] = share * active
        counted = stalls.step(
            runs[inst.uuid], stalled=rule.holds(g.graphics, g), dt=dt, amounts=amounts, min_seconds=rule.min_seconds
        )
        gpu.credit_stalled(counted)


def processes(layout: MigLayout | None) -> list[Process] | None:
    """The processes on the instances; None when the layout, or an instance's list, was not read."""
    if layout is None or any(i.processes is None for i in layout.instances):
        return None
    return [p for i in layout.instances for p in i.processes or ()]
