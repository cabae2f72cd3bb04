"""THE metric table: every metric the exporter serves, defined once.

Each row gives the name, type, unit, help, labels, where the value comes from (for the docs)
and how to take it from a snapshot. The collector and ``docs/metrics.md`` are both generated
from ``METRICS``; to find where a metric comes from, start here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from exporter import __version__
from exporter.benchmarks.results import AllreduceResult
from exporter.readers import CLOCK_EVENT_REASONS
from exporter.state import GpuSnapshot, Histogram, Snapshot

Kind = Literal["counter", "gauge", "info", "histogram"]
Value = float | None | Mapping[Any, float | Histogram]
"""A plain value, or label values (beyond gpu/uuid) -> value."""
GPU_LABELS = ("gpu", "uuid")


@dataclass(frozen=True)
class MetricDef:
    name: str  # as exposed (counters end in _total, info metrics in _info)
    kind: Kind
    unit: str  # Prometheus base unit, "" for plain counts and states
    help: str
    labels: tuple[str, ...]  # every label, in exposition order
    source: str  # where the value comes from, for docs/metrics.md
    per_gpu: bool
    value: Callable[[Snapshot, GpuSnapshot | None], Value]

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (without _total / _info)."""
        for suffix in ("_total", "_info"):
            if self.kind in ("counter", "info") and self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name


def _gpu(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[GpuSnapshot], Value],
    extra: tuple[str, ...] = (),
) -> MetricDef:
    return MetricDef(
        name,
        kind,
        unit,
        help,
        GPU_LABELS + extra,
        source,
        True,
        lambda s, g: fn(g) if g is not None else None,
    )


def _exp(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[Snapshot], Value],
    labels: tuple[str, ...] = (),
) -> MetricDef:
    return MetricDef(name, kind, unit, help, labels, source, False, lambda s, g: fn(s))


def _proc(s: Snapshot, field: str) -> float | None:
    return None if s.process is None else float(getattr(s.process, field))


def _flag(v: object) -> float | None:
    return None if v is None else float(bool(v))


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


def _allreduce_sizes(field: str) -> Callable[[Snapshot], Value]:
    def get(s: Snapshot) -> Value:
        ar = s.bench.allreduce if s.bench else None
        if ar is None:
            return None
        return {(ar.backend, str(ar.world_size), str(r.size_bytes)): float(getattr(r, field)) for r in ar.rows}

    return get


def _allreduce(fn: Callable[[AllreduceResult], float]) -> Callable[[Snapshot], Value]:
    def get(s: Snapshot) -> Value:
        ar = s.bench.allreduce if s.bench else None
        return None if ar is None else {(ar.backend, str(ar.world_size)): float(fn(ar))}

    return get


def _train(field: str) -> Callable[[Snapshot], Value]:
    def get(s: Snapshot) -> Value:
        t = s.bench.train if s.bench else None
        if t is None:
            return None
        return {(t.model, str(r.world_size)): float(v) for r in t.rows if (v := getattr(r, field)) is not None}

    return get


def _predicted(s: Snapshot) -> Value:
    t = s.bench.train if s.bench else None
    if t is None:
        return None
    out: dict[tuple[str, ...], float] = {}
    for r in t.rows:
        for overlap, v in (("none", r.predicted_speedup_no_overlap), ("full", r.predicted_speedup_full_overlap)):
            if v is not None:
                out[(t.model, str(r.world_size), overlap)] = v
    return out


JOB_LABELS = ("job_id", "user", "pod", "namespace", "container")


def _jobs(field: str, holding_only: bool = False) -> Callable[[GpuSnapshot], Value]:
    def get(g: GpuSnapshot) -> Value:
        return {k.labels(): (1.0 if holding_only else float(getattr(c, field)))
                for k, c in g.jobs.items() if c.holding or not holding_only}  # fmt: skip

    return get


def _queue(field: str) -> Callable[[Snapshot], Value]:
    def get(s: Snapshot) -> Value:
        if s.queue is None:
            return None
        data: Mapping[Any, Any] = getattr(s.queue, field)
        return {(k if isinstance(k, tuple) else (k,)): v if isinstance(v, Histogram) else float(v)
                for k, v in data.items()}  # fmt: skip

    return get


def _bench_runs(s: Snapshot) -> Value:
    return None if s.bench is None else {k: float(v) for k, v in s.bench.runs.items()}


