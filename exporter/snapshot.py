"""What the sampler knows about each GPU, and the immutable snapshot that scrapes read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from domain.jobs import JobKey
from exporter import facts
from exporter.attribution.shares import JobCounters
from exporter.readers import (
    NO_NVML,
    DeviceInfo,
    EccErrors,
    FactValue,
    MigInstance,
    MigLayout,
    PcieThroughput,
    RemappedRows,
)

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Histogram:
    """A histogram's state: cumulative counts per upper bound (the +Inf bucket is ``count``)."""

    uppers: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


@dataclass(frozen=True, slots=True)
class GpuGauges:
    """Instantaneous readings from the last fast tick; None where the call failed or is
    unsupported."""

    utilization: float | None = None
    memory_utilization: float | None = None
    power_watts: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_event_reasons: int | None = None
    processes: int | None = None


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """Readings of the slow lane (expensive or rarely changing)."""

    power_limit_watts: float | None = None
    ecc: EccErrors | None = None
    remapped: RemappedRows | None = None
    pcie: PcieThroughput | None = None


@dataclass(slots=True)
class GpuCounters:
    """Monotonic totals since the exporter started. An activity total stays None until its
    source first answers, so an unsupported measurement is absent rather than zero."""

    sampled_seconds: float = 0.0
    busy_seconds: float = 0.0
    sm_active_seconds: float | None = None
    tensor_active_seconds: float | None = None
    dram_active_seconds: float | None = None
    energy_joules: float | None = None
    allocated_seconds: float = 0.0
    allocated_idle_seconds: float = 0.0
    stalled_seconds: float | None = None  # busy time that was stalled (exporter.sampling.stalls); needs GPM
    # covered time while the GPU was in MIG mode (its busy time then is its instances' SM activity,
    # exporter.sampling.mig); None until the GPU is first seen in MIG mode
    mig_sampled_seconds: float | None = None
    # covered time whose energy was integrated from power samples (the GPU has no energy counter:
    # before Volta); None while the energy counter answers
    energy_integrated_seconds: float | None = None
    clock_event_seconds: dict[str, float] = field(default_factory=dict)
    xid_errors: dict[int, int] = field(default_factory=dict)
    facts: dict[str, FactValue] = field(default_factory=dict)
    """The counters of the fact table (``exporter.facts``) by fact name, from their first reading
    on. A per-link value is replaced, never changed in place, so a shallow copy keeps it."""

    def copy(self) -> GpuCounters:
        return dataclasses.replace(
            self,
            clock_event_seconds=dict(self.clock_event_seconds),
            xid_errors=dict(self.xid_errors),
            facts=dict(self.facts),
        )


COUNTER_COLUMNS: tuple[str, ...] = (
    "sampled_seconds",
    "busy_seconds",
    "sm_active_seconds",
    "tensor_active_seconds",
    "dram_active_seconds",
    "energy_joules",
    "allocated_seconds",
    "allocated_idle_seconds",
    "stalled_seconds",
)
"""The ``GpuCounters`` fields the history stores, named as their columns (schema v1 and v4)."""

LATER_COLUMNS: tuple[str, ...] = ("mig_sampled_seconds", "energy_integrated_seconds")
"""The ``GpuCounters`` fields the history stores after the fact table's columns (schema v7, v8)."""

ROLLUP_FIELDS: tuple[str, ...] = COUNTER_COLUMNS + tuple(str(f.history) for f in facts.HISTORY) + LATER_COLUMNS
"""The history's ``gpu_minutes`` columns after uuid and minute, in order: listed, never reflected
from a dataclass; each column a migration added (``exporter/history/schema.py``)."""


def _total(v: FactValue | None) -> float:
    if v is None:
        return 0.0
    return sum(v.values()) if isinstance(v, Mapping) else float(v)


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One GPU's counter increments during one wall-clock minute (None: not measured)."""

    minute: int  # epoch seconds at the start of the minute, UTC
    info: DeviceInfo
    values: Mapping[str, float | None]


def minute_row(minute: int, info: DeviceInfo, now: GpuCounters, base: GpuCounters) -> MinuteRow:
    values: dict[str, float | None] = {}
    for name in COUNTER_COLUMNS:
        values[name] = _increase(getattr(now, name), getattr(base, name))
    for f in facts.HISTORY:  # a per-link counter's column holds the sum over the links
        v = now.facts.get(f.name)
        values[str(f.history)] = None if v is None else _total(v) - _total(base.facts.get(f.name))
    for name in LATER_COLUMNS:
        values[name] = _increase(getattr(now, name), getattr(base, name))
    return MinuteRow(minute=minute, info=info, values=values)


def _increase(a: float | None, b: float | None) -> float | None:
    return None if a is None else a - (b or 0.0)


