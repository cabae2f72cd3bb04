"""The weekly report as data (JSON schema ``gpuledger.report/v1``); every renderer reads this.

Money is in ``Report.currency``; hours are GPU-hours; ratios are 0..1; None means "not measured
by this source" (and renders as a dash), never zero.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from daemonkit.jsondoc import STRICT

SCHEMA = "gpuledger.report/v1"
TOP_IDLE = 20  # rows of the held-but-idle table (Report.idle_holders)
TOP_STALLED = 20  # rows of the stalled-jobs table (Report.stalled_jobs)
TOP_LINKS = 20  # rows of the multi-GPU jobs' traffic table (Report.link_jobs)
T = TypeVar("T")
UNALLOCATED = "unallocated"  # the group and key of the row for what no job was charged


@dataclass(frozen=True)
class CostRow:
    """One group's week: the fleet, a host, a GPU model, a GPU, a user or a job."""

    # fleet | host | model | gpu | job | a grouping of analytics.report.groupings (user, namespace,
    # account, partition, qos, cluster, label:<name> for a pod label, e.g. label:label_team) |
    # unallocated (what no job was charged: each job grouping + unallocated = jobs + unallocated =
    # hosts = fleet, in every cost column)
    group: str
    key: str
    gpus: int
    available_gpu_hours: float  # GPUs x hours of the window
    sampled_gpu_hours: float  # of those, hours with data
    busy_gpu_hours: float
    sm_active_gpu_hours: float | None
    useful_gpu_hours: float  # busy less stalled, or SM-active, as the cost model says (useful_measure: which)
    utilization: float | None  # busy / sampled
    sm_activity: float | None  # SM-active / sampled
    allocated_gpu_hours: float | None
    allocated_idle_gpu_hours: float | None
    energy_kwh: float | None
    energy_cost: float
    hardware_cost: float
    total_cost: float
    cost_per_useful_gpu_hour: float | None
    idle_cost: float  # hardware or rental rate x (available - useful) hours; energy not included
    coverage: float  # sampled / available
    stalled_gpu_hours: float | None = None  # busy but stalled (not useful); None: not measured
    co2e_kg: float | None = None  # energy x PUE x grid intensity; None: no intensity configured or no energy
    # what its useful hours count (analytics.report.useful): sm_active | busy | mixed (some of its
    # GPUs, or jobs, without SM activity); "" in reports from before it
    useful_measure: str = ""
    useful_sm_share: float | None = None  # share of its sampled GPU-hours counted by SM activity (the rest: busy)
    # what its busy hours count: utilization (NVML's utilization.gpu, DCGM_FI_DEV_GPU_UTIL), gr_engine_active
    # (MIG GPUs: their instances' DCGM_FI_PROF_GR_ENGINE_ACTIVE, by slices), mig_sm_active (MIG GPUs under
    # gpuledger's exporter: their instances' SM activity, by slices), mixed; "" in reports from before it
    busy_measure: str = ""
    # where its energy comes from: counter (NVML's or DCGM's energy counter), power (integrated from power
    # samples: no energy counter, before Volta), mixed; "" in reports from before it
    energy_measure: str = ""


@dataclass(frozen=True)
class DayRow:
    date: str  # YYYY-MM-DD in the report's time zone
    sampled_gpu_hours: float
    busy_gpu_hours: float
    energy_kwh: float | None


@dataclass(frozen=True)
class QueueRow:
    partition: str
    source: str  # exact | histogram
    jobs_started: int
    wait_mean_s: float | None
    wait_p50_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    wait_max_is_bound: bool
    pending_gpu_hours: float | None


@dataclass(frozen=True)
class FailureRow:
    partition: str
    completed: int
    failed: int  # FAILED, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE (domain.states.FAILED but TIMEOUT)
    cancelled: int
    timeout: int
    other: int  # PREEMPTED, and any state a later Slurm adds
    requeued: int
    failed_gpu_hours: float | None  # GPU-hours of the failed jobs, timed out ones included


@dataclass(frozen=True)
class BenchRow:
    metric: str  # allreduce_busbw_bytes_per_second | train_speedup | train_efficiency
    world_size: int
    value: float  # the median of the week's runs
    previous: float | None  # the previous week's median
    change: float | None  # value / previous - 1
    dropped: bool  # some run of the week more than 10 % under the previous week's median
    runs: int = 1  # runs of the week
    worst: float | None = None  # the week's worst run (lowest figure)
    worst_change: float | None = None  # worst / previous - 1
    worst_at: float | None = None  # when the worst run finished (epoch seconds); None: not known
    worst_date: str = ""  # its night: YYYY-MM-DD in the report's time zone


@dataclass(frozen=True)
class VerdictRow:
    """Multi-GPU: cost per million samples at N GPUs against one, from the measured speedup."""

    world_size: int
    speedup: float
    efficiency: float
    cost_per_million_samples_1: float | None
    cost_per_million_samples_n: float | None
    extra_cost: float  # 1 / efficiency - 1
    verdict: str


@dataclass(frozen=True)
class RentRow:
    model: str
    owned_per_gpu_hour: float  # fixed cost of owning, per hour
    energy_per_busy_hour: float
    cloud_per_gpu_hour: float | None
    breakeven_utilization: float | None  # owning beats renting above this
    utilization: float | None  # this week's busy / available
    verdict: str


@dataclass(frozen=True)
class PriceRow:
    """The price applied to a host's GPUs of one model (so readers and dashboards see it)."""

    host: str
    model: str
    kind: str  # owned | cloud
    gpus: int
    per_gpu_hour: float  # hardware (owned: depreciation + operations) or rental
    energy_included: bool  # a cloud price that includes energy: no energy cost is added
    example: bool  # the placeholder price, not configured


