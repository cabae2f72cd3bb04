"""Per-GPU sampler state and the one place that turns reader errors into bookkeeping."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from domain.jobs import JobKey
from exporter.attribution.shares import GpuJobs, JobCounters
from exporter.readers import (
    DeviceInfo,
    FactValue,
    GpuLost,
    MigLayout,
    NotSupported,
    Process,
    Reader,
    ReaderError,
    ReaderUnavailable,
    XidEvent,
)
from exporter.sampling.stalls import GPU as STALL_GPU
from exporter.sampling.stalls import StallRun
from exporter.snapshot import (
    GpuCounters,
    GpuGauges,
    GpuHealth,
    GpuSnapshot,
    JobMinuteRow,
    MigCounters,
    MinuteRow,
    job_minute_rows,
    mig_snapshot,
    minute_row,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class TrackedGpu:
    info: DeviceInfo
    counters: GpuCounters = field(default_factory=GpuCounters)
    gauges: GpuGauges = field(default_factory=GpuGauges)
    health: GpuHealth = field(default_factory=GpuHealth)
    up: bool = False
    lost: bool = False
    retry_at: float = 0.0  # monotonic time of the next attempt to bring a lost GPU back
    unsupported: set[str] = field(default_factory=set)
    # fast lane
    last_t: float | None = None  # reader time of the last tick (None: next tick is a baseline)
    last_sample_us: int = 0  # newest utilisation-buffer timestamp already integrated
    last_power: float | None = None
    energy_from_power: bool = False  # the energy counter is unsupported: integrate power
    stall: StallRun = field(default_factory=StallRun)  # the current run of stalled rounds
    mig_stall: dict[str, StallRun] = field(default_factory=dict)  # under MIG, each instance's (by MIG UUID)
    # slow lane
    energy_raw: float | None = None
    due: dict[str, float] = field(default_factory=dict)
    # the fact table (exporter.facts; counters' totals are in counters.facts)
    fact_gauges: dict[str, FactValue] = field(default_factory=dict)  # as last read
    fact_raw: dict[str, tuple[float, FactValue]] = field(default_factory=dict)  # counters' last reading, its time
    # idle gate (monotonic times): since when the GPU has been watched without a break, and
    # when it last had a process or utilisation at or over the gate's threshold
    observed_since: float | None = None
    last_active_at: float | None = None
    # jobs holding the GPU
    jobs: GpuJobs = field(default_factory=GpuJobs)

    def credit_stalled(self, counted: Mapping[Hashable, float]) -> None:
        """Add what a stall run counted (``stalls.step``) to the GPU's stalled counter and its jobs'
        (caller holds the sampler lock)."""
        c = self.counters
        for key, v in counted.items():
            if key == STALL_GPU:
                c.stalled_seconds = (c.stalled_seconds or 0.0) + v
            elif isinstance(key, JobKey) and (job := self.jobs.jobs.get(key)) is not None:
                job.stalled_seconds = (job.stalled_seconds or 0.0) + v

    procs_seen: list[Process] = field(default_factory=list)
    # MIG (exporter.sampling.mig): the layout as last read (None: MIG off), each instance's counters by MIG UUID
    mig: MigLayout | None = None
    mig_counters: dict[str, MigCounters] = field(default_factory=dict)
    # history
    minute_base: GpuCounters = field(default_factory=GpuCounters)
    job_minute_base: dict[JobKey, JobCounters] = field(default_factory=dict)

    def snapshot(self) -> GpuSnapshot:
        counters = self.counters.copy()
        return GpuSnapshot(
            info=self.info,
            up=self.up and not self.lost,
            gauges=self.gauges,
            health=self.health,
            counters=counters,
            jobs=self.jobs.copy(),
            facts={**self.fact_gauges, **counters.facts} if self.fact_gauges or counters.facts else {},
            mig=None if self.mig is None else mig_snapshot(self.mig, self.mig_counters),
        )

    def start_minute(self) -> None:
        """The history's minute starts now: its increments count from these counters."""
        self.minute_base = self.counters.copy()
        self.job_minute_base = self.jobs.copy()

    def close_minute(self, minute: int) -> list[MinuteRow | JobMinuteRow]:
        """This GPU's and its jobs' increments in ``minute`` (none when nothing grew); the next
        minute starts."""
        rows: list[MinuteRow | JobMinuteRow] = []
        row = minute_row(minute, self.info, self.counters, self.minute_base)
        if any(v for v in row.values.values()):
            rows.append(row)
        rows.extend(job_minute_rows(minute, self.info.uuid, self.jobs.jobs, self.job_minute_base))
        self.start_minute()
        return rows

    def forget_raw(self) -> None:
        """Drop the raw counter readings (the driver reopened, the GPU was lost): the next reading
        of each is a baseline again."""
        self.energy_raw = None
        self.fact_raw.clear()


