"""The benchmarks' rows of the metric table: latest results, run counts, last run times, read
from the ``BenchSnapshot`` part (torch-free; see docs/benchmarks.md)."""

from __future__ import annotations

import math
from collections.abc import Callable

from exporter.benchmarks.results import AllreduceResult, AllreduceRow, TrainRow
from exporter.benchmarks.state import BenchSnapshot
from exporter.registry import Feature, Kind, MetricDef, Value, part_row


def _row(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[BenchSnapshot], Value],
    labels: tuple[str, ...],
) -> MetricDef:
    return part_row(BenchSnapshot, name, kind, unit, help, source, fn, labels)


def _per_size(fn: Callable[[AllreduceRow], float]) -> Callable[[BenchSnapshot], Value]:
    def get(b: BenchSnapshot) -> Value:
        ar = b.allreduce
        if ar is None:
            return None
        return {(ar.backend, str(ar.world_size), str(r.size_bytes)): float(fn(r)) for r in ar.rows}

    return get


def _sweep(fn: Callable[[AllreduceResult], float]) -> Callable[[BenchSnapshot], Value]:
    def get(b: BenchSnapshot) -> Value:
        ar = b.allreduce
        return None if ar is None else {(ar.backend, str(ar.world_size)): float(fn(ar))}

    return get


def _links(b: BenchSnapshot) -> Value:
    ar = b.allreduce
    if ar is None or ar.links is None:
        return None
    world = (ar.backend, str(ar.world_size))
    return {(*world, "tx"): ar.links.tx_bytes, (*world, "rx"): ar.links.rx_bytes}


def _line_rate(fn: Callable[[AllreduceResult], float | None]) -> Callable[[BenchSnapshot], Value]:
    def get(b: BenchSnapshot) -> Value:
        ar = b.allreduce
        v = fn(ar) if ar is not None else None
        return None if ar is None or v is None else {(ar.backend, str(ar.world_size)): v}

    return get


def _train(fn: Callable[[TrainRow], float | None]) -> Callable[[BenchSnapshot], Value]:
    def get(b: BenchSnapshot) -> Value:
        t = b.train
        if t is None:
            return None
        # NaN (a speedup without a 1-GPU step to compare with) is no figure: left out, not exported
        return {(t.model, str(r.world_size)): float(v) for r in t.rows if (v := fn(r)) is not None and math.isfinite(v)}

    return get


def _predicted(b: BenchSnapshot) -> Value:
    t = b.train
    if t is None:
        return None
    out: dict[tuple[str, ...], float] = {}
    for r in t.rows:
        for overlap, v in (("none", r.predicted_speedup_no_overlap), ("full", r.predicted_speedup_full_overlap)):
            if v is not None:
                out[(t.model, str(r.world_size), overlap)] = v
    return out


def _matmul(b: BenchSnapshot) -> Value:
    return None if not b.matmul else {(r.dtype,): r.flops_per_second for r in b.matmul}


def _memcpy(b: BenchSnapshot) -> Value:
    return None if not b.memcpy else {(r.kind,): r.bytes_per_second for r in b.memcpy}


_SIZES = ("backend", "world_size", "size_bytes")
_SWEEP = ("backend", "world_size")
_TRAIN = ("model", "world_size")

