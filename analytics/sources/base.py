"""The source interface: what differs per store (the primitives), and the errors.

A source reads one store: gpuledger's series or dcgm-exporter's in a Prometheus-compatible store,
or the exporter's embedded history. It answers a few primitives (``Source``): the window's GPU and
job figures as the store holds them, its history's start, the scheduler's queue and failures, the
benchmarks, each Slurm job's records, the pods' labels, and where a job ran. One step,
``analytics.sources.enrich.week``, puts them together for every source alike (the Slurm and
pod-label joins, the parts that failed), so a new store is one module of primitives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from domain.jobs import JobKey
from domain.jobtable import JobTable
from domain.week import BenchWeek, FailureWeek, GpuWeek, JobWeek, QueueWeek, WeekData, Window

HOUR = 3600.0
Labels = tuple[tuple[str, str], ...]  # a pod's chosen labels, in name order
PodKey = tuple[str, str, str]  # (cluster, namespace, pod)
Slurm = tuple[str, str, str]  # (account, partition, qos)
NO_SLURM: Slurm = ("", "", "")


class SourceUnavailable(RuntimeError):
    """The source cannot answer at all (down, refused, unreadable): no report can be made."""


class PartFailed(RuntimeError):
    """One part of a window could not be read (a query refused): the report names it and is
    incomplete; the other parts are still read."""


class NotSupported(ValueError):
    """This source cannot answer this question."""


@dataclass(frozen=True, slots=True)
class Span:
    """A job's first minute and the end of its last one (epoch seconds)."""

    first: float
    last: float

    def window_bounds(self) -> tuple[float, float]:
        """Whole hours around the span: the report builder's hourly figures (tariffs, carbon) line
        up with the clock, and the job's own row does not depend on them."""
        return math.floor(self.first / HOUR) * HOUR, math.ceil(self.last / HOUR) * HOUR


@dataclass(frozen=True)
class GpuFigures:
    """The window's GPUs as the store holds them, what the store could only estimate, the parts it
    could not read, each GPU's scrape target (``instance``: the exporter that wrote its series;
    "" where none), which a job's records are first looked up by, and what the store carries over
    to its ``jobs`` (read together with the GPUs)."""

    gpus: tuple[GpuWeek, ...]
    approximations: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    targets: Mapping[str, str] = field(default_factory=dict)
    carry: object = None


@dataclass(frozen=True)
class JobFigures:
    """The window's jobs on those GPUs, not yet joined to their Slurm records or pod labels."""

    jobs: tuple[JobWeek, ...] | JobTable = ()  # a table: the same rows as columns (domain.jobtable)
    approximations: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulerJob:
    """A Slurm job as the scheduler recorded it (squeue, sacct, jobcomp); "" where it did not say."""

    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""

    def named(self) -> int:
        """How many of its fields the record names."""
        return sum(map(bool, (self.user, self.account, self.partition, self.qos)))


@dataclass(frozen=True)
class QueuePart:
    """A window's queue waits per partition, what the store could only estimate of them, and the
    parts of them it could not read (the rest kept)."""

    rows: list[QueueWeek] = field(default_factory=list)
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRecords:
    """What a store knows of its Slurm jobs' account, partition and QOS (and user): the scheduler's
    records, by (cluster, job id); and what the jobs' own processes claimed (their environment),
    by (cluster, scrape target, job id) and by (cluster, job id, user). A job id names a job only
    within one cluster: a row never takes another cluster's."""

    scheduler: Mapping[tuple[str, str], SchedulerJob] = field(default_factory=dict)
    claims_by_target: Mapping[tuple[str, str, str], Slurm] = field(default_factory=dict)
    claims_by_cluster: Mapping[tuple[str, str, str], Slurm] = field(default_factory=dict)

    def claim(self, cluster: str, target: str, job: JobKey) -> Slurm:
        own = self.claims_by_target.get((cluster, target, job.job_id)) if target else None
        return own or self.claims_by_cluster.get((cluster, job.job_id, job.user), NO_SLURM)


LabelSet = tuple[tuple[str, str], ...]  # a series' labels, in name order


def label_sets(rows: Iterable[Iterable[tuple[str, str]]]) -> frozenset[LabelSet]:
    """The sets of ``rows`` (each a set's (name, value) pairs, in name order), every equal pair
    one tuple that all sets holding it share: a 10,000-GPU week's 96,051 claims have seven labels
    each, mostly the same hosts, accounts, partitions and QOS: 86 MiB of objects as they came, 23 shared."""
    pairs: dict[tuple[str, str], tuple[str, str]] = {}
    share = pairs.setdefault
    return frozenset(tuple(share(p, p) for p in row) for row in rows)


