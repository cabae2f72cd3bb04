"""What a source hands the report builder: one window's figures, normalised, per GPU and job,
plus queue, failures and benchmarks. Every source (Prometheus, the embedded history, existing
dcgm-exporter series) produces this; the builder never knows which one it was."""

from __future__ import annotations

import datetime as dt
import statistics
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from domain.frozen import evolve
from domain.jobs import JobKey

if TYPE_CHECKING:  # domain.jobtable imports this module (and numpy, which the exporter never needs)
    from domain.jobtable import JobTable


@dataclass(frozen=True)
class Window:
    """[start, end) in epoch seconds; ``label`` like 2026-W48 or rolling-7d."""

    start: float
    end: float
    label: str
    timezone: str = "UTC"

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    def previous(self) -> Window:
        span = self.seconds
        label = iso_week_label(self.start - span, self.timezone) if self.label.count("-W") else f"{self.label}-previous"
        return Window(self.start - span, self.start, label, self.timezone)


def iso_week(label: str, timezone: str = "UTC") -> Window:
    """'2026-W48' -> Monday 00:00 to the next Monday 00:00 in ``timezone``."""
    try:
        year, week = label.split("-W")
        monday = dt.date.fromisocalendar(int(year), int(week), 1)
    except ValueError as e:
        raise ValueError(f"{label!r} is not an ISO week like 2026-W48") from e
    tz = zoneinfo.ZoneInfo(timezone)
    start = dt.datetime.combine(monday, dt.time(), tzinfo=tz)
    end = dt.datetime.combine(monday + dt.timedelta(days=7), dt.time(), tzinfo=tz)
    return Window(start.timestamp(), end.timestamp(), label, timezone)


def iso_week_label(t: float, timezone: str = "UTC") -> str:
    d = dt.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(timezone))
    year, week, _ = d.isocalendar()
    return f"{year}-W{week:02d}"


def last_full_week(now: float, timezone: str = "UTC") -> Window:
    """The ISO week before the one ``now`` falls in."""
    this = iso_week(iso_week_label(now, timezone), timezone)
    return iso_week(iso_week_label(this.start - 1, timezone), timezone)


@dataclass(frozen=True, slots=True)
class GpuDay:
    """One GPU's local day of the window (the days of ``days``)."""

    sampled_s: float
    busy_s: float
    energy_j: float | None


@dataclass(frozen=True)
class GpuWeek:
    uuid: str
    host: str
    model: str
    gpu: str  # index on its host
    sampled_s: float
    busy_s: float
    sm_active_s: float | None
    allocated_s: float | None
    allocated_idle_s: float | None
    energy_j: float | None
    energy_by_hour: tuple[float, ...] | None = None  # joules per hour of the window, for tariffs
    daily: tuple[GpuDay, ...] = ()  # per local day of the window
    stalled_s: float | None = None  # busy seconds that were stalled (not useful); None: not measured
    cluster: str = ""  # the cluster the GPU reports from (prometheus.cluster_label); "" where not known
    # what its busy time counts: "" utilisation (NVML utilization.gpu, DCGM_FI_DEV_GPU_UTIL);
    # "gr_engine_active" (a MIG GPU's instances' DCGM_FI_PROF_GR_ENGINE_ACTIVE); "mig_sm_active" (a MIG GPU's
    # instances' SM activity times their shares, gpuledger's exporter); "mixed" (more than one in the window)
    busy_measure: str = ""
    # where its energy comes from: "" NVML's energy counter (or DCGM's); "power" integrated from power
    # samples (no energy counter: before Volta, gpuledger_gpu_energy_integrated_seconds_total); "mixed"
    energy_measure: str = ""