@dataclass(frozen=True, slots=True)
class JobMinuteRow:
    """One job's increments on one GPU during one minute."""

    minute: int
    uuid: str
    job: JobKey
    sampled_seconds: float
    busy_seconds: float
    energy_joules: float
    charged_seconds: float | None = None  # None: not counted (a writer before schema v4)
    stalled_seconds: float | None = None  # None: not measured (no GPM)


def job_minute_rows(
    minute: int, uuid: str, now: Mapping[JobKey, JobCounters], base: Mapping[JobKey, JobCounters]
) -> list[JobMinuteRow]:
    rows = []
    for key, c in now.items():
        b = base.get(key)
        row = JobMinuteRow(
            minute,
            uuid,
            key,
            c.sampled_seconds - (b.sampled_seconds if b else 0.0),
            c.busy_seconds - (b.busy_seconds if b else 0.0),
            c.energy_joules - (b.energy_joules if b else 0.0),
            c.charged_seconds - (b.charged_seconds if b else 0.0),
            None if c.stalled_seconds is None else c.stalled_seconds - ((b.stalled_seconds or 0.0) if b else 0.0),
        )
        if row.sampled_seconds > 0 or row.energy_joules > 0:
            rows.append(row)
    return rows


@dataclass(slots=True)
class MigCounters:
    """One MIG instance's totals since the exporter saw it, like a whole GPU's. Its busy time is its GPU
    instance's SM activity (GPM): NVML has no utilisation under MIG."""

    sampled_seconds: float = 0.0
    busy_seconds: float = 0.0
    sm_active_seconds: float = 0.0
    tensor_active_seconds: float = 0.0
    dram_active_seconds: float = 0.0
    allocated_seconds: float = 0.0
    allocated_idle_seconds: float = 0.0

    def copy(self) -> MigCounters:
        return dataclasses.replace(self)


@dataclass(frozen=True, slots=True)
class MigInstanceSnapshot:
    reading: MigInstance  # as last read: identity, memory, processes
    share: float  # its compute slices over the GPU's: what a job on it holds and pays
    sm_share: float  # its SMs over the GPU's (information)
    counters: MigCounters


@dataclass(frozen=True, slots=True)
class MigSnapshot:
    """A GPU in MIG mode: its instances, and the share of its slices in none (shares + it = 1)."""

    slices: int
    unallocated: float
    instances: tuple[MigInstanceSnapshot, ...]


def mig_snapshot(layout: MigLayout, counters: Mapping[str, MigCounters]) -> MigSnapshot:
    insts = tuple(
        MigInstanceSnapshot(i, layout.share(i), layout.sm_share(i), (counters.get(i.uuid) or MigCounters()).copy())
        for i in layout.instances
    )
    return MigSnapshot(layout.slices, layout.unallocated, insts)


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    info: DeviceInfo
    up: bool
    gauges: GpuGauges
    health: GpuHealth
    counters: GpuCounters
    jobs: Mapping[JobKey, JobCounters] = field(default_factory=dict)
    facts: Mapping[str, FactValue] = field(default_factory=dict)
    """The fact table's values by fact name: a gauge as last read, a counter's total (as in
    ``counters.facts``). Absent: never read, or this GPU has no such fact."""
    mig: MigSnapshot | None = None  # its MIG instances; None: MIG mode off (or no MIG)


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    taken_at: float  # wall clock, epoch seconds
    taken_monotonic: float  # time.monotonic() when taken, for staleness
    reader: str
    hostname: str
    driver_version: str
    nvml_up: bool  # the reader is open and answering (on the nvml reader: NVML is up); see nvml_state
    sample_duration_seconds: float
    gpus: tuple[GpuSnapshot, ...]
    reader_errors: Mapping[str, int]
    parts: Mapping[type[Any], object] = field(default_factory=dict)
    """What the enabled features add (history stats, benchmarks, the queue, ...), by part type."""
    reader_down: str = ""
    """Why the reader is not open ("" while it is): the error of the last open, or of the call
    that found it gone."""

    @property
    def nvml_state(self) -> bool | None:
        """Whether NVML is up; None for a reader that involves no NVML (a replay of a capture),
        whose snapshots claim nothing about NVML. The fake reader stands in for NVML in tests
        and reports as NVML would."""
        return None if self.reader in NO_NVML else self.nvml_up

    def part(self, kind: type[P]) -> P | None:
        """The part a feature of this type contributed, or None while that feature is off."""
        p = self.parts.get(kind)
        return p if isinstance(p, kind) else None


def by_type(parts: Iterable[object]) -> dict[type[Any], object]:
    """Snapshot parts keyed by their type, as ``Snapshot.parts`` holds them (one per feature)."""
    return {type(p): p for p in parts}


EMPTY = Snapshot(
    seq=0,
    taken_at=0.0,
    taken_monotonic=0.0,
    reader="",
    hostname="",
    driver_version="",
    nvml_up=False,
    sample_duration_seconds=0.0,
    gpus=(),
    reader_errors={},
)
