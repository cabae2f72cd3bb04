"""The jobs' rows of the metric table (attribution; see docs/jobs.md): per-GPU job counters from
each ``GpuSnapshot.jobs``, the Slurm jobs' account, partition and QOS as one info series per job
(``gpuledger_job_info``, joined on ``job_id``: the counters keep their labels, and a job's three
attributes cost one series on its host, not three more labels on six series per GPU), and the
attribution's status (the kubelet's, the claims not believed) as this feature's snapshot part."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.attribution.procfs import CLAIMS
from exporter.attribution.shares import JobCounters
from exporter.registry import Feature, Value, gpu_row, part_row, row
from exporter.snapshot import GpuSnapshot, Snapshot


@dataclass(frozen=True, slots=True)
class AttributionStatus:
    """The attribution's own state: whether the kubelet's pod-resources API answered last time
    (None: no socket in use), and the processes whose claim of their job was not believed, by claim
    (``exporter.attribution.procfs.CLAIMS``)."""

    kubelet_up: bool | None = None
    conflicts: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(CLAIMS, 0))


JOB_LABELS = ("job_id", "user", "pod", "namespace", "container")


SLURM_LABELS = ("job_id", "user", "account", "partition", "qos")


def _slurm_jobs(s: Snapshot) -> Value:
    """One series per Slurm job on this host whose environment named its account, partition or QOS."""
    return {(k.job_id, k.user, *k.slurm()): 1.0 for g in s.gpus for k in g.jobs if k.job_id and any(k.slurm())}


def _holding(g: GpuSnapshot) -> Value:
    return {k.labels(): 1.0 for k, c in g.jobs.items() if c.holding}


def _per_job(fn: Callable[[JobCounters], float | None]) -> Callable[[GpuSnapshot], Value]:
    """One series per job; a job whose counter is None (not measured) has none."""

    def value(g: GpuSnapshot) -> Value:
        return {k.labels(): float(v) for k, c in g.jobs.items() if (v := fn(c)) is not None}

    return value


def _links(g: GpuSnapshot) -> Value:
    return {(*k.labels(), link): v for k, c in g.jobs.items() for link, v in sorted(c.link_bytes.items())}


# fmt: off
FEATURE: Feature[AttributionStatus] = Feature("jobs", AttributionStatus, (
    gpu_row("gpuledger_gpu_job_info", "info", "", "A job holding the GPU now (Slurm job, pod, user); empty = unknown.",
            "processes + /proc cgroups + kubelet pod-resources", _holding, JOB_LABELS),
    gpu_row("gpuledger_job_gpu_sampled_seconds_total", "counter", "seconds",
            "Time a job held the GPU (covered rounds).", "attribution", _per_job(lambda c: c.sampled_seconds),
            JOB_LABELS),
    gpu_row("gpuledger_job_gpu_busy_seconds_total", "counter", "seconds",
            "The GPU's busy time times the job's share (per-process SM utilisation, else GPU memory held, "
            "else equal).",
            "attribution", _per_job(lambda c: c.busy_seconds), JOB_LABELS),
    gpu_row("gpuledger_job_gpu_charged_seconds_total", "counter", "seconds",
            "The job's share of the GPU's time (each round times its share, so jobs sharing a GPU never add "
            "up to more than its sampled time): what chargeback prices.", "attribution",
            _per_job(lambda c: c.charged_seconds), JOB_LABELS),
    gpu_row("gpuledger_job_gpu_stalled_seconds_total", "counter", "seconds",
            "The GPU's stalled busy time times the job's share, under MIG its instance's (GPM only; see "
            "gpuledger_gpu_stalled_seconds_total).",
            "attribution + GPM", _per_job(lambda c: c.stalled_seconds), JOB_LABELS),
    gpu_row("gpuledger_job_gpu_energy_joules_total", "counter", "joules",
            "The GPU's energy-counter increase apportioned by the job's share of power x time.",
            "attribution", _per_job(lambda c: c.energy_joules), JOB_LABELS),
    gpu_row("gpuledger_job_gpu_link_bytes_total", "counter", "bytes",
            "The GPU's NVLink or PCIe bytes (sent + received) while the job held it, times its share of the time "
            "between two reads of the link counters; absent for a link the GPU has no counter for.",
            "attribution + NVML field values", _links, (*JOB_LABELS, "link")),
    row("gpuledger_job_info", "info", "",
        "A Slurm job on this host with its account, partition and QOS as its environment names them "
        "(empty = not named); join on job_id.", "/proc/PID/environ (SLURM_JOB_ACCOUNT, _PARTITION, _QOS)",
        _slurm_jobs, SLURM_LABELS),
    part_row(AttributionStatus, "gpuledger_attribution_kubelet_up", "gauge", "",
             "1 when the kubelet's pod-resources API answered last time; absent where no socket is used.",
             "kubelet pod-resources",
             lambda a: None if a.kubelet_up is None else float(a.kubelet_up)),
    part_row(AttributionStatus, "gpuledger_job_attribute_conflicts_total", "counter", "",
             "GPU processes whose environment's claim of their Slurm job was not believed, by what it claimed: "
             "job_id (SLURM_JOB_ID names another job than its cgroup, or the process is outside every job cgroup "
             "on a node that has them), account, partition or qos (another value than the scheduler's record or "
             "the job's own processes gave it). Counted once per process and claim.",
             "/proc/PID/cgroup + /proc/PID/environ",
             lambda a: {(claim,): float(n) for claim, n in a.conflicts.items()}, ("attribute",)),
))
# fmt: on