@dataclass(frozen=True)
class JobWeek:
    uuid: str
    host: str
    job: JobKey
    sampled_s: float
    busy_s: float
    energy_j: float
    sm_active_s: float | None = None  # None: not measured by this source
    allocated_idle_s: float | None = None
    partition: str = ""  # the scheduler's partition, where the source knows it
    # the job's share of the GPU's time (rounds x its share when jobs share the GPU); None: not
    # counted by this source, the report then charges the held time, scaled so the GPU's jobs
    # never pay for more time than the GPU had
    charged_s: float | None = None
    stalled_s: float | None = None  # the job's stalled busy seconds; None: not measured
    account: str = ""  # Slurm account (the PI's grant), where the source knows it
    qos: str = ""  # Slurm QOS, where the source knows it
    # the GPU's NVLink and PCIe bytes (sent + received) while the job held it, times its share;
    # None: not measured (no NVLink, or a source that cannot apportion them)
    nvlink_bytes: float | None = None
    pcie_bytes: float | None = None
    # the pod's labels chosen by [analytics] pod_labels (kube-state-metrics' kube_pod_labels, e.g.
    # ("label_team", "ml")), in name order; () where the source has none
    labels: tuple[tuple[str, str], ...] = ()
    # the cluster of the job's GPU where the window spans more than one cluster (a scheduler's job
    # ids are its own: two clusters both run a job 1001); "" otherwise. WeekData sets it.
    cluster: str = ""


