"""The fast lane: one cheap round of readings per GPU per tick, integrated into counters.

Integration rule: a tick covers the reader-clock interval since the GPU's previous tick and
counts only if the utilisation read succeeded. Each counter then grows by (the tick's best
estimate of its mean over the interval) × (interval). ``sampled_seconds`` grows by the
interval alone, so ``rate(x) / rate(sampled)`` is the exact time-weighted mean of x. A GPU in MIG
mode has no utilisation: its busy share comes from its instances' activity (``mig``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from domain.jobs import JobKey
from exporter.facts import Fact
from exporter.readers import CLOCK_EVENT_REASONS, GpmActivity, MigLayout, Process, ProcessUtil, Reader, UtilSample
from exporter.sampling import fact_reads, mig, stalls
from exporter.sampling.gpu_state import ErrorBook, TrackedGpu, call
from exporter.snapshot import GpuGauges


@dataclass(frozen=True, slots=True)
class FastReading:
    t: float
    gauges: GpuGauges
    busy: float | None  # mean share busy over the interval, from the samples buffer if any
    gpm: GpmActivity | None
    processes: int | None
    procs: list[Process] | None = None
    proc_util: list[ProcessUtil] | None = None
    facts: fact_reads.FactReading | None = None  # the fact table's fast-lane facts
    mig: MigLayout | None = None  # the MIG instances, read this round; None: MIG off or unread
    in_mig: bool = False  # the GPU is in MIG mode (as last known, when this round could not read it)


def read(reader: Reader, gpu: TrackedGpu, errors: ErrorBook, facts: Sequence[Fact] = ()) -> FastReading:
    """Read one GPU, and ``facts`` (the table's fast lane) in one more reader call where there are
    any. Raises GpuLost / ReaderUnavailable; other failures leave fields None."""
    i = gpu.info.index
    got = call(gpu, "mig_instances", lambda: (reader.mig_instances(i),), errors)  # None: unsupported or failed
    layout = got[0] if got is not None else None
    in_mig = layout is not None or (got is None and gpu.mig is not None)
    # under MIG NVML answers utilisation NotSupported: not asked, so it is asked again if MIG goes off
    util = None if in_mig else call(gpu, "utilization", lambda: reader.utilization(i), errors)
    samples = (
        None
        if in_mig
        else call(gpu, "utilization_samples", lambda: reader.utilization_samples(i, gpu.last_sample_us), errors)
    )
    power = call(gpu, "power_watts", lambda: reader.power_watts(i), errors)
    mem = call(gpu, "memory", lambda: reader.memory(i), errors)
    temp = call(gpu, "temperature_celsius", lambda: reader.temperature_celsius(i), errors)
    clocks = call(gpu, "clocks", lambda: reader.clocks(i), errors)
    reasons = call(gpu, "clock_event_reasons", lambda: reader.clock_event_reasons(i), errors)
    # under MIG the instances' own lists (the parent's needs privileges there, and repeats them)
    procs = mig.processes(layout) if in_mig else call(gpu, "processes", lambda: reader.processes(i), errors)
    gpm = call(gpu, "gpm", lambda: reader.gpm(i), errors)
    proc_util = (
        call(gpu, "process_utilization", lambda: reader.process_utilization(i), errors)
        if procs and not in_mig
        else None
    )
    table = fact_reads.read(reader, gpu, facts, errors) if facts else None
    t = reader.now()

    busy: float | None = None
    if samples:
        busy = samples_mean(samples)
        gpu.last_sample_us = samples[-1][0]
    elif util is not None:
        busy = util.gpu
    if layout is not None:
        busy = mig.busy(layout)
        gpm = gpm if gpm is not None else mig.activity(layout)
    gauges = GpuGauges(
        utilization=None if util is None else util.gpu,
        memory_utilization=None if util is None else util.memory,
        power_watts=power,
        memory_used_bytes=None if mem is None else mem.used_bytes,
        memory_total_bytes=None if mem is None else mem.total_bytes,
        temperature_celsius=temp,
        sm_clock_hertz=None if clocks is None else clocks.sm_hertz,
        memory_clock_hertz=None if clocks is None else clocks.memory_hertz,
        clock_event_reasons=reasons,
        processes=None if procs is None else len(procs),
    )
    return FastReading(
        t=t,
        gauges=gauges,
        busy=busy if util is not None or layout is not None else None,
        gpm=gpm,
        processes=gauges.processes,
        procs=procs,
        proc_util=proc_util,
        facts=table,
        mig=layout,
        in_mig=in_mig,
    )


def samples_mean(samples: list[UtilSample]) -> float:
    """Mean of buffer samples. Each sample is the busy share of one fixed sampling period, so
    they weigh the same (their timestamps jitter by a few ms; the periods do not)."""
    return sum(v for _, v in samples) / len(samples)


def integrate(gpu: TrackedGpu, r: FastReading, *, max_gap: float, idle_below: float) -> float | None:
    """Fold one reading into ``gpu``'s counters (caller holds the sampler lock). Returns the
    interval it covered, or None when it covered none."""
    gpu.gauges = r.gauges
    if r.facts is not None:
        fact_reads.fold(gpu, r.facts)
    prev_t, gpu.last_t = gpu.last_t, r.t
    prev_power, gpu.last_power = gpu.last_power, r.gauges.power_watts
    c = gpu.counters
    if r.gauges.clock_event_reasons is not None and not c.clock_event_seconds:
        c.clock_event_seconds = dict.fromkeys(CLOCK_EVENT_REASONS.values(), 0.0)
    if r.gpm is not None and c.sm_active_seconds is None:
        c.sm_active_seconds = c.tensor_active_seconds = c.dram_active_seconds = 0.0
    if gpu.energy_from_power and c.energy_joules is None:
        c.energy_joules = 0.0
    if gpu.energy_from_power and c.energy_integrated_seconds is None:
        c.energy_integrated_seconds = 0.0
    dt = None if prev_t is None or r.busy is None else r.t - prev_t
    if dt is not None and (dt <= 0 or dt > max_gap):
        dt = None  # clock went backwards or the sampler stalled: do not guess across the gap
    if r.mig is not None or not r.in_mig:
        mig.fold(gpu, r.mig, dt, idle_below)  # an unread layout keeps the last one known
    if r.in_mig and c.mig_sampled_seconds is None:
        c.mig_sampled_seconds = 0.0
    if dt is None or r.busy is None:
        return None  # a baseline tick, or utilisation unreadable: this interval is not covered
    c.sampled_seconds += dt
    if r.in_mig:  # busy time this round is the instances' SM activity (exporter.sampling.mig)
        c.mig_sampled_seconds = (c.mig_sampled_seconds or 0.0) + dt
    c.busy_seconds += r.busy * dt
    if r.gpm is not None:
        c.sm_active_seconds = (c.sm_active_seconds or 0.0) + r.gpm.sm * dt
        c.tensor_active_seconds = (c.tensor_active_seconds or 0.0) + r.gpm.tensor * dt
        c.dram_active_seconds = (c.dram_active_seconds or 0.0) + r.gpm.dram * dt
    if r.processes:
        c.allocated_seconds += dt
        if r.busy < idle_below:
            c.allocated_idle_seconds += dt
    reasons = r.gauges.clock_event_reasons
    if reasons:
        for bit, name in CLOCK_EVENT_REASONS.items():
            if reasons & bit:
                c.clock_event_seconds[name] = c.clock_event_seconds.get(name, 0.0) + dt
    power = r.gauges.power_watts
    if gpu.energy_from_power and power is not None:
        mean_power = power if prev_power is None else (power + prev_power) / 2.0
        c.energy_joules = (c.energy_joules or 0.0) + mean_power * dt
        c.energy_integrated_seconds = (c.energy_integrated_seconds or 0.0) + dt
    return dt


def fold_stall(
    gpu: TrackedGpu, r: FastReading, dt: float | None, holders: Mapping[JobKey, float] | None, rule: stalls.StallRule
) -> None:
    """Fold one round into ``gpu``'s stalled counters and its jobs' (caller holds the sampler lock;
    after ``fastlane.integrate`` and the jobs' integration). An uncovered round (baseline, gap,
    utilisation or GPM unread) breaks the run. Under MIG: ``mig.fold_stall``."""
    gpu.mig_stall = {}
    c = gpu.counters
    if r.gpm is not None and c.stalled_seconds is None:
        c.stalled_seconds = 0.0
    if dt is None or r.busy is None or r.gpm is None:
        gpu.stall.reset()
        return
    busy_s = r.busy * dt
    amounts: dict[Hashable, float] = {stalls.GPU: busy_s}
    for holder, share in (holders or {}).items():
        held = gpu.jobs.jobs.get(holder)
        if held is not None and held.stalled_seconds is None:
            held.stalled_seconds = 0.0
        amounts[holder] = busy_s * share
    stalled = rule.holds(r.busy, r.gpm)
    counted = stalls.step(gpu.stall, stalled=stalled, dt=dt, amounts=amounts, min_seconds=rule.min_seconds)
    gpu.credit_stalled(counted)
