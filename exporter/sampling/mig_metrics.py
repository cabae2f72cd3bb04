"""MIG's rows of the metric table (feature ``mig``): one series per MIG instance, read from each
``GpuSnapshot.mig`` (absent for a GPU not in MIG mode, so a GPU without MIG serves exactly what it did).

Labels are those a dcgm-exporter user knows, spelled as Prometheus labels are here: ``gpu`` and
``uuid`` are the parent GPU's (as on every per-GPU series, so a GPU counts once), ``gpu_instance_id``
is dcgm-exporter's ``GPU_I_ID``, ``mig_profile`` its ``GPU_I_PROFILE`` (``1g.10gb``), ``mig_uuid`` the
MIG device's UUID (what ``CUDA_VISIBLE_DEVICES`` and the kubelet name). The counters are a whole GPU's,
per instance; see ``exporter.sampling.mig`` for shares and busy time.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.registry import Feature, Kind, MetricDef, Value, gpu_row
from exporter.snapshot import GpuSnapshot, MigCounters, MigInstanceSnapshot

LABELS = ("gpu_instance_id", "mig_profile", "mig_uuid")
MIG_BUSY = "Under MIG NVML has no utilisation: busy time is the instance's SM activity (GPM SM_UTIL)."


def _key(i: MigInstanceSnapshot) -> tuple[str, str, str]:
    return (str(i.reading.gpu_instance_id), i.reading.profile, i.reading.uuid)


def per_instance(fn: Callable[[MigInstanceSnapshot], float | None]) -> Callable[[GpuSnapshot], Value]:
    """One series per instance of a GPU in MIG mode; none where ``fn`` is None (not read)."""

    def value(g: GpuSnapshot) -> Value:
        if g.mig is None:
            return None
        return {_key(i): float(v) for i in g.mig.instances if (v := fn(i)) is not None}

    return value


def _counter(field: str) -> Callable[[GpuSnapshot], Value]:
    if field not in MigCounters.__dataclass_fields__:
        raise ValueError(f"MigCounters has no {field}")
    return per_instance(lambda i: float(getattr(i.counters, field)))


def _info(g: GpuSnapshot) -> Value:
    if g.mig is None:
        return None
    return {(*_key(i), str(i.reading.compute_instance_id)): 1.0 for i in g.mig.instances}


def _row(name: str, kind: Kind, unit: str, help: str, source: str, fn: Callable[[GpuSnapshot], Value]) -> MetricDef:
    """A per-instance row: labels gpu, uuid (the parent's) and ``LABELS``."""
    return gpu_row(name, kind, unit, help, source, fn, LABELS)


# fmt: off
ROWS: tuple[MetricDef, ...] = (
    gpu_row("gpuledger_mig_instance_info", "info", "",
            "A MIG instance of the GPU (one compute instance in a GPU instance); always 1.",
            "nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId, "
            "nvmlDeviceGetAttributes", _info, (*LABELS, "compute_instance_id")),
    _row("gpuledger_mig_share_ratio", "gauge", "ratio",
         "The instance's share of its GPU: its compute slices over the GPU's (1/7 for a 1g on an H100). A job on "
         "it holds and is charged this share.", "nvmlDeviceGetAttributes, nvmlDeviceGetGpuInstanceProfileInfo",
         per_instance(lambda i: i.share)),
    _row("gpuledger_mig_sm_share_ratio", "gauge", "ratio",
         "The instance's SMs over the GPU's (information: not what is charged; 16 of 132 for a 1g on an H100).",
         "nvmlDeviceGetAttributes, nvmlDeviceGetGpuInstanceProfileInfo", per_instance(lambda i: i.sm_share)),
    _row("gpuledger_mig_sm_count", "gauge", "", "Streaming multiprocessors of the instance.",
         "nvmlDeviceGetAttributes", per_instance(lambda i: i.reading.sm_count)),
    # --- exact counters: divide rate(x) by rate(sampled) ----------------------------------------------------------
    _row("gpuledger_mig_sampled_seconds_total", "counter", "seconds",
         "Time covered by successful samples of the instance: the denominator for its *_seconds_total counters.",
         "sampler clock", _counter("sampled_seconds")),
    _row("gpuledger_mig_busy_seconds_total", "counter", "seconds", "Integral of the instance's busy share. " + MIG_BUSY,
         "nvmlGpmMigSampleGet (SM_UTIL)", _counter("busy_seconds")),
    _row("gpuledger_mig_sm_active_seconds_total", "counter", "seconds",
         "Integral of the instance's SM activity (GPM).", "nvmlGpmMigSampleGet (SM_UTIL)",
         _counter("sm_active_seconds")),
    _row("gpuledger_mig_tensor_active_seconds_total", "counter", "seconds",
         "Integral of the instance's tensor-core activity (GPM).", "nvmlGpmMigSampleGet (ANY_TENSOR_UTIL)",
         _counter("tensor_active_seconds")),
    _row("gpuledger_mig_dram_active_seconds_total", "counter", "seconds",
         "Integral of the instance's DRAM bandwidth use (GPM).", "nvmlGpmMigSampleGet (DRAM_BW_UTIL)",
         _counter("dram_active_seconds")),
    _row("gpuledger_mig_allocated_seconds_total", "counter", "seconds",
         "Time with at least one compute process on the instance.",
         "nvmlDeviceGetComputeRunningProcesses (MIG handle)", _counter("allocated_seconds")),
    _row("gpuledger_mig_allocated_idle_seconds_total", "counter", "seconds",
         "Time a compute process held the instance while its busy share stayed under [exporter] "
         "allocated_idle_below. " + MIG_BUSY, "processes + GPM", _counter("allocated_idle_seconds")),
    # --- gauges -------------------------------------------------------------------------------------------------
    _row("gpuledger_mig_memory_used_bytes", "gauge", "bytes", "Instance memory in use.",
         "nvmlDeviceGetMemoryInfo (MIG handle)",
         per_instance(lambda i: None if i.reading.memory is None else i.reading.memory.used_bytes)),
    _row("gpuledger_mig_memory_total_bytes", "gauge", "bytes", "Instance memory in total.",
         "nvmlDeviceGetMemoryInfo (MIG handle)",
         per_instance(lambda i: None if i.reading.memory is None else i.reading.memory.total_bytes)),
    _row("gpuledger_mig_processes", "gauge", "", "Compute processes on the instance.",
         "nvmlDeviceGetComputeRunningProcesses (MIG handle)",
         per_instance(lambda i: None if i.reading.processes is None else len(i.reading.processes))),
    gpu_row("gpuledger_gpu_mig_sampled_seconds_total", "counter", "seconds",
            "Time covered by samples while the GPU was in MIG mode: its gpuledger_gpu_busy_seconds_total then counts "
            "its instances' SM activity times their shares, not NVML's utilisation (absent until the GPU is first "
            "seen in MIG mode).", "sampler clock + nvmlDeviceGetMigMode",
            lambda g: g.counters.mig_sampled_seconds),
    gpu_row("gpuledger_gpu_mig_unallocated_ratio", "gauge", "ratio",
            "Share of a MIG-mode GPU's compute slices in no instance: the instances' gpuledger_mig_share_ratio plus "
            "this make 1 (absent when MIG is off).", "nvmlDeviceGetAttributes, nvmlDeviceGetGpuInstanceProfileInfo",
            lambda g: None if g.mig is None else g.mig.unallocated),
)
# fmt: on

FEATURE: Feature[object] = Feature("mig", None, ROWS)
