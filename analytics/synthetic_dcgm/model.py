"""The physical model a synthetic fleet is generated from: nodes, GPUs and their MIG layouts, the
exporter running on each node over time, what holds each device-instance, and one scrape's readings.

A *device-instance* is what dcgm-exporter writes one series for: a whole GPU, or one GPU instance
of a GPU in MIG mode (the exporter's default ``-d f`` monitors a MIG-enabled GPU through its GPU
instances only). Its *share* of the GPU is its compute slices over the GPU's (a ``3g.40gb`` on an
H100 is 3/7); a whole GPU's is 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from domain.jobs import JobKey

DeploymentKind = Literal["helm", "operator", "legacy", "slurm"]
FieldSet = Literal["default", "dcp", "basic"]
Activity = Literal["train", "stalled", "held-idle", "serve"]
HostLabel = Literal["Hostname", "hostname"]
Layout = tuple[tuple[int, str], ...] | None  # (GPU_I_ID, GPU_I_PROFILE) per GPU instance; None: whole GPU

UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SM = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM = "DCGM_FI_PROF_DRAM_ACTIVE"
PROFILING = (GR, SM, TENSOR, DRAM)

# metric name -> Scrape attribute
FIELDS = {UTIL: "util", POWER: "power", ENERGY: "energy_mj", GR: "gr", SM: "sm", TENSOR: "tensor", DRAM: "dram"}
# as etc/default-counters.csv (no SM_ACTIVE), plus SM_ACTIVE (a custom csv), or a GPU's basic fields
FIELD_SETS: dict[str, tuple[str, ...]] = {
    "default": (UTIL, POWER, ENERGY, GR, TENSOR, DRAM),
    "dcp": (UTIL, POWER, ENERGY, GR, SM, TENSOR, DRAM),
    "basic": (UTIL, POWER, ENERGY),
}


def slices(profile: str) -> int:
    """Compute slices of a MIG profile: its leading ``Ng`` (``3g.40gb`` -> 3)."""
    return int(profile.split("g", 1)[0])


@dataclass(frozen=True, slots=True)
class Pod:
    """A Kubernetes container holding a device (the kubelet's pod resources)."""

    namespace: str
    pod: str
    container: str

    def key(self) -> JobKey:
        return JobKey(pod=self.pod, namespace=self.namespace, container=self.container)


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A Slurm job listed in a device's ``--hpc-job-mapping-dir`` file. dcgm-exporter's series carry
    only its id (``hpc_job``); the rest is the scheduler's record."""

    job_id: str
    user: str
    account: str
    partition: str
    qos: str = "normal"

    def key(self) -> JobKey:
        return JobKey(job_id=self.job_id)


Holder = Pod | SlurmJob


@dataclass(frozen=True, slots=True)
class Span:
    """``holder`` holds a device-instance over [start, end), doing ``kind``."""

    start: float
    end: float
    holder: Holder
    kind: Activity


@dataclass(frozen=True, slots=True)
class Exporter:
    """The dcgm-exporter running on a node from ``since`` (until the next one): a change is a
    restart or an upgrade, and the node loses two scrapes."""

    since: float
    pod: str  # the exporter's pod; "" on bare metal
    address: str  # pod IP, or the node's name on bare metal (the target is address:9400)
    host_label: HostLabel  # `Hostname` before dcgm-exporter's d5e5f51 (2026-05-12), `hostname` after
    driver: str  # DCGM_FI_DRIVER_VERSION


@dataclass(frozen=True, slots=True)
class Gpu:
    uuid: str
    node: str
    index: int
    model: str
    pci_bus_id: str
    mig: tuple[tuple[float, Layout], ...] = ((-math.inf, None),)  # (from, layout), in order
    profiling: bool = True  # DCGM_FI_PROF_* supported (an A10: no)
    slices: int = 7  # compute slices (A100/H100/H200/B200: 7; A30: 4)

    def layout(self, t: float) -> Layout:
        current: Layout = None
        for since, layout in self.mig:
            if since <= t:
                current = layout
        return current

    def instances(self, t: float) -> tuple[Instance, ...]:
        layout = self.layout(t)
        if layout is None:
            return (Instance(self.uuid),)
        return tuple(Instance(self.uuid, gi, profile, self.slices) for gi, profile in layout)

    @property
    def ever_mig(self) -> bool:
        return any(layout is not None for _, layout in self.mig)


@dataclass(frozen=True, slots=True)
class Instance:
    """A device-instance: the whole GPU (``gi`` None) or one of its GPU instances."""

    uuid: str
    gi: int | None = None
    profile: str | None = None
    gpu_slices: int = 7

    @property
    def share(self) -> float:
        return 1.0 if self.profile is None else slices(self.profile) / self.gpu_slices


@dataclass(frozen=True)
class Node:
    name: str
    kind: DeploymentKind
    fields: FieldSet
    offset: float  # seconds after the interval's grid that Prometheus scrapes this node
    gpus: tuple[Gpu, ...]
    exporters: tuple[Exporter, ...]  # in order of `since`
    honor_labels: bool = False  # the ServiceMonitor's honorLabels (Kubernetes kinds)
    virtual_gpus: bool = False  # --kubernetes-virtual-gpus: one copy of the series per sharing pod
    gaps: tuple[tuple[float, float], ...] = ()  # [from, to): scrapes lost
    resets: tuple[tuple[str, float], ...] = ()  # (uuid, t): its energy counter restarts at t (driver reload)
    holders: dict[tuple[str, int | None], tuple[Span, ...]] = field(default_factory=dict)  # (uuid, GI id)

    def exporter(self, t: float) -> Exporter:
        current = self.exporters[0]
        for e in self.exporters:
            if e.since <= t:
                current = e
        return current

    def fields_of(self, gpu: Gpu, instance: Instance) -> tuple[str, ...]:
        """The fields dcgm-exporter writes for a device-instance: the node's set, without the
        profiling fields where the GPU has none, and never UTIL for a GPU instance (DCGM leaves it
        blank and the exporter skips blanks)."""
        out = FIELD_SETS[self.fields]
        if not gpu.profiling:
            out = tuple(f for f in out if f not in PROFILING)
        if instance.gi is not None:
            out = tuple(f for f in out if f != UTIL)
        return out


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape of one device-instance: who was listed on it and every field's value (None where
    the field is not written). ``power`` and ``energy_mj`` are the device's, the same on every
    instance of a GPU."""

    t: float  # epoch seconds, ms precision
    instance: Instance
    holders: tuple[Holder, ...]  # pods (or, on a time-sliced device, all sharing pods) or listed jobs
    exporter: Exporter
    util: int | None  # % (whole GPUs only)
    gr: float | None  # ratios 0..1, relative to the instance under MIG
    sm: float | None
    tensor: float | None
    dram: float | None
    power: float  # W, the reported reading
    energy_mj: int  # the device's counter

    @property
    def jobs(self) -> tuple[JobKey, ...]:
        return tuple(h.key() for h in self.holders)

    @property
    def busy(self) -> float:
        """Busy fraction of the device-instance: util/100 on a whole GPU, GR under MIG."""
        if self.instance.gi is None:
            return (self.util or 0) / 100
        return self.gr or 0.0