def reopened(gpus: list[TrackedGpu], devices: list[DeviceInfo]) -> list[TrackedGpu]:
    """The GPUs after the reader (re)opened: each device found, known by UUID or new, up with its
    raw counters forgotten; a GPU that vanished stays, down, so its series persist."""
    known = {g.info.uuid: g for g in gpus}
    out = []
    for d in devices:
        g = known.pop(d.uuid, None) or TrackedGpu(info=d)
        g.info, g.up, g.lost, g.last_t, g.last_sample_us = d, True, False, None, 0
        g.forget_raw()
        out.append(g)
    for g in known.values():
        g.up = False
        out.append(g)
    return out


class ErrorBook:
    """Counts failed reader calls by call name and logs each kind of failure once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self._logged: set[tuple[str, int | None, str]] = set()

    def count(self, e: ReaderError) -> None:
        with self._lock:
            self.counts[e.call] = self.counts.get(e.call, 0) + 1
            key = (e.call, e.gpu, type(e).__name__)
            first = key not in self._logged
            self._logged.add(key)
        if first:
            log.warning("reader call failed (counted in gpuledger_reader_errors_total): %s", e)

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def call(gpu: TrackedGpu, name: str, fn: Callable[[], T], errors: ErrorBook) -> T | None:
    """Run one reader call for ``gpu``. Unsupported calls are remembered and skipped from
    then on; other failures are counted; ``GpuLost`` and ``ReaderUnavailable`` propagate so
    the caller can take the GPU (or the whole reader) down."""
    if name in gpu.unsupported:
        return None
    try:
        return fn()
    except NotSupported as e:
        gpu.unsupported.add(name)
        log.info("gpu %d: %s is not supported here; not asking again (%s)", gpu.info.index, name, e)
        return None
    except (GpuLost, ReaderUnavailable):
        raise
    except ReaderError as e:
        if not e.call:
            e.call = name
        errors.count(e)
        return None


def idle_status(gpus: list[TrackedGpu], window: float, now: float) -> tuple[bool, str]:
    """Whether every GPU has been watched, up and idle (no process, utilisation under the gate's
    threshold) for the last ``window`` seconds; and why not. Caller holds the sampler lock."""
    for g in gpus:
        i = g.info.index
        if not g.up or g.lost:
            return False, f"gpu {i} is down"
        if g.observed_since is None or now - g.observed_since < window:
            seen = 0.0 if g.observed_since is None else now - g.observed_since
            return False, f"gpu {i} has been watched for {seen:.0f} s of the {window:.0f} s idle window"
        if g.last_active_at is not None and now - g.last_active_at < window:
            return False, f"gpu {i} was busy {now - g.last_active_at:.0f} s ago"
    return True, "idle"


def watch_xids(
    reader: Reader,
    stop: threading.Event,
    up: Callable[[], bool],
    errors: ErrorBook,
    record: Callable[[list[XidEvent]], None],
) -> None:
    """The XID watcher thread: block on the reader's event set, one second at a time, until
    ``stop``; hand events to ``record``. Ends quietly where events cannot be watched."""
    while not stop.is_set():
        if not up():
            stop.wait(1.0)
            continue
        try:
            events = reader.wait_xid(1.0)
        except NotSupported as e:
            log.info("XID events cannot be watched (%s); gpuledger_gpu_xid_errors_total stays absent", e)
            return
        except ReaderError as e:
            e.call = e.call or "wait_xid"
            errors.count(e)
            stop.wait(5.0)
            continue
        if events:
            record(events)


def count_xids(gpus: list[TrackedGpu], events: list[XidEvent]) -> None:
    """Caller holds the sampler lock."""
    by_uuid = {g.info.uuid: g for g in gpus}
    for ev in events:
        g = by_uuid.get(ev.uuid)
        if g is None:
            log.warning("XID %d on an unknown GPU %r", ev.xid, ev.uuid)
            continue
        g.counters.xid_errors[ev.xid] = g.counters.xid_errors.get(ev.xid, 0) + 1
        log.warning("XID %d on gpu %d (%s)", ev.xid, g.info.index, ev.uuid)
