"""Benchmark arithmetic and plans, without torch: nccl-tests' definitions, speedup and its model."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

from exporter.benchmarks import report
from exporter.benchmarks.metrics import FEATURE
from exporter.benchmarks.plan import BENCHES, EVENT_PREFIX, Plan, default_plan
from exporter.benchmarks.results import (
    PARSERS,
    AllreduceResult,
    TrainMeasurement,
    TrainResult,
    allreduce_from,
    allreduce_row,
    bus_factor,
    peak_flops,
    plain,
    predicted_speedup,
    train_from,
    train_result,
)
from exporter.benchmarks.runner import BenchRunner, Rendezvous
from exporter.benchmarks.state import BenchSnapshot
from exporter.snapshot import EMPTY


def test_bus_bandwidth_follows_nccl_tests() -> None:
    assert bus_factor(1) == 0.0 and bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(1.75)
    row = allreduce_row(1 << 30, (1 << 30) // 4, time_seconds=0.01, iters=20, world=8, wrong=0)
    assert row.algbw == pytest.approx((1 << 30) / 0.01)
    assert row.busbw == pytest.approx(row.algbw * 1.75)


def sweep(busbw_by_size: dict[int, float], world: int = 8) -> AllreduceResult:
    rows = tuple(
        allreduce_row(s, s // 4, s / (b / bus_factor(world)), 10, world, 0) for s, b in sorted(busbw_by_size.items())
    )
    return AllreduceResult("nccl", world, "float32", rows)


def test_summaries_say_which_is_which_and_interpolate_on_log_size() -> None:
    r = sweep({1 << 20: 10e9, 1 << 22: 30e9, 1 << 24: 50e9})
    assert r.busbw_largest == pytest.approx(50e9)  # at the largest size
    assert r.busbw_average == pytest.approx(30e9)  # nccl-tests' mean over sizes
    assert r.busbw_at(1 << 21) == pytest.approx(20e9)  # halfway in log2(size)
    assert r.busbw_at(1) == pytest.approx(10e9) and r.busbw_at(1 << 40) == pytest.approx(50e9)
    assert allreduce_from(json.dumps(plain(r))) == r  # survives JSON


def test_predicted_speedup_without_and_with_overlap() -> None:
    # 100 ms of compute, 1 GB of gradients, 100 GB/s bus bandwidth at 8 GPUs: 17.5 ms all-reduce
    assert predicted_speedup(8, 0.1, 1e9, 100e9, overlap=False) == pytest.approx(8 * 0.1 / 0.1175)
    assert predicted_speedup(8, 0.1, 1e9, 100e9, overlap=True) == pytest.approx(8.0)
    assert predicted_speedup(8, 0.01, 1e9, 100e9, overlap=True) == pytest.approx(8 * 0.01 / 0.0175)
    assert predicted_speedup(1, 0.1, 1e9, 1.0, overlap=False) == 1.0


def test_train_result_derives_speedup_efficiency_share_and_mfu() -> None:
    measured = [
        TrainMeasurement(1, 0.100),
        TrainMeasurement(2, 0.110, step_nosync_seconds=0.100, grad_allreduce_seconds=0.02),
        TrainMeasurement(4, 0.125, step_nosync_seconds=0.100, grad_allreduce_seconds=0.03),
    ]
    r = train_result(
        model="m",
        params=250_000_000,
        grad_bytes=10**9,
        batch=16,
        seq=512,
        flops_per_sample=3e12,
        peak=989e12,
        measured=measured,
        sweep=None,
    )
    one, two, four = r.rows
    assert one.speedup == 1.0 and one.efficiency == 1.0 and one.allreduce_share is None
    assert two.speedup == pytest.approx(2 * 0.100 / 0.110) and two.efficiency == pytest.approx(0.100 / 0.110)
    assert four.samples_per_second == pytest.approx(4 * 16 / 0.125)
    assert two.allreduce_share == pytest.approx(0.010 / 0.110)
    assert r.busbw_source == "gradient all-reduce"
    # busbw from the 4-rank gradient all-reduce: 1 GB x 1.5 / 30 ms = 50 GB/s -> 30 ms exposed
    assert four.predicted_speedup_no_overlap == pytest.approx(4 * 0.1 / (0.1 + 0.03))
    assert one.mfu == pytest.approx(16 / 0.1 * 3e12 / 989e12)


def tiny_train(
    measured: list[TrainMeasurement], *, grad_bytes: int, batch: int = 1, sweep: AllreduceResult | None = None
) -> TrainResult:
    """A train result of a one-parameter model, one FLOP a sample, no peak: only the step times matter."""
    return train_result(
        model="m",
        params=1,
        grad_bytes=grad_bytes,
        batch=batch,
        seq=1,
        flops_per_sample=1.0,
        peak=None,
        measured=measured,
        sweep=sweep,
    )


def test_train_predictions_use_the_sweep_when_there_is_one() -> None:
    s = sweep({1 << 28: 40e9, 1 << 30: 80e9}, world=2)
    r = tiny_train([TrainMeasurement(1, 0.1), TrainMeasurement(2, 0.12, 0.1, 0.05)], grad_bytes=1 << 30, sweep=s)
    assert r.busbw_source == "all-reduce sweep"
    t_ar = (1 << 30) * 1.0 / 80e9
    assert r.rows[1].predicted_speedup_no_overlap == pytest.approx(2 * 0.1 / (0.1 + t_ar))
    assert r.rows[0].mfu is None


def test_peak_table_prefers_the_most_specific_name() -> None:
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("cpu") is None


def test_plans_round_trip_and_cover_the_world_sizes(tmp_path: object) -> None:
    p = default_plan(BENCHES, "nccl", 8)
    assert p.train_world_sizes() == [1, 2, 4, 8]
    assert default_plan(BENCHES, "nccl", 6).train_world_sizes() == [1, 2, 4, 6]
    assert default_plan(BENCHES, "gloo", 2).train_world_sizes() == [1, 2]
    assert p.allreduce.sizes()[0] == 1024 and p.allreduce.sizes()[-1] == 1 << 30 and len(p.allreduce.sizes()) == 21
    assert 20 < p.estimate_seconds() <= 60  # the target for a full default round on 8 GPUs
    path = Path(str(tmp_path)) / "plan.json"
    p.save(path)
    assert Plan.load(path) == p


def test_tables_look_like_nccl_tests() -> None:
    text = report.allreduce_table(sweep({1 << 20: 10e9, 1 << 24: 50e9}))
    assert "algbw(GB/s)" in text and "busbw(GB/s)" in text and "#wrong" in text
    assert "# Avg bus bandwidth    : 30.000 GB/s" in text
    assert "largest size (16777216 B): 50.000 GB/s" in text
    assert not math.isnan(sweep({1 << 20: 1e9}).busbw_average)


def test_a_plan_file_with_a_word_for_a_size_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    default_plan(BENCHES, "gloo", 2).save(path)
    good = json.loads(path.read_text())
    for section, key, bad in (
        ("allreduce", "max_bytes", "big"),
        ("allreduce", "max_bytes", 1.5),
        ("train", "steps", "30"),
        ("matmul", "seconds_per_dtype", "1.0"),
    ):
        raw = json.loads(json.dumps(good))
        raw[section][key] = bad
        path.write_text(json.dumps(raw))
        with pytest.raises(ValueError, match=rf"plan .*plan\.json: {section}\.{key}: Input should be a valid"):
            Plan.load(path)
    path.write_text(json.dumps({**good, "world_size": "2"}))
    with pytest.raises(ValueError, match="world_size"):
        Plan.load(path)
    path.write_text(json.dumps({**good, "allreduce": {**good["allreduce"], "max_bytez": 1}}))
    with pytest.raises(ValueError, match=r"allreduce\.max_bytez: Unexpected"):
        Plan.load(path)


def test_a_result_with_a_string_for_a_number_is_refused_naming_the_field() -> None:
    r = sweep({1 << 20: 10e9, 1 << 24: 50e9})
    data = plain(r)
    data["rows"][1]["busbw"] = "50 GB/s"
    with pytest.raises(ValueError, match=r"allreduce result: rows\.1\.busbw: Input should be a valid number"):
        allreduce_from(json.dumps(data))
    data = plain(r)
    data["rows"][0]["wrong"] = 0.5  # a count
    with pytest.raises(ValueError, match=r"rows\.0\.wrong"):
        PARSERS["allreduce"](json.dumps(data))
    train = tiny_train([TrainMeasurement(2, 0.1)], grad_bytes=1)
    assert math.isnan(train.rows[0].speedup)  # no one-GPU baseline: NaN, and it survives JSON
    text = json.dumps(plain(train))
    assert math.isnan(train_from(text).rows[0].speedup)
    with pytest.raises(ValueError, match=r"train result: rows\.0\.step_seconds"):
        train_from(text.replace('"step_seconds": 0.1', '"step_seconds": "0.1"'))
    matmul = json.dumps([{"dtype": "bfloat16", "n": 8192, "flops_per_second": "659e12", "per_rank": [659e12]}])
    with pytest.raises(ValueError, match=r"matmul result: 0\.flops_per_second"):
        PARSERS["matmul"](matmul)


def test_a_round_whose_result_does_not_fit_its_type_fails_naming_the_field() -> None:
    data = plain(sweep({1 << 20: 10e9}))
    data["rows"][0]["busbw"] = "10 GB/s"
    event = EVENT_PREFIX + json.dumps({"event": "result", "bench": "allreduce", "data": data})

    class Worker(BenchRunner):  # a worker that writes a malformed result, without torch
        def command(self, plan_path: Path, rdzv: Rendezvous | None) -> list[str]:
            return [sys.executable, "-c", f"print({event!r})"]

    out = Worker().run(default_plan(("allreduce",), "gloo", 1, quick=True), timeout=60)
    assert out.result.allreduce is None and out.status == {"allreduce": "failed"}
    assert "rows.0.busbw: Input should be a valid number" in out.result.errors["allreduce"]


def test_without_a_one_gpu_step_no_speedup_is_exported_rather_than_nan() -> None:
    """A round whose 1-GPU run is missing: the 2-GPU row has no speedup to give (NaN inside), and
    the exposition leaves speedup and efficiency out instead of exporting NaN; its step time stays."""
    r = tiny_train([TrainMeasurement(2, 0.2)], grad_bytes=1 << 20, batch=4)
    assert math.isnan(r.rows[0].speedup)
    snap = dataclasses.replace(EMPTY, parts={BenchSnapshot: BenchSnapshot(train=r)})
    values = {m.name: m.value(snap, None) for m in FEATURE.metrics}
    assert values["gpuledger_bench_train_speedup_ratio"] == {}
    assert values["gpuledger_bench_train_scaling_efficiency_ratio"] == {}
    assert values["gpuledger_bench_train_step_seconds"] == {("m", "2"): 0.2}
