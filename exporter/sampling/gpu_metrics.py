"""GPU sampling's rows of the metric table: the sampler's own health (feature ``exporter``) and
every per-GPU reading and counter (feature ``gpu``), read from the core snapshot; the ``gpu``
feature ends with the rows of the GPU fact table (``exporter.facts``, ``fact_metrics.ROWS``)."""

from __future__ import annotations

from exporter import __version__
from exporter.readers import CLOCK_EVENT_REASONS
from exporter.registry import Feature, MetricDef, Value, gpu_row, row
from exporter.sampling import fact_metrics
from exporter.snapshot import GpuSnapshot, Snapshot


def _flag(v: object) -> float | None:
    return None if v is None else float(bool(v))


def _nvml_up(s: Snapshot) -> Value:
    return None if s.nvml_state is None else float(s.nvml_state)


def _identity(s: Snapshot, g: GpuSnapshot | None) -> Value:
    return None if g is None else {(g.info.model, g.info.pci_bus_id, s.driver_version, s.hostname): 1.0}


def _reasons(g: GpuSnapshot) -> Value:
    mask = g.gauges.clock_event_reasons
    if mask is None:
        return None
    return {(name,): float(bool(mask & bit)) for bit, name in CLOCK_EVENT_REASONS.items()}


def _ecc(g: GpuSnapshot) -> Value:
    e = g.health.ecc
    if e is None:
        return None
    out = {("corrected",): e.corrected, ("uncorrected",): e.uncorrected}
    return {k: float(v) for k, v in out.items() if v is not None}


def _remapped(g: GpuSnapshot) -> Value:
    r = g.health.remapped
    return None if r is None else {("correctable",): float(r.correctable), ("uncorrectable",): float(r.uncorrectable)}


def _pcie(g: GpuSnapshot) -> Value:
    p = g.health.pcie
    return None if p is None else {("tx",): p.tx_bytes_per_second, ("rx",): p.rx_bytes_per_second}


# fmt: off
SAMPLER: Feature[object] = Feature("exporter", None, (
    row("gpuledger_exporter_info", "info", "", "Exporter version and the reader it uses (nvml, replay, fake).",
        "exporter", lambda s: {(__version__, s.reader): 1.0}, ("version", "reader")),
    row("gpuledger_nvml_up", "gauge", "", "1 when NVML is initialised and answering; absent where the reader "
        "uses no NVML (a replay: see gpuledger_exporter_info{reader}).", "nvmlInit", _nvml_up),
    row("gpuledger_reader_errors_total", "counter", "", "Failed reader calls by call name (unsupported is no error).",
        "sampler", lambda s: {(k,): float(v) for k, v in s.reader_errors.items()}, ("call",)),
    row("gpuledger_sample_duration_seconds", "gauge", "seconds", "Duration of the last fast round over all GPUs.",
        "sampler", lambda s: s.sample_duration_seconds),
    row("gpuledger_last_sample_timestamp_seconds", "gauge", "seconds", "Wall-clock time of the last sampling round.",
        "sampler", lambda s: s.taken_at or None),
))

