"""Benchmark results as typed records, and the arithmetic on them (torch-free, unit-tested).

Definitions follow nccl-tests: ``algbw = bytes / time``; ``busbw = algbw × 2(n−1)/n`` for
all-reduce, so busbw is comparable across world sizes and 0 at n = 1. Training follows PyTorch's
DDP benchmark: the same per-GPU batch at every world size, ``speedup(n) = throughput(n) /
throughput(1)``, ``efficiency = speedup / n``.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict, TypeAdapter

from daemonkit.jsondoc import STRICT, parse

# Dense bf16 tensor-core peak from NVIDIA datasheets (FLOP/s), for MFU. Longest match wins.
PEAK_BF16_FLOPS: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "H200": 989e12,
    "H800": 989e12,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "B200": 2250e12,
}


def peak_flops(device_name: str) -> float | None:
    hits = [k for k in PEAK_BF16_FLOPS if k in device_name]
    return PEAK_BF16_FLOPS[max(hits, key=len)] if hits else None


def bus_factor(n: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor 2(n−1)/n."""
    return 2.0 * (n - 1) / n


# --- all-reduce ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllreduceRow:
    __pydantic_config__ = STRICT  # results are read strictly: a string busbw is an error

    size_bytes: int
    count: int  # elements
    time_seconds: float  # per operation, slowest rank
    iters: int
    algbw: float  # bytes per second
    busbw: float
    wrong: int


def allreduce_row(size_bytes: int, count: int, time_seconds: float, iters: int, world: int, wrong: int) -> AllreduceRow:
    algbw = size_bytes / time_seconds
    return AllreduceRow(size_bytes, count, time_seconds, iters, algbw, algbw * bus_factor(world), wrong)


@dataclass(frozen=True)
class AllreduceLinks:
    """What the node's NVLink links did during a sweep (measured by the daemon, not the ranks:
    ``exporter.benchmarks.links``): the links' data byte counters read at the sweep's begin and at
    its result, summed over GPUs and links, and the GPUs' line rate where NVML tells it."""

    __pydantic_config__ = STRICT

    tx_bytes: float  # sent, all GPUs and links
    rx_bytes: float  # received
    gpus: int  # GPUs whose links were counted
    line_rate: float | None = None  # bytes/s per direction: the slowest GPU's active links summed; None: unknown


@dataclass(frozen=True)
class AllreduceResult:
    __pydantic_config__ = STRICT

    backend: str
    world_size: int
    dtype: str
    rows: tuple[AllreduceRow, ...]
    links: AllreduceLinks | None = None  # None: no NVLink counted (none on the node, or not measured)

    @property
    def line_rate_ratio(self) -> float | None:
        """Bus bandwidth at the largest size over the NVLink line rate (nccl-tests' busbw is per GPU
        and direction, as a link's speed is); None where the line rate is not known."""
        rate = self.links.line_rate if self.links is not None else None
        return self.busbw_largest / rate if rate and self.rows else None

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows)

    @property
    def busbw_largest(self) -> float:
        """Bus bandwidth at the largest size swept (the figure to compare with link speeds)."""
        return self.rows[-1].busbw if self.rows else 0.0

    @property
    def busbw_average(self) -> float:
        """nccl-tests' 'Avg bus bandwidth': the plain mean over every size swept."""
        return statistics.mean(r.busbw for r in self.rows) if self.rows else 0.0

    def busbw_at(self, size_bytes: float) -> float | None:
        """Bus bandwidth at a message size, log-linear between swept sizes, clamped at the ends."""
        rows = [r for r in self.rows if r.busbw > 0]
        if not rows:
            return None
        if size_bytes <= rows[0].size_bytes:
            return rows[0].busbw
        for a, b in itertools.pairwise(rows):
            if size_bytes <= b.size_bytes:
                f = math.log(size_bytes / a.size_bytes) / math.log(b.size_bytes / a.size_bytes)
                return a.busbw + f * (b.busbw - a.busbw)
        return rows[-1].busbw


# --- training --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainMeasurement:
    """What the workers measured at one world size (seconds; medians over the timed steps)."""

    world_size: int
    step_seconds: float
    step_nosync_seconds: float | None = None  # same steps without the gradient all-reduce
    grad_allreduce_seconds: float | None = None  # one all-reduce of every gradient, alone


@dataclass(frozen=True)
class TrainRow:
    __pydantic_config__ = STRICT

    world_size: int
    step_seconds: float
    per_gpu_samples_per_second: float
    samples_per_second: float
    speedup: float
    efficiency: float
    allreduce_share: float | None  # exposed all-reduce: (step − step without sync) / step
    allreduce_seconds: float | None
    predicted_speedup_no_overlap: float | None
    predicted_speedup_full_overlap: float | None
    mfu: float | None


@dataclass(frozen=True)
class TrainResult:
    __pydantic_config__ = STRICT

    model: str
    params: int
    grad_bytes: int
    batch_per_gpu: int
    seq: int
    flops_per_sample: float
    peak_flops: float | None
    busbw_source: str  # where the predictions' bus bandwidth came from
    rows: tuple[TrainRow, ...]