# fmt: off
FEATURE: Feature[BenchSnapshot] = Feature("bench", BenchSnapshot, (
    _row("gpuledger_bench_runs_total", "counter", "", "Benchmark runs by benchmark and result (ok, failed, timeout, "
         "skipped_busy, skipped_no_gpu).", "bench scheduler", lambda b: {k: float(v) for k, v in b.runs.items()},
         ("bench", "result")),
    _row("gpuledger_bench_last_run_timestamp_seconds", "gauge", "seconds",
         "When a benchmark last ended with this result (kept in the history across restarts).",
         "bench scheduler, history", lambda b: dict(b.last_run), ("bench", "result")),
    _row("gpuledger_bench_duration_seconds", "gauge", "seconds", "How long the latest run of a benchmark took.",
         "bench scheduler", lambda b: {(k,): v for k, v in b.duration.items()}, ("bench",)),
    _row("gpuledger_bench_allreduce_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce bus bandwidth per message size (nccl-tests: algbw x 2(n-1)/n).", "all-reduce sweep",
         _per_size(lambda r: r.busbw), _SIZES),
    _row("gpuledger_bench_allreduce_algbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce algorithm bandwidth (bytes / time) per message size.", "all-reduce sweep",
         _per_size(lambda r: r.algbw), _SIZES),
    _row("gpuledger_bench_allreduce_largest_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "All-reduce bus bandwidth at the largest size swept.", "all-reduce sweep",
         _sweep(lambda a: a.busbw_largest), _SWEEP),
    _row("gpuledger_bench_allreduce_average_busbw_bytes_per_second", "gauge", "bytes_per_second",
         "Mean bus bandwidth over all sizes swept (nccl-tests' 'Avg bus bandwidth').", "all-reduce sweep",
         _sweep(lambda a: a.busbw_average), _SWEEP),
    _row("gpuledger_bench_allreduce_wrong_elements", "gauge", "",
         "Elements that differed from the expected sum in the latest sweep (0 when correct).", "all-reduce sweep",
         _sweep(lambda a: a.wrong), _SWEEP),
    _row("gpuledger_bench_allreduce_nvlink_bytes", "gauge", "bytes",
         "NVLink data bytes sent (tx) and received (rx) during the latest all-reduce sweep, summed over the node's "
         "GPUs and links: the increase of gpuledger_gpu_nvlink_bytes_total's counters (NVML field values) read at "
         "the sweep's begin and at its result; absent without NVLink.", "all-reduce sweep, NVLink counters",
         _links, (*_SWEEP, "direction")),
    _row("gpuledger_bench_allreduce_nvlink_line_rate_bytes_per_second", "gauge", "bytes_per_second",
         "NVLink line rate per direction of the slowest GPU in the latest all-reduce sweep: the sum of its active "
         "links' speeds (gpuledger_gpu_nvlink_speed_bytes_per_second); absent where NVML tells no link speed.",
         "all-reduce sweep, NVLink speeds", _line_rate(lambda a: a.links.line_rate if a.links else None), _SWEEP),
    _row("gpuledger_bench_allreduce_busbw_line_rate_ratio", "gauge", "ratio",
         "All-reduce bus bandwidth at the largest size swept over the NVLink line rate (both per GPU and "
         "direction); absent where the line rate is not known.", "all-reduce sweep, NVLink speeds",
         _line_rate(lambda a: a.line_rate_ratio), _SWEEP),
    _row("gpuledger_bench_train_step_seconds", "gauge", "seconds", "Median training step time (DDP) per world size.",
         "train benchmark", _train(lambda r: r.step_seconds), _TRAIN),
    _row("gpuledger_bench_train_throughput_samples_per_second", "gauge", "", "Training samples per second, all ranks.",
         "train benchmark", _train(lambda r: r.samples_per_second), _TRAIN),
    _row("gpuledger_bench_train_speedup_ratio", "gauge", "ratio", "throughput(N) / throughput(1), same per-GPU batch.",
         "train benchmark", _train(lambda r: r.speedup), _TRAIN),
    _row("gpuledger_bench_train_scaling_efficiency_ratio", "gauge", "ratio", "speedup(N) / N.",
         "train benchmark", _train(lambda r: r.efficiency), _TRAIN),
    _row("gpuledger_bench_train_allreduce_share_ratio", "gauge", "ratio",
         "Share of the step spent in exposed gradient all-reduce (step with sync vs without).",
         "train benchmark", _train(lambda r: r.allreduce_share), _TRAIN),
    _row("gpuledger_bench_train_predicted_speedup_ratio", "gauge", "ratio",
         "Speedup a communication model predicts from busbw and gradient size (overlap: none or full).",
         "train benchmark", _predicted, ("model", "world_size", "overlap")),
    _row("gpuledger_bench_train_mfu_ratio", "gauge", "ratio", "Model FLOP/s per GPU over the datasheet bf16 peak.",
         "train benchmark", _train(lambda r: r.mfu), _TRAIN),
    _row("gpuledger_bench_matmul_flops_per_second", "gauge", "", "GEMM FLOP/s of the slowest GPU, per dtype.",
         "matmul benchmark", _matmul, ("dtype",)),
    _row("gpuledger_bench_memcpy_bytes_per_second", "gauge", "bytes_per_second",
         "Copy bandwidth of the slowest GPU: d2d, h2d, d2h (pinned), host (CPU).", "memcpy benchmark",
         _memcpy, ("kind",)),
))
# fmt: on
