"""Per-job accounting on each GPU: which jobs hold it, and their share of its busy time and energy.

A *job* is whatever holds a GPU: a Slurm job, a Kubernetes container, or a user's own process;
its key carries every identity found (empty where unknown). When several jobs share a GPU in a
round, each gets a share of that round, weighted by (first available):

1. NVML's per-process SM utilisation (``process_utilization``),
2. the GPU memory each job's processes hold,
3. equal parts.

``sampled`` grows by the whole round for every holder (the time it held the GPU); ``charged`` by
the round × share (the job's part of the GPU's time: the holders' charged seconds of a round sum
to the round, so two jobs sharing a GPU never pay for more than the GPU); ``busy`` by the GPU's
busy time × share. Energy is apportioned from the GPU's energy counter: between two counter
reads each job accrues power × time × share, and the counter's increase is split in proportion, so
the jobs' energy never exceeds what the counter measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.jobs import JobKey
from exporter.attribution.kubelet import PodDevice
from exporter.attribution.procfs import Owner
from exporter.readers import Process, ProcessUtil


@dataclass(slots=True)
class JobCounters:
    sampled_seconds: float = 0.0
    busy_seconds: float = 0.0
    energy_joules: float = 0.0
    charged_seconds: float = 0.0  # the round x the job's share: what chargeback prices
    stalled_seconds: float | None = None  # stalled busy time x share; None: the GPU has no GPM
    power_integral: float = 0.0  # J by power x time x share since the last energy apportioning
    last_seen: float = 0.0  # monotonic
    holding: bool = False
    # the GPU's link bytes (sent + received) while the job held it, times its share, by link
    # ("nvlink", "pcie"); a link the GPU has no counter for is never a key
    link_bytes: dict[str, float] = dataclasses.field(default_factory=dict)
    link_charged: dict[str, float] = dataclasses.field(default_factory=dict)  # s x share since that link's last split

    def copy(self) -> JobCounters:
        return dataclasses.replace(self, link_bytes=dict(self.link_bytes), link_charged=dict(self.link_charged))


def job_key(owner: Owner | None, pod: PodDevice | None) -> JobKey:
    o = owner or Owner()
    if pod is not None:  # the kubelet allocated this GPU to a pod: its names beat cgroup ids
        return JobKey(o.job_id, o.user, pod.pod, pod.namespace, pod.container, *o.slurm())
    return JobKey(o.job_id, o.user, o.pod_uid, "", o.container_id[:12], *o.slurm())


def shares(
    procs: list[Process],
    owners: Mapping[int, Owner | None],
    util: list[ProcessUtil] | None,
    pod: PodDevice | None,
) -> dict[JobKey, float]:
    """Each holding job's share of this round (summing to 1), by the rules in the module doc."""
    if not procs:
        return {}
    keys = {p.pid: job_key(owners.get(p.pid), pod) for p in procs}
    sm = {u.pid: u.sm for u in util or [] if u.pid in keys}
    if sum(sm.values()) > 0:
        weights = {pid: sm.get(pid, 0.0) for pid in keys}
    elif any(p.used_memory_bytes for p in procs):
        weights = {p.pid: float(p.used_memory_bytes or 0) for p in procs}
    else:
        weights = dict.fromkeys(keys, 1.0)
    total = sum(weights.values())
    out: dict[JobKey, float] = {}
    for pid, key in keys.items():
        # a key that names the job's Slurm attributes replaces one that does not
        share = out.pop(key, 0.0) if any(key.slurm()) else out.get(key, 0.0)
        out[key] = share + weights[pid] / total
    return out


LINKS = ("nvlink", "pcie")


@dataclass
class GpuJobs:
    jobs: dict[JobKey, JobCounters] = field(default_factory=dict)
    gpu_power_integral: float = 0.0  # the whole GPU's, since the last energy apportioning
    link_sampled: dict[str, float] = field(default_factory=dict)  # covered seconds since each link's last split

    def integrate(
        self,
        holders: Mapping[JobKey, float],
        *,
        dt: float,
        busy: float,
        power: float | None,
        now: float,
        energy_from_power: bool,
        busy_of: Mapping[JobKey, float] | None = None,
    ) -> None:
        """Credit a covered round of ``dt`` seconds to ``holders`` (job -> share). A job's busy time is
        ``busy`` x its share, or ``busy_of[job]`` x ``dt`` where given (under MIG: its instances' own
        activity x their shares, ``exporter.sampling.mig``)."""
        for c in self.jobs.values():
            c.holding = False
        p = power or 0.0
        self.gpu_power_integral += p * dt
        for link in LINKS:
            self.link_sampled[link] = self.link_sampled.get(link, 0.0) + dt
        for key, share in holders.items():
            c = self._counters(key)
            c.holding, c.last_seen = True, now
            c.sampled_seconds += dt
            c.charged_seconds += dt * share
            for link in LINKS:
                c.link_charged[link] = c.link_charged.get(link, 0.0) + dt * share
            c.busy_seconds += (busy * share if busy_of is None else busy_of.get(key, 0.0)) * dt
            if energy_from_power:
                c.energy_joules += p * dt * share
            else:
                c.power_integral += p * dt * share

    def seen(self, holders: Mapping[JobKey, float], now: float) -> None:
        """A round that cannot be integrated (baseline, gap) still says who holds the GPU."""
        for c in self.jobs.values():
            c.holding = False
        for key in holders:
            c = self._counters(key)
            c.holding, c.last_seen = True, now

    def _counters(self, key: JobKey) -> JobCounters:
        """The job's counters, kept under ``key`` itself when it names the job's Slurm attributes
        (a job first seen before its environment could be read learns them later)."""
        c = self.jobs.pop(key, None) if any(key.slurm()) else self.jobs.get(key)
        if c is None:
            c = JobCounters()
        self.jobs[key] = c
        return c

    def apportion_energy(self, delta: float) -> None:
        """Split an increase of the GPU's energy counter over the jobs by their power integrals."""
        if self.gpu_power_integral > 0 and delta > 0:
            for c in self.jobs.values():
                c.energy_joules += delta * c.power_integral / self.gpu_power_integral
        for c in self.jobs.values():
            c.power_integral = 0.0
        self.gpu_power_integral = 0.0

    def apportion_link(self, link: str, delta: float) -> None:
        """Split an increase of the GPU's ``link`` bytes (sent + received) over the jobs by their share
        of the covered time since the last split, as the history splits each minute's; the part of
        the time no job held stays with the GPU. Read in the slow lanes, every 30 s by default."""
        sampled = self.link_sampled.get(link, 0.0)
        for c in self.jobs.values():
            held = c.link_charged.pop(link, 0.0)
            if sampled > 0 and delta >= 0 and held > 0:
                c.link_bytes[link] = c.link_bytes.get(link, 0.0) + delta * held / sampled
        self.link_sampled[link] = 0.0

    def expire(self, now: float, grace: float) -> None:
        """Forget jobs that left the GPU more than ``grace`` seconds ago (bounded cardinality)."""
        for key in [k for k, c in self.jobs.items() if not c.holding and now - c.last_seen > grace]:
            del self.jobs[key]

    def copy(self) -> dict[JobKey, JobCounters]:
        return {k: c.copy() for k, c in self.jobs.items()}
