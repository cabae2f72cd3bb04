"""The benchmark tables show what was measured in a unit that fits (a CPU's GEMM in GFLOP/s, not
0.02 TFLOP/s; gloo's bandwidth in MB/s) and call ranks GPUs only under NCCL (torch-free)."""

from __future__ import annotations

from exporter.benchmarks import report
from exporter.benchmarks.report import BANDWIDTH, FLOPS, unit_for
from exporter.benchmarks.results import (
    AllreduceResult,
    MatmulRow,
    MemcpyRow,
    RoundResult,
    TrainMeasurement,
    TrainResult,
    allreduce_row,
    train_result,
)


def sweep(busbw_by_size: dict[int, float], backend: str) -> AllreduceResult:
    rows = tuple(allreduce_row(s, s // 4, s / b, 10, 2, 0) for s, b in sorted(busbw_by_size.items()))
    return AllreduceResult(backend, 2, "float32", rows)


def training(peak: float | None) -> TrainResult:
    measured = [TrainMeasurement(1, 0.025), TrainMeasurement(2, 0.05, 0.04, 0.01)]
    return train_result(
        model="encoder-2x128",
        params=400_000,
        grad_bytes=1_600_000,
        batch=8,
        seq=64,
        flops_per_sample=1e9,
        peak=peak,
        measured=measured,
        sweep=None,
    )


def test_the_unit_is_the_largest_in_which_the_largest_figure_is_at_least_one() -> None:
    assert unit_for([0.5e9, 0.8e9], BANDWIDTH) == ("MB/s", 1e6)
    assert unit_for([0.5e9, 1.0e9], BANDWIDTH) == ("GB/s", 1e9)
    assert unit_for([17.5e9, 88.2e9], FLOPS) == ("GFLOP/s", 1e9)
    assert unit_for([600e12], FLOPS) == ("TFLOP/s", 1e12)
    assert unit_for([0.2e9], FLOPS) == ("GFLOP/s", 1e9)  # below the smallest: the smallest
    assert unit_for([], BANDWIDTH) == ("MB/s", 1e6)
    assert unit_for([float("nan"), 2e9], BANDWIDTH) == ("GB/s", 1e9)


def test_a_cpu_gemm_is_shown_in_gflops_and_a_gpu_gemm_in_tflops() -> None:
    cpu = report.matmul_table(
        (MatmulRow("float32", 512, 17.52e9, (17.6e9, 17.52e9)), MatmulRow("bfloat16", 512, 88.2e9, (88.2e9, 118e9)))
    )
    assert "GFLOP/s" in cpu and "TFLOP/s" not in cpu
    assert "   bfloat16     512     88.20" in cpu and "0.09" not in cpu
    gpu = report.matmul_table((MatmulRow("bfloat16", 8192, 712.3e12, (712.3e12,)),))
    assert "TFLOP/s" in gpu and "  712.30" in gpu


def test_bandwidths_are_in_mb_per_second_below_a_gigabyte_per_second() -> None:
    gloo = report.allreduce_table(sweep({1 << 10: 1.52e6, 1 << 24: 812e6}, "gloo"))
    assert "algbw(MB/s)" in gloo and "busbw(MB/s)" in gloo and "GB/s" not in gloo
    assert "# Avg bus bandwidth    : 406.760 MB/s" in gloo
    assert "largest size (16777216 B): 812.000 MB/s" in gloo
    assert "         1.52         1.52" in gloo  # not 0.00
    nccl = report.allreduce_table(sweep({1 << 10: 0.05e9, 1 << 30: 480e9}, "nccl"))
    assert "busbw(GB/s)" in nccl and "largest size (1073741824 B): 480.000 GB/s" in nccl
    assert "MB/s" in report.memcpy_table((MemcpyRow("host", 1 << 26, 500e6, (500e6,)),))
    assert "GB/s" in report.memcpy_table((MemcpyRow("d2d", 1 << 30, 2100e9, (2100e9,)),))


def test_ranks_are_gpus_only_under_nccl() -> None:
    gloo = report.train_table(training(None), "gloo")
    assert "# ranks" in gloo and "samples/s/rank" in gloo and "per rank" in gloo
    assert "GPU" not in gloo and "gpus" not in gloo
    nccl = report.train_table(training(989e12), "nccl")
    assert "#  gpus" in nccl and "samples/s/GPU" in nccl and "per GPU" in nccl
    assert report.rank_noun("nccl") == "GPU" and report.rank_noun("gloo") == "rank"


def test_a_round_names_its_ranks_by_its_backend() -> None:
    r = RoundResult(backend="gloo", world_size=2, device="cpu", train=training(None))
    text = report.round_tables(r, {"train": "ok"})
    assert "# ranks" in text and "samples/s/GPU" not in text
    r.backend = "nccl"
    assert "samples/s/GPU" in report.round_tables(r, {"train": "ok"})
