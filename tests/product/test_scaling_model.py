"""``gpuledger scaling``'s communication model for weak scaling (the prediction from the gradients'
size and a bus bandwidth: the all-reduce sweep in the history, else the user's own exposed
all-reduce) and the verdict against the previous N. Pure functions and a real history file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import history
from exporter.benchmarks.records import BenchRecord
from exporter.benchmarks.results import AllreduceResult, allreduce_row, plain
from gpuledger import scaling, scaling_history
from gpuledger import scaling_math as sm
from gpuledger.scaling_report import Result, Row, table, to_json

MIB = 2**20
GRADS = 64 * MIB


def _weak(rows: list[Row], **kw: object) -> Result:
    res = Result("m", ["t.py"], "weak", "step timer", "GPUs", 2.0, "EUR", False, "", 0.1, here=8)
    res.rows = rows
    for k, v in kw.items():
        setattr(res, k, v)
    return res


def test_the_model_is_compute_plus_the_ring_all_reduce() -> None:
    assert sm.bus_factor(2) == 1.0 and sm.bus_factor(8) == pytest.approx(1.75)
    # 50 ms of compute, 64 MiB of gradients at 16 GiB/s bus bandwidth (3.9 ms), 8 GPUs: 50 + 3.9 x 1.75 = 56.8 ms
    busbw = 16 * 2**30
    assert sm.comm_speedup(8, 0.05, 0.05, GRADS, busbw) == pytest.approx(8 * 0.05 / 0.056836, rel=1e-4)
    assert sm.exposed_busbw(2, GRADS, 0.04) == pytest.approx(GRADS / 0.04)
    assert sm.exposed_busbw(2, GRADS, 0.0) is None and sm.exposed_busbw(1, GRADS, 0.04) is None


def test_the_prediction_from_the_users_exposed_all_reduce() -> None:
    """At 2 GPUs: 90 ms a step, of which 40 ms all-reduce exposed; at 4 the ring sends 1.5x the bytes
    per GPU at the same bandwidth: 50 + 60 = 110 ms, 4 x 50 / 110 = 1.82x."""
    res = _weak([Row(1, step_seconds=0.05), Row(2, step_seconds=0.09, grad_bytes=GRADS, exposed_comm_seconds=0.04)])
    [p] = res.comm_predictions()
    assert p.n == 4 and p.nodes == 1 and p.predicted_speedup == pytest.approx(4 * 0.05 / 0.11)
    assert p.busbw == pytest.approx(GRADS / 0.04) and p.source == "your exposed all-reduce at 2 GPUs"
    text = table(res)
    assert "# prediction (communication model: 64 MiB of gradients x 2(N-1)/N at 1.68 GB/s" in text
    assert "4 GPUs: 1.82x (45 % efficiency) — a prediction, not a measurement" in text
    assert "Gustafson" not in text  # one prediction, the model's
    assert to_json(res)["comm_predictions"][0]["predicted_efficiency"] == pytest.approx(1 / 0.11 * 0.05)
    small = _weak([Row(1, step_seconds=0.04), Row(2, step_seconds=0.08, grad_bytes=33_000, exposed_comm_seconds=0.04)])
    assert "32.2 KiB of gradients x 2(N-1)/N at 0.825 MB/s" in table(small)  # the example's small MLP


def test_a_sweep_in_the_history_is_preferred_and_one_across_nodes_predicts_two_nodes() -> None:
    rows = [Row(1, step_seconds=0.05), Row(8, step_seconds=0.06, grad_bytes=GRADS)]  # no window: exposed unknown
    res = _weak(rows, sweeps=[(8, 100e9), (16, 20e9)])  # NVLink within the node; the network across two
    within, across = res.comm_predictions()
    assert within.n == 16 and within.nodes == 1 and within.busbw == 100e9
    assert within.source == "the all-reduce sweep at 8 GPUs in the history"
    assert within.predicted_speedup == pytest.approx(sm.comm_speedup(16, 0.05, 0.05, GRADS, 100e9))
    assert across.nodes == 2 and across.busbw == 20e9 and across.predicted_speedup < within.predicted_speedup
    assert "16 GPUs on 2 nodes: " in table(res)
    measured = _weak([*rows, Row(16, nodes=2, step_seconds=0.07)], sweeps=[(8, 100e9), (16, 20e9)])
    assert [p.nodes for p in measured.comm_predictions()] == [1]  # two nodes measured: no prediction of them


def test_no_model_without_the_gradients_size_or_for_strong_scaling() -> None:
    res = _weak([Row(1, step_seconds=0.05), Row(2, step_seconds=0.055)])
    assert res.comm_predictions() == [] and "prediction (Gustafson fit" in table(res)
    strong = _weak([Row(1, step_seconds=0.05), Row(2, step_seconds=0.03, grad_bytes=GRADS)], scaling="strong")
    assert strong.comm_predictions() == [] and "prediction (Amdahl fit" in table(strong)
    nothing_exposed = _weak(
        [Row(1, step_seconds=0.05), Row(2, step_seconds=0.05, grad_bytes=GRADS, exposed_comm_seconds=0.0)]
    )
    assert nothing_exposed.comm_predictions() == []  # no bandwidth to scale: Gustafson's fit instead


@settings(max_examples=200, deadline=None)
@given(
    t1=st.floats(0.001, 10.0),
    exposed=st.floats(1e-4, 5.0),
    n=st.sampled_from([2, 4, 8, 16]),
    grads=st.integers(1, 2**34),
)
def test_the_prediction_never_beats_linear_nor_the_measured_efficiency(
    t1: float, exposed: float, n: int, grads: int
) -> None:
    """Doubling N sends more bytes per GPU at the same bandwidth: the predicted efficiency is at
    most the measured one, and never above 100 %."""
    res = _weak(
        [Row(1, step_seconds=t1), Row(n, step_seconds=t1 + exposed, grad_bytes=grads, exposed_comm_seconds=exposed)]
    )
    [p] = res.comm_predictions()
    measured = res.speedup(res.rows[1])
    assert measured is not None
    assert p.predicted_efficiency <= measured / n + 1e-9
    assert 0 < p.predicted_efficiency <= 1.0


def test_the_verdict_says_what_the_last_doubling_bought() -> None:
    res = _weak([Row(1, step_seconds=0.05, samples_per_step=16), Row(2, step_seconds=0.05, samples_per_step=32),
                 Row(4, step_seconds=0.08, samples_per_step=64)])  # fmt: skip
    two, four = res.verdicts()
    assert "against" not in two  # nothing before it but one GPU
    # 4 GPUs: 2.5x; against 2 GPUs (2.0x): 1.25x as fast for twice the GPUs, 60 % more per sample
    assert four.startswith("4 GPUs: 2.50x faster (62 % efficiency)")
    assert four.endswith("; against 2: 1.25x as fast for 2x the GPUs, 60 % more per sample")


def _record(world: int, busbw: float, backend: str = "gloo", result: str = "ok") -> BenchRecord:
    rows = tuple(
        allreduce_row(size, size // 4, size * sm.bus_factor(world) / busbw, 10, world, 0) for size in (MIB, GRADS)
    )
    doc = json.dumps(plain(AllreduceResult(backend, world, "float32", rows)))
    return BenchRecord(time.time(), "allreduce", result, 3.0, backend, world, doc)


def test_the_sweeps_are_read_from_the_history_newest_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history.sqlite"
    db = history.connect(path)
    with history.transaction(db):
        history.insert_bench(db, [_record(2, 1e9), _record(2, 3e9), _record(4, 2e9), _record(2, 9e9, "nccl"),
                                  _record(2, 7e9, result="failed")])  # fmt: skip
    db.close()
    sweeps = scaling_history.sweeps(path, "gloo", GRADS, scaling._say)
    assert [w for w, _ in sweeps] == [2, 4]
    assert sweeps[0][1] == pytest.approx(3e9) and sweeps[1][1] == pytest.approx(2e9)  # the later of world 2
    assert scaling_history.sweeps(tmp_path / "none.sqlite", "gloo", GRADS, scaling._say) == []
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database, a page of text " * 200)
    assert scaling_history.sweeps(bad, "gloo", GRADS, scaling._say) == []
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--history: no all-reduce sweep read from" in err