@dataclass(frozen=True)
class IdleRow:
    """A job that held GPUs without using them: the worst idle holders, by idle cost."""

    user: str
    job: str
    partition: str  # "" where the source does not know it
    gpus: int
    idle_gpu_hours: float  # hours charged and not useful (charged - useful)
    idle_cost: float  # the hardware or rental rate x those hours


@dataclass(frozen=True)
class StalledRow:
    """A job whose GPUs were busy but stalled (utilisation high, SMs, tensor cores and DRAM
    quiet: a hang or a spin-wait): the worst, by stalled GPU-hours."""

    user: str
    job: str
    partition: str  # "" where the source does not know it
    gpus: int
    stalled_gpu_hours: float
    stalled_cost: float  # the hardware or rental rate x those hours


@dataclass(frozen=True)
class LinkRow:
    """A multi-GPU job's traffic over its GPUs' links per GPU-hour it was charged: the GPUs' NVLink
    and PCIe bytes (sent + received) while it held them, times its share. The communication a
    multi-GPU job pays for; None: not measured (no NVLink, or the source cannot apportion it)."""

    user: str
    job: str
    partition: str
    gpus: int
    gpu_hours: float  # charged GPU-hours
    utilization: float | None
    nvlink_gb_per_gpu_hour: float | None
    pcie_gb_per_gpu_hour: float | None


@dataclass(frozen=True)
class ScalingRow:
    """One GPU count of a user's own training script measured by ``gpuledger scaling --history``
    (the last run of each name up to the window's end): the command's own figures and verdict."""

    name: str
    date: str  # YYYY-MM-DD of the run, in the report's time zone
    scaling: str  # weak | strong
    gpus: int
    unit: str  # GPUs | ranks (CPU)
    status: str  # ok | failed | timeout
    step_seconds: float | None
    samples_per_second: float | None
    speedup: float | None
    efficiency: float | None
    cost_per_1000_steps: float | None
    currency: str  # the run's own (its config's), which may differ from the report's
    verdict: str  # "" at one GPU


@dataclass(frozen=True)
class Delta:
    figure: str
    value: float | None
    previous: float | None
    change: float | None


@dataclass(frozen=True)
class Report:
    __pydantic_config__ = STRICT  # read back strictly, every row too: a string cost is an error

    week: str
    start: float
    end: float
    timezone: str
    generated_at: float
    currency: str
    useful_measure: str  # the fleet's: busy | sm_active | mixed (fleet.useful_sm_share: how much of each)
    source: str
    approximations: list[str]
    example_prices: bool
    complete: bool
    incomplete_reasons: list[str]
    coverage: float
    fleet: CostRow
    rows: list[CostRow]  # host, model, gpu, user, job groups
    daily: list[DayRow]
    queue: list[QueueRow]
    failures: list[FailureRow]
    benchmarks: list[BenchRow]
    multi_gpu: list[VerdictRow]
    rent_vs_buy: list[RentRow]
    deltas: list[Delta]
    schema: str = SCHEMA
    notes: list[str] = field(default_factory=list)
    prices: list[PriceRow] = field(default_factory=list)
    charged_start: float | None = None  # the hours charged: from the first data (or the start)...
    charged_end: float | None = None  # ...up to now (or the end); None in older reports: the window
    history_start: float | None = None  # set when the window starts before the history: its first data
    in_progress: bool = False  # the window ends after the report was made
    elapsed: float = 1.0  # share of the window's hours that had elapsed when the report was made
    idle_holders: list[IdleRow] = field(default_factory=list)  # top jobs by idle cost; [] in older reports
    stalled_jobs: list[StalledRow] = field(default_factory=list)  # top jobs by stalled hours; [] in older reports
    link_jobs: list[LinkRow] = field(default_factory=list)  # top multi-GPU jobs by GPU-hours; [] in older reports
    scaling: list[ScalingRow] = field(default_factory=list)  # users' scripts (gpuledger scaling); [] in older reports

    def group(self, name: str) -> list[CostRow]:
        """The rows of one group, in the report's order (a new list: the caller may change it)."""
        return list(self.derived("groups", self._by_group).get(name, ()))

    def _by_group(self) -> dict[str, list[CostRow]]:
        by: dict[str, list[CostRow]] = {}
        for r in self.rows:
            by.setdefault(r.group, []).append(r)
        return by

    def derived(self, name: str, make: Callable[[], T]) -> T:
        """What ``make`` derives from this report, made once while its rows stay the same list of
        the same length (the renderers ask for a group's rows ~40 times, and the Markdown and HTML
        for the same tables: 120,000 rows at 10,000 GPUs). Kept beside the fields, never written
        out; shared: read it, do not change it."""
        held = self.__dict__.get("_derived")
        if held is None or held[0] is not self.rows or held[1] != len(self.rows):
            held = self.__dict__["_derived"] = (self.rows, len(self.rows), {})
        made: dict[str, Any] = held[2]
        if name not in made:
            made[name] = make()
        result: T = made[name]
        return result

    def window_notes(self) -> list[str]:
        """The banner lines of a window that is not complete and past: in progress, history start."""
        return window_notes(self.in_progress, self.elapsed, self.history_start, self.timezone)


def window_notes(in_progress: bool, elapsed: float, history_start: float | None, timezone: str) -> list[str]:
    """What the window's figures cover when it is not a complete, past window."""
    out = []
    if history_start is not None:
        local = dt.datetime.fromtimestamp(history_start, zoneinfo.ZoneInfo(timezone))
        out.append(f"history starts {local:%Y-%m-%d %H:%M}: the hours before it are not charged")
    if in_progress:
        out.append(f"in progress, {100 * elapsed:.0f} % elapsed: only the hours up to now are charged")
    return out