GPU: Feature[object] = Feature("gpu", None, (
    # --- identity and health ------------------------------------------------------------------------------------
    MetricDef("gpuledger_gpu_info", "info", "", "GPU identity; always 1.",
              ("gpu", "uuid", "model", "pci_bus_id", "driver_version", "hostname"),
              "nvmlDeviceGetName, nvmlDeviceGetPciInfo, nvmlSystemGetDriverVersion", True, _identity),
    gpu_row("gpuledger_gpu_up", "gauge", "", "1 while the GPU answers; 0 when lost or unreadable.",
            "sampler", lambda g: float(g.up)),
    gpu_row("gpuledger_gpu_xid_errors_total", "counter", "", "XID error events seen by the exporter, by XID code.",
            "nvmlEventSetWait (XID critical errors)",
            lambda g: {(str(k),): float(v) for k, v in g.counters.xid_errors.items()}, ("xid",)),
    gpu_row("gpuledger_gpu_ecc_errors_total", "counter", "", "Volatile ECC error count since the driver loaded.",
            "nvmlDeviceGetTotalEccErrors (volatile)", _ecc, ("error_type",)),
    gpu_row("gpuledger_gpu_remapped_rows", "gauge", "", "Memory rows remapped, by cause.",
            "nvmlDeviceGetRemappedRows", _remapped, ("cause",)),
    gpu_row("gpuledger_gpu_row_remap_pending", "gauge", "", "1 when a row remap waits for a GPU reset.",
            "nvmlDeviceGetRemappedRows", lambda g: _flag(g.health.remapped and g.health.remapped.pending)),
    gpu_row("gpuledger_gpu_row_remap_failed", "gauge", "", "1 when a row remap failed (the GPU needs service).",
            "nvmlDeviceGetRemappedRows", lambda g: _flag(g.health.remapped and g.health.remapped.failed)),
    gpu_row("gpuledger_gpu_clock_event_active", "gauge", "", "1 while a clock-event (throttle) reason is active.",
            "nvmlDeviceGetCurrentClocksEventReasons", _reasons, ("reason",)),
    # --- exact counters: divide rate(x) by rate(sampled) ----------------------------------------------------------
    gpu_row("gpuledger_gpu_sampled_seconds_total", "counter", "seconds",
            "Time covered by successful samples: the denominator for the *_seconds_total counters.",
            "sampler clock", lambda g: g.counters.sampled_seconds),
    gpu_row("gpuledger_gpu_busy_seconds_total", "counter", "seconds",
            "Integral of utilisation (a kernel running), from the sub-second samples buffer where available.",
            "nvmlDeviceGetSamples(GPU_UTILIZATION), else nvmlDeviceGetUtilizationRates",
            lambda g: g.counters.busy_seconds),
    gpu_row("gpuledger_gpu_sm_active_seconds_total", "counter", "seconds",
            "Integral of SM activity (Hopper GPM; absent without it).",
            "GPM SM_UTIL", lambda g: g.counters.sm_active_seconds),
    gpu_row("gpuledger_gpu_tensor_active_seconds_total", "counter", "seconds",
            "Integral of tensor-core activity (GPM; absent without it).", "GPM ANY_TENSOR_UTIL",
            lambda g: g.counters.tensor_active_seconds),
    gpu_row("gpuledger_gpu_dram_active_seconds_total", "counter", "seconds",
            "Integral of DRAM bandwidth use (GPM; absent without it).",
            "GPM DRAM_BW_UTIL", lambda g: g.counters.dram_active_seconds),
    gpu_row("gpuledger_gpu_stalled_seconds_total", "counter", "seconds",
            "Busy time that was stalled: utilisation high while SMs, tensor cores and DRAM stay near still for "
            "stalled_min_seconds or more (a hung collective, a spin-wait); busy minus stalled is working time. "
            "GPM only. Under MIG each instance is judged alone, GPM's graphics activity standing for utilisation, "
            "and counts its busy time (its share x its SM activity).",
            "utilisation (MIG: GPM GRAPHICS_UTIL) + GPM SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL",
            lambda g: g.counters.stalled_seconds),
    gpu_row("gpuledger_gpu_energy_joules_total", "counter", "joules",
            "Energy since the exporter started, from the NVML energy counter (integrated power where unsupported).",
            "nvmlDeviceGetTotalEnergyConsumption", lambda g: g.counters.energy_joules),
    gpu_row("gpuledger_gpu_energy_integrated_seconds_total", "counter", "seconds",
            "Time whose energy gpuledger_gpu_energy_joules_total integrated from power samples, the GPU having no "
            "energy counter (before Volta): an estimate between samples (absent while the counter answers).",
            "nvmlDeviceGetPowerUsage", lambda g: g.counters.energy_integrated_seconds),
    gpu_row("gpuledger_gpu_allocated_seconds_total", "counter", "seconds", "Time with at least one compute process.",
            "nvmlDeviceGetComputeRunningProcesses", lambda g: g.counters.allocated_seconds),
    gpu_row("gpuledger_gpu_allocated_idle_seconds_total", "counter", "seconds",
            "Time a compute process held the GPU while utilisation stayed under [exporter] allocated_idle_below.",
            "processes + utilisation", lambda g: g.counters.allocated_idle_seconds),
    gpu_row("gpuledger_gpu_clock_event_seconds_total", "counter", "seconds", "Time each clock-event reason was active.",
            "nvmlDeviceGetCurrentClocksEventReasons",
            lambda g: {(k,): v for k, v in g.counters.clock_event_seconds.items()}, ("reason",)),
    # --- gauges -------------------------------------------------------------------------------------------------
    gpu_row("gpuledger_gpu_power_watts", "gauge", "watts", "Power draw.",
            "nvmlDeviceGetPowerUsage", lambda g: g.gauges.power_watts),
    gpu_row("gpuledger_gpu_power_limit_watts", "gauge", "watts", "Enforced power limit.",
            "nvmlDeviceGetEnforcedPowerLimit", lambda g: g.health.power_limit_watts),
    gpu_row("gpuledger_gpu_utilization_ratio", "gauge", "ratio",
            "Share of the last NVML sample period with a kernel running (as nvidia-smi; aliased: prefer the counters).",
            "nvmlDeviceGetUtilizationRates", lambda g: g.gauges.utilization),
    gpu_row("gpuledger_gpu_memory_utilization_ratio", "gauge", "ratio",
            "Share of the last sample period with device memory being read or written.",
            "nvmlDeviceGetUtilizationRates", lambda g: g.gauges.memory_utilization),
    gpu_row("gpuledger_gpu_memory_used_bytes", "gauge", "bytes", "Device memory in use.",
            "nvmlDeviceGetMemoryInfo", lambda g: g.gauges.memory_used_bytes),
    gpu_row("gpuledger_gpu_memory_total_bytes", "gauge", "bytes", "Device memory in total.",
            "nvmlDeviceGetMemoryInfo", lambda g: g.gauges.memory_total_bytes),
    gpu_row("gpuledger_gpu_temperature_celsius", "gauge", "celsius", "GPU core temperature.",
            "nvmlDeviceGetTemperature", lambda g: g.gauges.temperature_celsius),
    gpu_row("gpuledger_gpu_sm_clock_hertz", "gauge", "hertz", "SM clock.",
            "nvmlDeviceGetClockInfo(SM)", lambda g: g.gauges.sm_clock_hertz),
    gpu_row("gpuledger_gpu_memory_clock_hertz", "gauge", "hertz", "Memory clock.",
            "nvmlDeviceGetClockInfo(MEM)", lambda g: g.gauges.memory_clock_hertz),
    gpu_row("gpuledger_gpu_processes", "gauge", "", "Compute processes on the GPU.",
            "nvmlDeviceGetComputeRunningProcesses", lambda g: g.gauges.processes),
    gpu_row("gpuledger_gpu_pcie_throughput_bytes_per_second", "gauge", "bytes_per_second",
            "PCIe throughput by direction (slow lane).",
            "the mean rate of gpuledger_gpu_pcie_bytes_total between two reads (pcie lane); "
            "nvmlDeviceGetPcieThroughput where NVML has no PCIe byte counter", _pcie, ("direction",)),
    # --- the GPU fact table (exporter/facts) ---------------------------------------------------------------------
    *fact_metrics.ROWS,
))
# fmt: on