def predicted_speedup(n: int, t1: float, grad_bytes: float, busbw: float, overlap: bool) -> float:
    """Speedup a communication model predicts: every step does t1 of compute plus one all-reduce
    of the gradients (grad_bytes × 2(n−1)/n / busbw); without overlap the two add up, with
    perfect overlap the longer one sets the pace."""
    if n == 1:
        return 1.0
    t_ar = grad_bytes * bus_factor(n) / busbw
    return n * t1 / (max(t1, t_ar) if overlap else t1 + t_ar)


def train_result(
    *,
    model: str,
    params: int,
    grad_bytes: int,
    batch: int,
    seq: int,
    flops_per_sample: float,
    peak: float | None,
    measured: list[TrainMeasurement],
    sweep: AllreduceResult | None,
) -> TrainResult:
    by_n = {m.world_size: m for m in measured}
    t1 = by_n[1].step_seconds if 1 in by_n else None
    source = "all-reduce sweep" if sweep is not None and sweep.busbw_at(grad_bytes) else "gradient all-reduce"
    rows = []
    for n in sorted(by_n):
        m = by_n[n]
        per_gpu = batch / m.step_seconds
        total = per_gpu * n
        speedup = (m.step_seconds and t1 and t1 / m.step_seconds * n) or float("nan")
        share = None
        if m.step_nosync_seconds is not None:
            share = max(0.0, (m.step_seconds - m.step_nosync_seconds) / m.step_seconds)
        busbw = sweep.busbw_at(grad_bytes) if sweep is not None else None
        if not busbw and m.grad_allreduce_seconds and n > 1:
            busbw = grad_bytes * bus_factor(n) / m.grad_allreduce_seconds
        pred_none = pred_full = None
        if t1 is not None and (n == 1 or busbw):
            pred_none = predicted_speedup(n, t1, grad_bytes, busbw or 1.0, overlap=False)
            pred_full = predicted_speedup(n, t1, grad_bytes, busbw or 1.0, overlap=True)
        rows.append(
            TrainRow(
                world_size=n,
                step_seconds=m.step_seconds,
                per_gpu_samples_per_second=per_gpu,
                samples_per_second=total,
                speedup=speedup,
                efficiency=speedup / n,
                allreduce_share=share,
                allreduce_seconds=m.grad_allreduce_seconds,
                predicted_speedup_no_overlap=pred_none,
                predicted_speedup_full_overlap=pred_full,
                mfu=(per_gpu * flops_per_sample / peak) if peak else None,
            )
        )
    return TrainResult(model, params, grad_bytes, batch, seq, flops_per_sample, peak, source, tuple(rows))


# --- single-device workloads ---------------------------------------------------------------


@dataclass(frozen=True)
class MatmulRow:
    __pydantic_config__ = STRICT

    dtype: str
    n: int
    flops_per_second: float  # the slowest rank: what every GPU delivers
    per_rank: tuple[float, ...]


@dataclass(frozen=True)
class MemcpyRow:
    __pydantic_config__ = STRICT

    kind: str  # d2d, h2d, d2h (pinned host memory) or host (CPU)
    bytes: int
    bytes_per_second: float  # bytes copied per second, slowest rank
    per_rank: tuple[float, ...]


# --- a whole round ---------------------------------------------------------------------------


@dataclass
class RoundResult:
    backend: str
    world_size: int
    device: str = ""
    allreduce: AllreduceResult | None = None
    train: TrainResult | None = None
    matmul: tuple[MatmulRow, ...] | None = None
    memcpy: tuple[MemcpyRow, ...] | None = None
    errors: dict[str, str] = field(default_factory=dict)


# --- as JSON: every result kind through its TypeAdapter ------------------------------------

_ALLREDUCE = TypeAdapter(AllreduceResult)
_TRAIN = TypeAdapter(TrainResult)
ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "allreduce": _ALLREDUCE,
    "train": _TRAIN,
    "matmul": TypeAdapter(tuple[MatmulRow, ...]),
    "memcpy": TypeAdapter(tuple[MemcpyRow, ...]),
}
_ANY: TypeAdapter[Any] = TypeAdapter(Any, config=ConfigDict(ser_json_inf_nan="constants"))


def plain(result: Any) -> Any:
    """A result (or a tuple of rows) as JSON-ready data. NaN stays NaN (a speedup without a
    one-GPU baseline), which ``json.dumps`` writes and the parsers read back."""
    return _ANY.dump_python(result, mode="json")


PARSERS: dict[str, Callable[[str | bytes], Any]] = {
    bench: functools.partial(parse, adapter, what=f"{bench} result") for bench, adapter in ADAPTERS.items()
}
"""JSON text -> that benchmark's result; a DocumentError (a ValueError) names each field that does not fit."""


def allreduce_from(text: str | bytes) -> AllreduceResult:
    return parse(_ALLREDUCE, text, "allreduce result")


def train_from(text: str | bytes) -> TrainResult:
    return parse(_TRAIN, text, "train result")