@dataclass(frozen=True)
class RecordSets:
    """The label sets of a window's Slurm records (``Source.record_sets``): the scheduler's and
    the claims', each once, and the cluster label they were read with."""

    cluster_label: str
    scheduler: frozenset[LabelSet]
    claims: frozenset[LabelSet]

    def __or__(self, other: RecordSets) -> RecordSets:
        """Both windows' sets (two parts of one window: their union is the window's)."""
        if other.cluster_label != self.cluster_label:
            raise ValueError("records read with different cluster labels")
        return RecordSets(self.cluster_label, self.scheduler | other.scheduler, self.claims | other.claims)


class Source(Protocol):
    name: str

    parallel: bool  # whether its parts may be read in threads at once (a Prometheus-compatible store)
    pod_label_names: tuple[str, ...]  # [analytics] pod_labels: the pod labels its pod rows carry

    def gpus(self, w: Window) -> GpuFigures:
        """The GPUs' figures; SourceUnavailable if the store cannot answer."""
        ...

    def jobs(self, w: Window, gpus: GpuFigures) -> JobFigures:
        """The jobs' figures on those GPUs; SourceUnavailable if the store cannot answer."""
        ...

    def history_start(self, w: Window) -> float | None:
        """When the store's data begins inside ``w``; None: before it (or no data)."""
        ...

    def queue(self, w: Window) -> QueuePart: ...

    def failures(self, w: Window) -> list[FailureWeek]: ...

    def bench(self, w: Window) -> BenchWeek | None: ...

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        """The Slurm jobs' records over ``w`` (``gpus``: how the GPU figures were read)."""
        ...

    def record_sets(self, w: Window, gpus: GpuFigures) -> RecordSets | None:
        """The label sets ``job_records`` chooses from (a window's are its days' together:
        ``analytics.sources.records``); None where the store does not give them."""
        ...

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> Mapping[PodKey, Labels] | None:
        """The chosen labels of each pod (kube-state-metrics); None where the store has none."""
        ...

    def job_span(self, job: str, now: float) -> Span | None:
        """Where a job (a Slurm job id, a pod or ``namespace/pod``, optionally ``cluster:job``) ran."""
        ...

    def job_states(self, start: float, end: float) -> dict[str, str] | None:
        """Slurm job id -> its final state, where the store knows them job by job."""
        ...

    def session(self) -> AbstractContextManager[None]:
        """One report's reads (a Prometheus-compatible store's deadline)."""
        ...

    def describe(self) -> str:
        """Where it reads, for messages."""
        ...

    def close(self) -> None: ...

    keeps_days: bool  # it keeps its settled days (analytics.daycache), with keep_days

    def keep_days(self, w: Window) -> int:
        """Read and keep the settled days of ``w`` not kept yet; how many (0: it keeps none)."""
        ...

    def carry_state(self, carry: object) -> str:
        """``GpuFigures.carry`` as a word kept with a day's figures ("": nothing to keep)."""
        ...

    def carry_from(self, state: str) -> object:
        """The carry a kept day's word stands for."""
        ...

    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        """Everything the report needs for ``window`` (``jobs=False``: without the per-job
        figures, the costliest part, as the previous week's comparison needs none). Parts that
        fail go into ``WeekData.problems`` (the report is then incomplete); a source that cannot
        answer at all raises SourceUnavailable."""
        ...


MIG_SM_ACTIVE = "mig_sm_active"
"""``GpuWeek.busy_measure`` of a GPU gpuledger's exporter sampled in MIG mode (its busy time is its
instances' SM activity times their shares, ``exporter.sampling.mig``)."""


def mig_busy_measure(sampled: float, in_mig: float) -> str:
    """A GPU's busy measure from its sampled seconds and those in MIG mode (the exporter's
    ``mig_sampled_seconds``): "" NVML's utilisation; ``mig_sm_active`` when every sampled second was
    in MIG mode; ``mixed`` when some were."""
    if in_mig <= 0:
        return ""
    return MIG_SM_ACTIVE if in_mig >= sampled - 1e-6 * max(sampled, 1.0) else "mixed"


POWER_INTEGRATED = "power"
"""``GpuWeek.energy_measure`` of a GPU whose energy the exporter integrated from power samples."""


def energy_measure(sampled: float, integrated: float) -> str:
    """A GPU's energy measure from its sampled seconds and those whose energy was integrated from
    power (the exporter's ``energy_integrated_seconds``): "" the energy counter; ``power`` when every
    sampled second was integrated; ``mixed`` when some were."""
    if integrated <= 0:
        return ""
    return POWER_INTEGRATED if integrated >= sampled - 1e-6 * max(sampled, 1.0) else "mixed"


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..1) of exact values; None when empty."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
