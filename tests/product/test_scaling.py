"""``gpuledger scaling``: the arithmetic (fast), the bad inputs caught before any run (fast), and
the real thing: examples/scaling_train.py under torchrun with gloo at 1 and 2 CPU ranks
(integration). The example sleeps 1.5 s before its loop and 0.05 s per step (split over the
ranks with --strong), so the truth is known; the tolerances are wide (a loaded 2-core machine:
torchrun's own start-up varies by seconds) and the assertions are relations where they can be."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from domain.scaling import scaling_from
from exporter import history
from gpuledger import scaling, steptimer
from gpuledger import scaling_math as sm
from gpuledger.cli import main
from gpuledger.scaling_report import Result, Row, median_times, table, to_json
from gpuledger.scaling_run import _tail
from tests.support.scaling import EXAMPLE, PRICE, rows_of, run_scaling

# --- pure functions ----------------------------------------------------------------------------


def test_steps_placeholder_is_replaced_everywhere() -> None:
    args = ["--steps", "{steps}", "--iters={steps}", "--lr", "0.1"]
    assert sm.has_placeholder(args) and not sm.has_placeholder(["--steps", "10"])
    assert sm.substitute(args, 60) == ["--steps", "60", "--iters=60", "--lr", "0.1"]


def test_counts_are_parsed_and_checked() -> None:
    assert sm.parse_counts("4,1,2") == [1, 2, 4]
    for bad in ("", "1,x", "0,2", "2,2"):
        with pytest.raises(ValueError):
            sm.parse_counts(bad)


def test_steady_step_time_cancels_the_start_up() -> None:
    startup, step = 7.5, 0.05  # 7.5 s of start-up in both runs
    t = sm.steady_from_two_runs(20, startup + 20 * step, 60, startup + 60 * step)
    assert t == pytest.approx(step)
    with pytest.raises(ValueError):
        sm.steady_from_two_runs(20, 1.0, 20, 2.0)
    # --repeat: the median time at each step count, fewest steps first
    runs = [{"steps": 60, "seconds": 10.5}, {"steps": 20, "seconds": 8.0}, {"steps": 60, "seconds": 19.0}]
    runs += [{"steps": 20, "seconds": 8.4}, {"steps": 60, "seconds": 10.9}, {"steps": 20, "seconds": 30.0}]
    assert median_times(runs) == [(20, 8.4), (60, 10.9)]


def test_step_timer_drops_warm_up_and_keeps_the_slowest_ranks_median() -> None:
    fast = [3.0, 2.0, 0.05, 0.05, 0.06, 0.05, 0.04]  # two slow warm-up steps
    slow = [3.0, 2.0, 0.08, 0.08, 0.09, 0.08, 0.07]
    assert sm.slowest_median([fast, slow], warmup=2) == pytest.approx(0.08)
    assert sm.warmup_dropped([1.0, 2.0, 3.0], warmup=5) == [2.0, 3.0]  # at least half kept


def test_weak_and_strong_speedup_and_efficiency() -> None:
    # weak: the same per-rank batch; 2 ranks each as fast as one alone -> 2x the throughput
    assert sm.speedup("weak", 2, 0.05, 0.05) == pytest.approx(2.0)
    assert sm.speedup("weak", 4, 0.05, 0.0625) == pytest.approx(3.2)
    # strong: a fixed global batch; half the time -> 2x
    assert sm.speedup("strong", 2, 0.05, 0.025) == pytest.approx(2.0)
    assert sm.efficiency(4, 3.2) == pytest.approx(0.8)


def test_cost_is_price_times_gpus_times_time() -> None:
    assert sm.cost_per_steps(3.6, 2, 0.5) == pytest.approx(3.6 * 2 * 0.5 * 1000 / 3600)
    assert sm.relative_unit_cost(4, 3.2) == pytest.approx(1.25)  # 80 % efficient: 25 % more per sample
    # 4 GPUs at 3.2x for 2.0/GPU-hour: (4 - 3.2) / (3.2 - 1) x 2.0 per hour saved
    assert sm.break_even_hour(2.0, 4, 3.2) == pytest.approx(2.0 * 0.8 / 2.2)
    assert sm.break_even_hour(2.0, 2, 0.9) is None
    assert sm.break_even_hour(2.0, 2, 2.1) == 0.0


def test_verdict_sentences() -> None:
    v = sm.verdict(4, 3.2, "GPUs", 2.0, "USD", "per sample")
    assert v == (
        "4 GPUs: 3.20x faster (80 % efficiency), 25 % more per sample: "
        "pays if an hour saved is worth more than 0.73 USD"
    )
    slower = sm.verdict(2, 0.8, "ranks", 2.0, "EUR", "per unit of work")
    assert "slower" in slower and "150 % more per unit of work" in slower and "never pays" in slower
    assert "less per sample" in sm.verdict(2, 2.2, "GPUs", 2.0, "USD", "per sample")


def test_amdahl_fit_recovers_the_serial_fraction_and_predicts_the_next_doubling() -> None:
    f = 0.1
    points = [(n, sm.amdahl_speedup(f, n)) for n in (2, 4, 8)]
    fit = sm.fit("strong", points)
    assert fit is not None and fit.law == "Amdahl"
    assert fit.serial_fraction == pytest.approx(f)
    assert fit.next_n == 16 and fit.predicted_speedup == pytest.approx(1 / (0.1 + 0.9 / 16))
    weak = sm.fit("weak", [(2, 1.9), (4, 3.7)])
    assert weak is not None and weak.law == "Gustafson" and weak.predicted_speedup < 8
    assert sm.fit("strong", []) is None


def _result(scaling_kind: sm.Scaling = "strong", samples: float | None = 16.0) -> Result:
    res = Result("m", ["train.py"], scaling_kind, "step timer", "ranks", PRICE, "EUR", False, "no GPU energy counters")
    res.rows = [
        Row(1, step_seconds=0.05, samples_per_step=samples),
        Row(2, step_seconds=0.03, samples_per_step=samples),
        Row(4, status="failed", error="the script failed (exit 3 of a rank)"),
    ]
    return res


def test_table_says_how_it_measured_and_never_prints_zero_energy() -> None:
    text = table(_result())
    assert "strong scaling" in text and "speedup = t(1) / t(N)" in text
    assert "energy per step n/a (no GPU energy counters)" in text
    assert "2 ranks: 1.67x faster (83 % efficiency), 20 % more per sample" in text
    assert "failed: the script failed (exit 3 of a rank)" in text
    assert "prediction (Amdahl fit" in text and "a prediction, not a measurement" in text
    doc = to_json(_result())
    two = doc["rows"][1]
    assert two["cost_per_1000_steps"] == pytest.approx(PRICE * 2 * 0.03 * 1000 / 3600)
    assert two["cost_per_sample"] == pytest.approx(PRICE * 2 * 0.03 / 3600 / 16)
    assert two["energy_per_step_joules"] is None
    no_samples = table(_result("weak", None))
    assert "per unit of work" in no_samples and "n/a" in no_samples
    assert "to finish" not in text and two["finish_seconds"] is None  # without --finish


@pytest.mark.parametrize("kind", ["strong", "weak"])
def test_time_and_money_to_finish_the_training(kind: sm.Scaling) -> None:
    """--finish S: S steps of one GPU's work take S x t(1) / speedup(N) at N, and N GPUs' hours of it."""
    res = _result(kind)
    res.finish_steps = 360_000
    doc = to_json(res)
    speedup = 2 * 0.05 / 0.03 if kind == "weak" else 0.05 / 0.03
    one, two = doc["rows"][0], doc["rows"][1]
    assert one["finish_seconds"] == pytest.approx(360_000 * 0.05) == 18_000.0  # 5 h on one
    assert two["finish_seconds"] == pytest.approx(18_000 / speedup)
    assert one["finish_cost"] == pytest.approx(5 * PRICE)
    assert two["finish_cost"] == pytest.approx(18_000 / speedup / 3600 * 2 * PRICE)
    assert doc["rows"][2]["finish_seconds"] is None  # failed at 4: no figure, not 0
    text = table(res)
    assert "# to finish 360,000 steps of one GPU: 1 ranks 5.0 h, " in text
    assert {"strong": "2 ranks 3.0 h, ", "weak": "2 ranks 90 min, "}[kind] in text  # 10,800 s; 5,400 s


def test_step_timer_is_a_pass_through_without_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(steptimer.STEP_DIR_ENV, raising=False)
    assert list(steptimer.steps(range(3))) == [0, 1, 2]


def test_step_timer_writes_each_ranks_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(steptimer.STEP_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    for _ in steptimer.steps(range(4), samples_per_step=8, grad_bytes=1024):
        pass
    doc = json.loads((tmp_path / "rank-1.json").read_text())
    assert doc["samples_per_step"] == 8 and doc["grad_bytes"] == 1024 and len(doc["step_seconds"]) == 4
    for _ in steptimer.steps(range(10)):  # a loop left early still writes what it timed
        break
    assert len(json.loads((tmp_path / "rank-1.json").read_text())["step_seconds"]) == 0
    assert "torch" not in steptimer.__dict__


def test_the_failure_tail_is_the_scripts_not_torchruns(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text(
        "*****\nSetting OMP_NUM_THREADS environment variable for each process to be 1 in default\n*****\n"
        "loading data\nValueError: bad shape\n"
        "E1203 21:17:31.006000 14755 .venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/"
        "api.py:1002] failed (exitcode: 3)\nTraceback (most recent call last):\n  File run.py\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\nRoot Cause (first observed failure):\n"
        "[0]:\n  exitcode  : 3 (pid: 1)\n"
    )
    assert _tail(log) == (["loading data", "ValueError: bad shape"], 3)


# --- bad input caught before any run (in process) -----------------------------------------------


@pytest.fixture
def plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("GPULEDGER_"):
            monkeypatch.delenv(k)
    monkeypatch.setattr(scaling, "local_gpus", list)  # no GPUs here, whatever the machine has


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["scaling", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuledger scaling: "), err
    return lines[0]


@pytest.mark.usefixtures("plain_env")
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert "no script 'nope.py'" in _one_line(["--", "nope.py", "--steps", "{steps}"], capsys)
    assert "no script" in _one_line([], capsys)
    cpus = os.cpu_count() or 1
    assert f"exceed the {cpus} cores" in _one_line(["--gpus", f"1,{cpus + 1}", "--", EXAMPLE], capsys)
    assert "--gpus" in _one_line(["--gpus", "1,two", "--", EXAMPLE], capsys)
    assert "--steps" in _one_line(["--steps", "20", "--", EXAMPLE], capsys)
    assert "--timeout" in _one_line(["--timeout", "0", "--", EXAMPLE], capsys)
    assert "--repeat" in _one_line(["--repeat", "0", "--", EXAMPLE], capsys)
    assert "--json" in _one_line(["--json", str(tmp_path / "no" / "r.json"), "--", EXAMPLE], capsys)
    assert "--history" in _one_line(["--history", str(tmp_path), "--", EXAMPLE], capsys)  # a folder
    assert "--finish must be a number of steps" in _one_line(["--finish", "0", "--", EXAMPLE], capsys)
    monkeypatch.setattr(scaling, "local_gpus", lambda: ["NVIDIA H200"])
    assert "this machine has 1 GPUs" in _one_line(["--gpus", "1,2", "--", EXAMPLE], capsys)


# --- the real thing: torchrun, gloo, 1 and 2 CPU ranks --------------------------------------------


@pytest.mark.integration
def test_step_timer_weak_scaling(tmp_path: Path) -> None:
    """Recorded in a history too (--history): the record reads back as the --json document says."""
    hist = tmp_path / "history.db"
    r, doc = run_scaling(
        tmp_path, ["--gpus", "1,2", "--name", "tiny-lm", "--history", str(hist)], ["--helper", "--steps", "30"]
    )
    assert r.returncode == 0, r.stderr
    assert f"recorded in {hist} as 'tiny-lm'" in r.stderr
    db = history.connect(hist, readonly=True)
    (record,) = history.bench_records(db)
    db.close()
    assert (record.bench, record.result, record.backend, record.world_size) == ("scaling", "ok", "gloo", 2)
    run = scaling_from(record.finished, record.data or "")
    assert run is not None and (run.name, run.scaling, run.unit, run.currency) == ("tiny-lm", "weak", "ranks", "EUR")
    assert [(p.n, p.step_seconds, p.speedup) for p in run.points] == [
        (row["n"], row["step_seconds"], row["speedup"]) for row in doc["rows"]
    ]
    assert run.verdicts == tuple(doc["verdicts"]) and run.verdicts[0].startswith("2 ranks: ")
    assert doc["method"] == "step timer"
    rows = rows_of(doc)
    for n, row in rows.items():
        assert 0.045 < row["step_seconds"] < 0.12, row  # 0.05 s of sleep, the 1.5 s start-up nowhere
        assert row["samples_per_step"] == 16 * n  # from the helper: 16 per rank
        assert row["grad_bytes"] > 0
        assert row["cost_per_1000_steps"] == pytest.approx(PRICE * n * row["step_seconds"] * 1000 / 3600)
    assert 1.4 < rows[2]["speedup"] < 2.2  # truth: 2x, less the all-reduce
    assert "weak scaling" in r.stdout and "samples/s" in r.stdout and "per sample" in r.stdout
    assert "# communication: not named on CPU (gloo" in r.stdout and "NCCL INFO" not in r.stderr


@pytest.mark.integration
def test_step_timer_strong_scaling_with_a_prediction(tmp_path: Path) -> None:
    r, doc = run_scaling(tmp_path, ["--gpus", "1,2", "--scaling", "strong"], ["--helper", "--strong", "--steps", "30"])
    assert r.returncode == 0, r.stderr
    rows = rows_of(doc)
    assert 0.045 < rows[1]["step_seconds"] < 0.12
    assert 0.02 < rows[2]["step_seconds"] < rows[1]["step_seconds"]  # half the sleep at 2 ranks
    assert 1.3 < rows[2]["speedup"] < 2.2  # truth: 2x, less the all-reduce
    assert rows[2]["samples_per_step"] == rows[1]["samples_per_step"] == 16  # a fixed global batch
    assert doc["prediction"]["law"] == "Amdahl" and doc["prediction"]["next_n"] == 4
    assert "strong scaling" in r.stdout and "prediction (Amdahl fit" in r.stdout and "4 ranks:" in r.stdout