# fmt: off
# Each row: name, type, unit, help, source, value (and extra labels beyond gpu/uuid).
METRICS: tuple[MetricDef, ...] = (
    # --- the exporter itself ------------------------------------------------------------------------------------
    _exp("gpuledger_exporter_info", "info", "", "Exporter version and the reader it uses (nvml, replay, fake).",
         "exporter", lambda s: {(__version__, s.reader): 1.0}, ("version", "reader")),
    _exp("gpuledger_nvml_up", "gauge", "", "1 when the GPU reader (NVML) is initialised and answering.",
         "nvmlInit", lambda s: float(s.nvml_up)),
    _exp("gpuledger_reader_errors_total", "counter", "", "Failed reader calls by call name (unsupported is no error).",
         "sampler", lambda s: {(k,): float(v) for k, v in s.reader_errors.items()}, ("call",)),
    _exp("gpuledger_sample_duration_seconds", "gauge", "seconds", "Duration of the last fast round over all GPUs.",
         "sampler", lambda s: s.sample_duration_seconds),
    _exp("gpuledger_last_sample_timestamp_seconds", "gauge", "seconds", "Wall-clock time of the last sampling round.",
         "sampler", lambda s: s.taken_at or None),
    _exp("gpuledger_history_rows_written_total", "counter", "", "Per-minute GPU rows committed to the history.",
         "history", lambda s: None if s.history is None else float(s.history.rows_written)),
    _exp("gpuledger_history_write_errors_total", "counter", "", "Failed history transactions (rows kept, retried).",
         "history", lambda s: None if s.history is None else float(s.history.write_errors)),
    _exp("process_cpu_seconds_total", "counter", "seconds", "Total user and system CPU time spent in seconds.",
         "/proc/self/stat", lambda s: _proc(s, "cpu_seconds")),
    _exp("process_resident_memory_bytes", "gauge", "bytes", "Resident memory size in bytes.",
         "/proc/self/stat", lambda s: _proc(s, "resident_bytes")),
    _exp("process_virtual_memory_bytes", "gauge", "bytes", "Virtual memory size in bytes.",
         "/proc/self/stat", lambda s: _proc(s, "virtual_bytes")),
    _exp("process_start_time_seconds", "gauge", "seconds", "Start time of the process since unix epoch in seconds.",
         "/proc/self/stat", lambda s: _proc(s, "start_time_seconds")),
    _exp("process_open_fds", "gauge", "", "Number of open file descriptors.",
         "/proc/self/fd", lambda s: _proc(s, "open_fds")),
    _exp("process_max_fds", "gauge", "", "Maximum number of open file descriptors.",
         "getrlimit(RLIMIT_NOFILE)", lambda s: _proc(s, "max_fds")),
    # --- identity and health ------------------------------------------------------------------------------------
    MetricDef("gpuledger_gpu_info", "info", "", "GPU identity; always 1.",
              ("gpu", "uuid", "model", "pci_bus_id", "driver_version", "hostname"),
              "nvmlDeviceGetName, nvmlDeviceGetPciInfo, nvmlSystemGetDriverVersion", True,
              lambda s, g: _identity(s, g)),
    _gpu("gpuledger_gpu_up", "gauge", "", "1 while the GPU answers; 0 when lost or unreadable.",
         "sampler", lambda g: float(g.up)),
    _gpu("gpuledger_gpu_xid_errors_total", "counter", "", "XID error events seen by the exporter, by XID code.",
         "nvmlEventSetWait (XID critical errors)",
         lambda g: {(str(k),): float(v) for k, v in g.counters.xid_errors.items()}, ("xid",)),
    _gpu("gpuledger_gpu_ecc_errors_total", "counter", "", "Volatile ECC error count since the driver loaded.",
         "nvmlDeviceGetTotalEccErrors (volatile)", _ecc, ("error_type",)),
    _gpu("gpuledger_gpu_remapped_rows", "gauge", "", "Memory rows remapped, by cause.",
         "nvmlDeviceGetRemappedRows", _remapped, ("cause",)),
    _gpu("gpuledger_gpu_row_remap_pending", "gauge", "", "1 when a row remap waits for a GPU reset.",
         "nvmlDeviceGetRemappedRows", lambda g: _flag(g.health.remapped and g.health.remapped.pending)),
    _gpu("gpuledger_gpu_row_remap_failed", "gauge", "", "1 when a row remap failed (the GPU needs service).",
         "nvmlDeviceGetRemappedRows", lambda g: _flag(g.health.remapped and g.health.remapped.failed)),
    _gpu("gpuledger_gpu_clock_event_active", "gauge", "", "1 while a clock-event (throttle) reason is active.",
         "nvmlDeviceGetCurrentClocksEventReasons", _reasons, ("reason",)),
    # --- exact counters: divide rate(x) by rate(sampled) ----------------------------------------------------------
    _gpu("gpuledger_gpu_sampled_seconds_total", "counter", "seconds",
         "Time covered by successful samples: the denominator for the *_seconds_total counters.",
         "sampler clock", lambda g: g.counters.sampled_seconds),
    _gpu("gpuledger_gpu_busy_seconds_total", "counter", "seconds",
         "Integral of utilisation (a kernel running), from the sub-second samples buffer where available.",
         "nvmlDeviceGetSamples(GPU_UTILIZATION), else nvmlDeviceGetUtilizationRates",
         lambda g: g.counters.busy_seconds),
    _gpu("gpuledger_gpu_sm_active_seconds_total", "counter", "seconds", "Integral of SM activity (Hopper GPM).",
         "GPM SM_UTIL", lambda g: g.counters.sm_active_seconds),
    _gpu("gpuledger_gpu_tensor_active_seconds_total", "counter", "seconds", "Integral of tensor-core activity (GPM).",
         "GPM ANY_TENSOR_UTIL", lambda g: g.counters.tensor_active_seconds),
    _gpu("gpuledger_gpu_dram_active_seconds_total", "counter", "seconds", "Integral of DRAM bandwidth use (GPM).",
         "GPM DRAM_BW_UTIL", lambda g: g.counters.dram_active_seconds),
    _gpu("gpuledger_gpu_energy_joules_total", "counter", "joules",
         "Energy since the exporter started, from the NVML energy counter (integrated power where unsupported).",
         "nvmlDeviceGetTotalEnergyConsumption", lambda g: g.counters.energy_joules),
    _gpu("gpuledger_gpu_allocated_seconds_total", "counter", "seconds", "Time with at least one compute process.",
         "nvmlDeviceGetComputeRunningProcesses", lambda g: g.counters.allocated_seconds),
    _gpu("gpuledger_gpu_allocated_idle_seconds_total", "counter", "seconds",
         "Time a compute process held the GPU while utilisation stayed under the idle threshold.",
         "processes + utilisation", lambda g: g.counters.allocated_idle_seconds),
    _gpu("gpuledger_gpu_clock_event_seconds_total", "counter", "seconds", "Time each clock-event reason was active.",
         "nvmlDeviceGetCurrentClocksEventReasons",
         lambda g: {(k,): v for k, v in g.counters.clock_event_seconds.items()}, ("reason",)),
    # --- gauges -------------------------------------------------------------------------------------------------
    _gpu("gpuledger_gpu_power_watts", "gauge", "watts", "Power draw.",
         "nvmlDeviceGetPowerUsage", lambda g: g.gauges.power_watts),
    _gpu("gpuledger_gpu_power_limit_watts", "gauge", "watts", "Enforced power limit.",
         "nvmlDeviceGetEnforcedPowerLimit", lambda g: g.health.power_limit_watts),
    _gpu("gpuledger_gpu_utilization_ratio", "gauge", "ratio",
         "Share of the last NVML sample period with a kernel running (as nvidia-smi; aliased: prefer the counters).",
         "nvmlDeviceGetUtilizationRates", lambda g: g.gauges.utilization),
    _gpu("gpuledger_gpu_memory_utilization_ratio", "gauge", "ratio",
         "Share of the last sample period with device memory being read or written.",
         "nvmlDeviceGetUtilizationRates", lambda g: g.gauges.memory_utilization),
    _gpu("gpuledger_gpu_memory_used_bytes", "gauge", "bytes", "Device memory in use.",
         "nvmlDeviceGetMemoryInfo", lambda g: g.gauges.memory_used_bytes),
    _gpu("gpuledger_gpu_memory_total_bytes", "gauge", "bytes", "Device memory in total.",
         "nvmlDeviceGetMemoryInfo", lambda g: g.gauges.memory_total_bytes),
    _gpu("gpuledger_gpu_temperature_celsius", "gauge", "celsius", "GPU core temperature.",
         "nvmlDeviceGetTemperature", lambda g: g.gauges.temperature_celsius),
    _gpu("gpuledger_gpu_sm_clock_hertz", "gauge", "hertz", "SM clock.",
         "nvmlDeviceGetClockInfo(SM)", lambda g: g.gauges.sm_clock_hertz),
    _gpu("gpuledger_gpu_memory_clock_hertz", "gauge", "hertz", "Memory clock.",
         "nvmlDeviceGetClockInfo(MEM)", lambda g: g.gauges.memory_clock_hertz),
    _gpu("gpuledger_gpu_processes", "gauge", "", "Compute processes on the GPU.",
         "nvmlDeviceGetComputeRunningProcesses", lambda g: g.gauges.processes),
    _gpu("gpuledger_gpu_pcie_throughput_bytes_per_second", "gauge", "bytes_per_second",
         "PCIe throughput by direction (slow lane).", "nvmlDeviceGetPcieThroughput", _pcie, ("direction",)),
    # --- jobs on GPUs (attribution; see docs/jobs.md) -------------------------------------------------------
    _gpu("gpuledger_gpu_job_info", "info", "", "A job holding the GPU now (Slurm job, pod, user); empty = unknown.",
         "processes + /proc cgroups + kubelet pod-resources", _jobs("", holding_only=True), JOB_LABELS),
    _gpu("gpuledger_job_gpu_sampled_seconds_total", "counter", "seconds", "Time a job held the GPU (covered rounds).",
         "attribution", _jobs("sampled_seconds"), JOB_LABELS),
    _gpu("gpuledger_job_gpu_busy_seconds_total", "counter", "seconds",
         "The GPU's busy time times the job's share (SM utilisation, else memory, else equal).",
         "attribution", _jobs("busy_seconds"), JOB_LABELS),
    _gpu("gpuledger_job_gpu_energy_joules_total", "counter", "joules",
         "The GPU's energy-counter increase apportioned by the job's share of power x time.",
         "attribution", _jobs("energy_joules"), JOB_LABELS),
    _exp("gpuledger_attribution_kubelet_up", "gauge", "", "1 when the kubelet's pod-resources API answered last time.",
         "kubelet pod-resources", lambda s: None if s.kubelet_up is None else float(s.kubelet_up)),
    # --- the Slurm queue (the watcher node; see docs/jobs.md) --------------------------------------------------
    _exp("gpuledger_queue_source_up", "gauge", "", "1 when the Slurm source (squeue, sacct, jobcomp) answered.",
         "slurm watcher", lambda s: None if s.queue is None else {
             (k,): float(v) for k, v in s.queue.sources.items()}, ("source",)),
    _exp("gpuledger_queue_pending_jobs", "gauge", "", "Jobs pending per partition.",
         "squeue", _queue("pending_jobs"), ("partition",)),
    _exp("gpuledger_queue_pending_gpus", "gauge", "", "GPUs asked for by pending jobs, per partition.",
         "squeue", _queue("pending_gpus"), ("partition",)),
    _exp("gpuledger_queue_running_jobs", "gauge", "", "Jobs running per partition.",
         "squeue", _queue("running_jobs"), ("partition",)),
    _exp("gpuledger_queue_oldest_pending_seconds", "gauge", "seconds", "Age of the oldest pending job per partition.",
         "squeue", _queue("oldest_pending"), ("partition",)),
    _exp("gpuledger_queue_wait_seconds", "histogram", "seconds",
         "Queue wait (start - submit) of jobs as they start, per partition.",
         "squeue, sacct / jobcomp", _queue("wait"), ("partition",)),
    _exp("gpuledger_queue_eligible_wait_seconds", "histogram", "seconds",
         "Wait from eligibility to start (excludes holds and dependencies), per partition.",
         "squeue, sacct / jobcomp", _queue("eligible_wait"), ("partition",)),
    _exp("gpuledger_jobs_finished_total", "counter", "", "Jobs that ended, by partition and final state.",
         "sacct / jobcomp", _queue("finished"), ("partition", "state")),
    _exp("gpuledger_jobs_gpu_seconds_total", "counter", "seconds",
         "GPUs x run time of jobs that ended, by partition and final state (lost work: FAILED, TIMEOUT, ...).",
         "sacct / jobcomp", _queue("gpu_seconds"), ("partition", "state")),
    _exp("gpuledger_jobs_requeued_total", "counter", "", "Job requeues and restarts, per partition.",
         "squeue restart count", _queue("requeued"), ("partition",)),
    # --- benchmark rounds (latest results; see docs/benchmarks.md) ------------------------------------
    _exp("gpuledger_bench_runs_total", "counter", "", "Benchmark runs by benchmark and result (ok, failed, timeout, "
         "skipped_busy).", "bench scheduler", _bench_runs, ("bench", "result")),
    _exp("gpuledger_bench_last_run_timestamp_seconds", "gauge", "seconds", "When a benchmark last ended so.",
         "bench scheduler, history", lambda s: None if s.bench is None else {k: v for k, v in s.bench.last_run.items()},
         ("bench", "result")),
    _exp("gpuledger_bench_duration_seconds", "gauge", "seconds", "How long the latest run of a benchmark took.",
         "bench scheduler", lambda s: None if s.bench is None else {(k,): v for k, v in s.bench.duration.items()},
         ("bench",)),
    _exp("gpuledger_bench_allreduce_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce bus bandwidth per message size (nccl-tests: algbw x 2(n-1)/n).", "all-reduce sweep",
         _allreduce_sizes("busbw"), ("backend", "world_size", "size_bytes")),
    _exp("gpuledger_bench_allreduce_algbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce algorithm bandwidth (bytes / time) per message size.", "all-reduce sweep",
         _allreduce_sizes("algbw"), ("backend", "world_size", "size_bytes")),
    _exp("gpuledger_bench_allreduce_largest_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce bus bandwidth at the largest size swept.", "all-reduce sweep",
         _allreduce(lambda a: a.busbw_largest), ("backend", "world_size")),
    _exp("gpuledger_bench_allreduce_average_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "Mean bus bandwidth over all sizes swept (nccl-tests' 'Avg bus bandwidth').", "all-reduce sweep",
         _allreduce(lambda a: a.busbw_average), ("backend", "world_size")),
    _exp("gpuledger_bench_allreduce_wrong_elements", "gauge", "",
         "Elements that differed from the expected sum in the latest sweep (0 when correct).", "all-reduce sweep",
         _allreduce(lambda a: a.wrong), ("backend", "world_size")),
    _exp("gpuledger_bench_train_step_seconds", "gauge", "seconds", "Median training step time (DDP) per world size.",
         "train benchmark", _train("step_seconds"), ("model", "world_size")),
    _exp("gpuledger_bench_train_throughput_samples_per_second", "gauge", "", "Training samples per second, all ranks.",
         "train benchmark", _train("samples_per_second"), ("model", "world_size")),
    _exp("gpuledger_bench_train_speedup_ratio", "gauge", "ratio", "throughput(N) / throughput(1), same per-GPU batch.",
         "train benchmark", _train("speedup"), ("model", "world_size")),
    _exp("gpuledger_bench_train_scaling_efficiency_ratio", "gauge", "ratio", "speedup(N) / N.",
         "train benchmark", _train("efficiency"), ("model", "world_size")),
    _exp("gpuledger_bench_train_allreduce_share_ratio", "gauge", "ratio",
         "Share of the step spent in exposed gradient all-reduce (step with sync vs without).",
         "train benchmark", _train("allreduce_share"), ("model", "world_size")),
    _exp("gpuledger_bench_train_predicted_speedup_ratio", "gauge", "ratio",
         "Speedup a communication model predicts from busbw and gradient size (overlap: none or full).",
         "train benchmark", _predicted, ("model", "world_size", "overlap")),
    _exp("gpuledger_bench_train_mfu_ratio", "gauge", "ratio", "Model FLOP/s per GPU over the datasheet bf16 peak.",
         "train benchmark", _train("mfu"), ("model", "world_size")),
    _exp("gpuledger_bench_matmul_flops_per_second", "gauge", "", "GEMM FLOP/s of the slowest GPU, per dtype.",
         "matmul benchmark", lambda s: None if not (s.bench and s.bench.matmul) else {
             (r.dtype,): r.flops_per_second for r in s.bench.matmul}, ("dtype",)),
    _exp("gpuledger_bench_memcpy_bytes_per_second", "gauge", "bytes_per_second",
         "Copy bandwidth of the slowest GPU: d2d, h2d, d2h (pinned), host (CPU).", "memcpy benchmark",
         lambda s: None if not (s.bench and s.bench.memcpy) else {
             (r.kind,): r.bytes_per_second for r in s.bench.memcpy}, ("kind",)),
)
# fmt: on

BY_NAME: dict[str, MetricDef] = {m.name: m for m in METRICS}


def samples(m: MetricDef, s: Snapshot) -> Iterator[tuple[tuple[str, ...], float | Histogram]]:
    """Every (label values, value) of one metric in a snapshot, labels in ``m.labels`` order."""
    targets: list[tuple[GpuSnapshot | None, tuple[str, ...]]] = (
        [(g, (str(g.info.index), g.info.uuid)) for g in s.gpus] if m.per_gpu else [(None, ())]
    )
    for g, base in targets:
        value = m.value(s, g)
        if value is None:
            continue
        items: Iterable[tuple[tuple[str, ...], float | Histogram | None]] = (
            value.items() if isinstance(value, Mapping) else [((), value)]
        )
        for extra, v in items:
            if v is not None:
                yield base + tuple(extra), v if isinstance(v, Histogram) else float(v)
