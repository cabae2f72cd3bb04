"""The slow lane: expensive or rarely changing reads at their own cadence, off the fast tick.

On an H200 the energy counter costs ~4 ms and PCIe throughput ~21 ms per direction (it blocks
for its sampling window); reading them every second on 8 GPUs would stretch every tick. The fact
table's facts of the due cadences (``exporter.facts``: lanes energy, health, pcie) are read in one
more call per GPU; PCIe throughput is their PCIe counters' mean rate between two reads, and the
blocking call is asked only of a GPU without those counters.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter.facts import Fact, nvlink, pcie
from exporter.readers import FactValue, PcieThroughput, Reader
from exporter.sampling import fact_reads
from exporter.sampling.gpu_state import ErrorBook, TrackedGpu, call
from exporter.snapshot import GpuHealth

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Cadence:
    energy: float = 10.0
    health: float = 30.0  # power limit, ECC, remapped rows
    pcie: float = 30.0  # 0 turns PCIe throughput off


@dataclass(slots=True)
class SlowReading:
    energy_raw: float | None = None
    energy_unsupported: bool = False
    health: GpuHealth = dataclasses.field(default_factory=GpuHealth)  # read this round; None: not due or failed
    facts: fact_reads.FactReading | None = None  # the fact table's facts of the cadences due


def due(gpu: TrackedGpu, what: str, every: float, now: float) -> bool:
    if every < 0 or (what == "pcie" and every == 0):
        return False
    if now >= gpu.due.get(what, float("-inf")):
        gpu.due[what] = now + every
        return True
    return False


def read(
    reader: Reader, gpu: TrackedGpu, cadence: Cadence, now: float, errors: ErrorBook, facts: Sequence[Fact] = ()
) -> SlowReading:
    """Read what is due for one GPU, ``facts`` (the table's slow lanes) of the due cadences in one
    call. Raises GpuLost / ReaderUnavailable."""
    i = gpu.info.index
    out = SlowReading()
    lanes: set[str] = set()
    if due(gpu, "energy", cadence.energy, now):
        lanes.add("energy")
        if not gpu.energy_from_power:
            out.energy_raw = call(gpu, "energy_joules", lambda: reader.energy_joules(i), errors)
            out.energy_unsupported = "energy_joules" in gpu.unsupported
    h = GpuHealth()
    if due(gpu, "health", cadence.health, now):
        lanes.add("health")
        h = GpuHealth(
            power_limit_watts=call(gpu, "power_limit_watts", lambda: reader.power_limit_watts(i), errors),
            ecc=call(gpu, "ecc_errors", lambda: reader.ecc_errors(i), errors),
            remapped=call(gpu, "remapped_rows", lambda: reader.remapped_rows(i), errors),
        )
    if due(gpu, "pcie", cadence.pcie, now):
        lanes.add("pcie")
    out.facts = fact_reads.read(reader, gpu, [f for f in facts if f.lane in lanes], errors) if lanes else None
    if "pcie" in lanes and not _pcie_counted(gpu, facts):
        h = dataclasses.replace(h, pcie=call(gpu, "pcie_throughput", lambda: reader.pcie_throughput(i), errors))
    out.health = h
    return out


def _pcie_counted(gpu: TrackedGpu, facts: Sequence[Fact]) -> bool:
    """Whether the table's PCIe byte counters answer for this GPU (the throughput is theirs)."""
    return all(f in facts and f.name not in gpu.unsupported for f in (pcie.TX, pcie.RX))


def _rate(grew: fact_reads.Increase) -> float:
    inc, seconds = grew
    return (sum(inc.values()) if isinstance(inc, Mapping) else inc) / seconds


def _newer(old: T | None, new: T | None) -> T | None:
    return old if new is None else new


LINK_FACTS = {"nvlink": (nvlink.TX, nvlink.RX), "pcie": (pcie.TX, pcie.RX)}
"""The counters whose increases the jobs on a GPU share (``GpuJobs.apportion_link``)."""


def _total(v: FactValue) -> float:
    """A counter increase summed over its links (NVLink's are per link)."""
    return sum(v.values()) if isinstance(v, Mapping) else float(v)


def apply(gpu: TrackedGpu, r: SlowReading) -> None:
    """Fold a slow reading into ``gpu`` (caller holds the sampler lock)."""
    new = r.health
    if r.facts is not None:
        grew = fact_reads.fold(gpu, r.facts)
        tx, rx = grew.get(pcie.TX.name), grew.get(pcie.RX.name)
        if tx is not None and rx is not None:  # the PCIe throughput is the counters' mean rate
            new = dataclasses.replace(new, pcie=PcieThroughput(_rate(tx), _rate(rx)))
        for link, facts in LINK_FACTS.items():
            if any(f.name in r.facts.values for f in facts):  # a first read splits nothing, and starts the span
                gpu.jobs.apportion_link(link, sum(_total(grew[f.name][0]) for f in facts if f.name in grew))
    if r.energy_unsupported and not gpu.energy_from_power:
        log.info("gpu %d: no energy counter; integrating power instead", gpu.info.index)
        gpu.energy_from_power = True
        gpu.counters.energy_joules = gpu.counters.energy_joules or 0.0
    if r.energy_raw is not None:
        c = gpu.counters
        if c.energy_joules is None:
            c.energy_joules = 0.0
        elif gpu.energy_raw is not None and r.energy_raw >= gpu.energy_raw:
            c.energy_joules += r.energy_raw - gpu.energy_raw
            gpu.jobs.apportion_energy(r.energy_raw - gpu.energy_raw)
        # a counter that went backwards (driver reload) restarts from the new value
        gpu.energy_raw = r.energy_raw
    old = gpu.health
    gpu.health = GpuHealth(
        power_limit_watts=_newer(old.power_limit_watts, new.power_limit_watts),
        ecc=_newer(old.ecc, new.ecc),
        remapped=_newer(old.remapped, new.remapped),
        pcie=_newer(old.pcie, new.pcie),
    )