class JobAttrs(Protocol):
    """What a job row says of who held which GPU, without its figures: a ``JobWeek``, or a
    ``domain.jobtable.JobView`` of a table's row (what groupings and job keys read)."""

    @property
    def uuid(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def job(self) -> JobKey: ...
    @property
    def partition(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def qos(self) -> str: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def cluster(self) -> str: ...


@dataclass(frozen=True)
class QueueWeek:
    partition: str
    source: str  # "exact" (job records) or "histogram" (estimated from buckets)
    started: int
    wait_mean: float | None
    wait_p50: float | None
    wait_p95: float | None
    wait_max: float | None
    wait_max_is_bound: bool  # True: a histogram's upper bucket bound, not an observed maximum
    pending_gpu_hours: float | None


@dataclass(frozen=True)
class FailureWeek:
    partition: str
    finished: dict[str, int]  # state -> count
    requeued: int
    failed_gpu_hours: float | None  # GPU-hours of jobs that ended in a failed state (domain.states)


@dataclass(frozen=True, slots=True)
class BenchRun:
    """One benchmark run's figure: when it finished (epoch seconds) and what it measured."""

    finished: float
    value: float


Runs = dict[int, tuple[BenchRun, ...]]  # world size -> the window's runs, in time order


@dataclass(frozen=True)
class ScalingPoint:
    """One GPU count of a ``gpuledger scaling`` run (None: not measured at that count)."""

    n: int
    status: str  # ok | failed | timeout
    step_seconds: float | None
    speedup: float | None
    efficiency: float | None
    samples_per_second: float | None
    cost_per_1000_steps: float | None


@dataclass(frozen=True)
class ScalingRun:
    """A user's own training script measured by ``gpuledger scaling --history`` (the record's
    figures as the command printed them: its cost model, its currency)."""

    name: str
    finished: float
    scaling: str  # weak | strong
    method: str  # two runs | step timer
    unit: str  # GPUs | ranks (CPU)
    currency: str
    points: tuple[ScalingPoint, ...]
    verdicts: tuple[str, ...]  # one sentence per N > 1, against 1 GPU


@dataclass(frozen=True)
class BenchWeek:
    """A window's benchmark figures: world size -> the median of the window's runs. The runs
    themselves (``*_runs``) are kept so one bad night is not hidden by the median; a figure with
    no runs recorded counts as one run."""

    busbw: dict[int, float] = field(default_factory=dict)  # all-reduce bus bandwidth at the largest size
    speedup: dict[int, float] = field(default_factory=dict)
    efficiency: dict[int, float] = field(default_factory=dict)
    throughput_1: float | None = None  # samples/s on one GPU
    throughput: dict[int, float] = field(default_factory=dict)  # samples/s on N GPUs
    model: str = ""
    busbw_runs: Runs = field(default_factory=dict)
    speedup_runs: Runs = field(default_factory=dict)
    efficiency_runs: Runs = field(default_factory=dict)
    scaling: tuple[ScalingRun, ...] = ()  # the users' own scripts (gpuledger scaling), the last run per name

    @classmethod
    def of_runs(
        cls, busbw: Runs, speedup: Runs, efficiency: Runs, throughput: dict[int, float], model: str
    ) -> BenchWeek:
        """The week from its runs: each figure the median of its runs."""
        return cls(
            medians(busbw),
            medians(speedup),
            medians(efficiency),
            throughput.get(1),
            throughput,
            model,
            busbw,
            speedup,
            efficiency,
        )


def medians(runs: Runs) -> dict[int, float]:
    return {n: statistics.median(r.value for r in rs) for n, rs in sorted(runs.items()) if rs}


@dataclass(frozen=True)
class WeekData:
    window: Window
    source: str  # prometheus | embedded | dcgm
    gpus: tuple[GpuWeek, ...]
    jobs: tuple[JobWeek, ...] | JobTable = ()  # a table: the same rows as columns (domain.jobtable)
    queue: tuple[QueueWeek, ...] = ()
    failures: tuple[FailureWeek, ...] = ()
    bench: BenchWeek | None = None
    approximations: tuple[str, ...] = ()  # what this source could only estimate
    problems: tuple[str, ...] = ()  # parts that could not be read: the report is incomplete
    history_start: float | None = None  # the source's first data (epoch seconds); None: not known

    def __post_init__(self) -> None:
        """Over several clusters, each job takes its GPU's cluster: job ids repeat across clusters
        (a source may have set it already: ``job_clusters``)."""
        clusters = job_clusters(self.gpus)
        if not isinstance(self.jobs, tuple):
            object.__setattr__(self, "jobs", self.jobs.in_clusters(clusters))
        elif clusters or any(j.cluster for j in self.jobs):
            jobs = tuple(j if j.cluster == (c := clusters.get(j.uuid, "")) else evolve(j, cluster=c) for j in self.jobs)
            object.__setattr__(self, "jobs", jobs)  # frozen: set once, here, before anyone reads it


def job_clusters(gpus: Iterable[GpuWeek]) -> dict[str, str]:
    """Each GPU's cluster where the GPUs are in more than one (a job's row then names its GPU's:
    ``JobWeek.cluster``); empty where they are in one or none."""
    clusters = {g.uuid: g.cluster for g in gpus}
    return clusters if len(set(clusters.values()) - {""}) > 1 else {}


@dataclass(frozen=True, slots=True)
class Day:
    """One local day of a window, clipped to it: [start, end) in epoch seconds."""

    start: float
    end: float
    date: str  # YYYY-MM-DD in the window's time zone

    @property
    def seconds(self) -> float:
        return self.end - self.start


def whole_day(date: str, timezone: str) -> Day:
    """The local day ``date`` (YYYY-MM-DD) in ``timezone``, unclipped: midnight to midnight."""
    tz = zoneinfo.ZoneInfo(timezone)
    day = dt.date.fromisoformat(date)
    start = dt.datetime.combine(day, dt.time(), tzinfo=tz).timestamp()
    return Day(start, dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=tz).timestamp(), date)


def days(w: Window) -> list[Day]:
    """The window's local days; a DST day is 23 or 25 hours long."""
    tz = zoneinfo.ZoneInfo(w.timezone)
    out: list[Day] = []
    day = dt.datetime.fromtimestamp(w.start, tz).date()
    while True:
        s = dt.datetime.combine(day, dt.time(), tzinfo=tz).timestamp()
        e = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=tz).timestamp()
        s, e = max(s, w.start), min(e, w.end)
        if s >= w.end:
            return out
        out.append(Day(s, e, day.isoformat()))
        day += dt.timedelta(days=1)
