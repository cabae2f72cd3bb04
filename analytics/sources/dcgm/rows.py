"""The window's ``GpuWeek`` and ``JobWeek`` rows from the dcgm source's figures.

A MIG instance counts its share of its GPU (compute slices over the GPU's), so a GPU's busy time is
the slice-weighted sum of its instances'; its sampled time is its own scrapes (any instance), its
energy its own counter's growth, once. A holder holds its device's share for the scrapes it is
listed in and is charged, and given busy, SM-active time and energy, its 1/k share of each
(k holders listed at once share it equally: dcgm-exporter gives no per-holder activity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from analytics.sources.dcgm.figures import Figures
from analytics.sources.dcgm.labels import Device, host_of
from domain.jobs import JobKey
from domain.week import GpuDay, GpuWeek, JobWeek

GR_ENGINE = "gr_engine_active"  # GpuWeek.busy_measure of a GPU whose busy time is GR engine activity


def _energy(f: Figures, uuid: str, d: int) -> float | None:
    """The GPU's energy on day ``d`` (J): the counter's growth from its reading before the day to
    its last (on its first day, from its lowest reading); across a reset (a driver reload), its
    growth scrape by scrape; without a counter, its power x time."""
    facts = f.days[d].gpus[uuid]
    before, after, low = f.before(uuid, d), facts.energy_max, facts.energy_min
    if after is None:
        return facts.power * f.o.interval if facts.scrapes else None
    if facts.resets:
        return (facts.energy_steps if facts.energy_steps is not None else after - (low or 0.0)) / 1000
    if before is None:
        return (after - low) / 1000 if low is not None else None
    return (after - before) / 1000


def gpus(f: Figures) -> tuple[list[GpuWeek], dict[tuple[str, int], float]]:
    """Each GPU with data, and its energy per day (for the holders without a counter)."""
    i = f.o.interval
    out: list[GpuWeek] = []
    energy_of: dict[tuple[str, int], float] = {}
    for uuid in sorted({u for day in f.days for u, facts in day.gpus.items() if facts.scrapes}):
        daily: list[GpuDay] = []
        busy, sm = 0.0, None
        measures: set[str] = set()
        for d, (span, day) in enumerate(zip(f.spans, f.days, strict=True)):
            facts = day.gpus.get(uuid)
            if facts is None or not facts.scrapes:
                daily.append(GpuDay(0.0, 0.0, None))
                continue
            b = 0.0
            for dev, sums in sorted(day.devices.items()):  # in one order: the same sums every time
                if dev.uuid != uuid:
                    continue
                w = f.share(dev)
                b += w * sums.busy * i
                measures.add("" if sums.util is not None else GR_ENGINE)
                if sums.sm is not None:
                    sm = (sm or 0.0) + w * sums.sm * i
            energy = _energy(f, uuid, d)
            if energy is not None:
                energy_of[uuid, d] = energy
            daily.append(GpuDay(min(facts.scrapes * i, span.seconds), b, energy))
            busy += b
        profiled = {dev for day in f.days for dev in day.profiled if dev.uuid == uuid}
        stalled = sum(f.share(dev) * f.stalled.get(dev, 0.0) for dev in sorted(profiled)) if profiled else None
        labels = dict(f.latest[uuid][2]) if uuid in f.latest else {}
        known = [x.energy_j for x in daily if x.energy_j is not None]
        out.append(
            GpuWeek(
                uuid=uuid,
                host=host_of(labels, f.o.host_labels, f.exporter_pods),
                model=labels.get("modelName", f.models.get(uuid, "")),
                gpu=labels.get("gpu", ""),
                sampled_s=sum(x.sampled_s for x in daily),
                busy_s=busy,
                sm_active_s=sm,
                allocated_s=None,
                allocated_idle_s=None,
                energy_j=sum(known) if known else None,
                daily=tuple(daily),
                stalled_s=stalled,
                cluster=labels.get(f.o.cluster_label, "") if f.o.cluster_label else "",
                busy_measure="mixed" if len(measures) > 1 else next(iter(measures), ""),
            )
        )
    return out, energy_of


def holders(f: Figures, gpus: Sequence[GpuWeek], energy_of: Mapping[tuple[str, int], float]) -> list[JobWeek]:
    """One row per GPU and holder: held time = its listed scrapes x interval x its device's share;
    charged, busy and SM-active time and energy its 1/k shares of its device's (without an energy
    counter, the GPU's energy by the power it was given)."""
    i = f.o.interval
    hosts = {g.uuid: g.host for g in gpus}
    acc: dict[tuple[str, JobKey], list[float | None]] = {}
    stalled_done: set[tuple[Device, JobKey]] = set()  # the window's stalled time is added once
    for d, day in enumerate(f.days):
        for (dev, who), sums in sorted(day.holders.items()):
            if dev.uuid not in hosts:
                continue
            w = f.share(dev)
            row = acc.setdefault((dev.uuid, who), [0.0, 0.0, 0.0, 0.0, None, None])
            facts = day.gpus.get(dev.uuid)
            gpu_power = facts.power if facts is not None else 0.0
            energy = energy_of.get((dev.uuid, d))
            row[0] = (row[0] or 0.0) + sums.held * i * w
            row[1] = (row[1] or 0.0) + sums.scrapes * i * w
            row[2] = (row[2] or 0.0) + sums.busy * i * w
            if sums.energy is not None:
                row[3] = (row[3] or 0.0) + sums.energy * w / 1000
            elif energy is not None and gpu_power > 0:
                row[3] = (row[3] or 0.0) + energy * min(1.0, sums.power * w / gpu_power)
            if sums.sm is not None:
                row[4] = (row[4] or 0.0) + sums.sm * i * w
            if dev in day.profiled and (dev, who) not in stalled_done:
                stalled_done.add((dev, who))
                row[5] = (row[5] or 0.0) + w * f.stalled_holders.get((dev, who), 0.0)
    out = []
    for (uuid, who), (held, charged, busy, energy, sm, stalled) in sorted(acc.items()):
        if not held:
            continue
        out.append(
            JobWeek(
                uuid=uuid,
                host=hosts[uuid],
                job=who,
                sampled_s=held or 0.0,
                busy_s=busy or 0.0,
                energy_j=energy or 0.0,
                sm_active_s=sm,
                charged_s=charged,
                stalled_s=stalled,
            )
        )
    return out
