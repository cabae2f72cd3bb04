"""Energy per step in ``gpuledger scaling``: the meter's arithmetic (fast), the cost it adds, and
the command end to end on CPU ranks with the GPUs' energy counters stood in for by a counter that
grows at a known power (integration): whatever the machine's speed, a step's energy must be that
power x the GPUs x the step's time, by both methods."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuledger import scaling
from gpuledger.cli import main
from gpuledger.scaling_energy import EnergyMeter, GpuEnergy, timer_window, visible_indices
from gpuledger.scaling_report import Result, Row, median_joules, table, to_json
from tests.support.scaling import EXAMPLE, PRICE, config

WATTS = 250.0  # per stand-in GPU


def meter_at(points: list[tuple[float, float]]) -> EnergyMeter:
    """A meter that read ``points`` (time, joules) one by one, on a clock of its own."""
    times, joules = iter([t for t, _ in points]), iter([j for _, j in points])
    m = EnergyMeter(lambda: next(joules), clock=lambda: next(times))
    for _ in points:
        m.sample()
    return m


def test_the_meter_interpolates_between_its_reads() -> None:
    m = meter_at([(10.0, 1000.0), (10.5, 1100.0), (11.0, 1300.0)])
    assert m.total() == 300.0
    assert m.at(10.25) == pytest.approx(1050.0) and m.at(10.5) == 1100.0
    assert m.between(10.25, 10.75) == pytest.approx(150.0)  # 50 J of the first half, 100 of the second
    assert m.at(9.9) is None and m.between(10.0, 11.5) is None  # outside the reads: no guess


def test_a_counter_that_goes_back_ends_the_series() -> None:
    m = meter_at([(0.0, 500.0), (1.0, 700.0), (2.0, 10.0), (3.0, 20.0)])  # a driver reload at 2 s
    assert m.samples == [(0.0, 500.0), (1.0, 700.0)] and m.total() == 200.0


def test_the_step_timers_steady_window_is_on_its_own_wall_clock() -> None:
    rank = {"started_at": 100.0, "step_seconds": [1.0, 0.5, 0.1, 0.1, 0.1]}
    window = timer_window(rank, 2)
    assert window is not None and window[0] == 101.5 and window[1] == pytest.approx(101.8) and window[2] == 3
    assert timer_window(rank, 5) is None  # no steady step
    assert timer_window({"step_seconds": [0.1] * 10}, 2) is None  # an older helper: no start time


@pytest.mark.parametrize(
    ("visible", "want"),
    [(None, [0, 1, 2, 3]), ("2,3", [2, 3]), ("GPU-c,0", [2, 0]), ("1,-1,2", [1]), ("7,1", []), ("", [])],
)
def test_cuda_visible_devices_names_the_gpus_whose_energy_counts(visible: str | None, want: list[int]) -> None:
    devices = [(i, f"GPU-{c}0000") for i, c in enumerate("abcd")]
    assert visible_indices(devices, visible) == want


def test_energy_adds_its_price_to_the_cost_and_shows_per_step() -> None:
    """2 GPUs at 2 EUR/GPU-h, 0.5 s and 300 J a step: 1,000 steps cost 0.5556 of hardware plus
    300 kJ = 0.0833 kWh x 0.15 x 1.3 = 0.01625 of energy."""
    res = Result("m", ["t.py"], "weak", "two runs", "GPUs", 2.0, "EUR", False, "", 0.15 * 1.3)
    row = Row(2, step_seconds=0.5, samples_per_step=32, energy_per_step=300.0)
    res.rows = [Row(1, step_seconds=0.45, samples_per_step=16, energy_per_step=160.0), row]
    assert res.cost_per_steps(row) == pytest.approx(2.0 * 2 * 0.5 * 1000 / 3600 + 300e3 / 3.6e6 * 0.195)
    assert res.cost_per_sample(row) == pytest.approx((res.cost_per_steps(row) or 0) / 1000 / 32)
    text = table(res)
    assert "J/step" in text and "energy from the GPUs' own counters at 0.195 EUR/kWh" in text
    assert "  300.0" in text and "  160.0" in text
    doc = to_json(res)
    assert [r["energy_per_step_joules"] for r in doc["rows"]] == [160.0, 300.0]
    included = Result("m", ["t.py"], "weak", "two runs", "GPUs", 2.0, "EUR", False, "", 0.0)
    included.rows = [row]
    assert included.cost_per_steps(row) == pytest.approx(2.0 * 2 * 0.5 * 1000 / 3600)
    assert "(in the cloud price)" in table(included)


def test_two_runs_energy_needs_every_runs_joules() -> None:
    runs = [{"steps": 220, "seconds": 12.0, "joules": 3000.0}, {"steps": 20, "seconds": 2.0, "joules": 500.0}]
    assert median_joules(runs) == [(20, 500.0), (220, 3000.0)]
    assert median_joules([*runs, {"steps": 20, "seconds": 2.0, "joules": None}]) == []


# --- the command, with stand-in energy counters ----------------------------------------------------


class StandIn:
    """GpuEnergy's shape: each GPU's counter grows at WATTS on the wall clock."""

    def __init__(self) -> None:
        self.closed = False

    def reader_of(self, n: int) -> Callable[[], float]:
        return lambda: n * WATTS * time.time()

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    meters = StandIn()
    monkeypatch.setattr(scaling, "local_gpus", lambda: ["NVIDIA H200", "NVIDIA H200"])
    monkeypatch.setattr(GpuEnergy, "open", staticmethod(lambda visible: (meters, "")))
    for k in [k for k in os.environ if k.startswith("GPULEDGER_")]:
        monkeypatch.delenv(k)
    return meters


def _run(tmp_path: Path, flags: list[str], script: list[str]) -> dict[str, Any]:
    out = tmp_path / "r.json"
    code = main(["scaling", "--config", str(config(tmp_path)), "--json", str(out), *flags, "--", EXAMPLE, *script])
    assert code == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.mark.integration
def test_step_timer_energy_is_power_times_gpus_times_step(stand_in: StandIn, tmp_path: Path) -> None:
    doc = _run(tmp_path, ["--gpus", "1,2"], ["--helper", "--steps", "40"])
    assert stand_in.closed and doc["energy"] == ""
    for row in doc["rows"]:
        # rank 0's steady steps, mean; step_seconds is the slowest rank's median: close, not equal
        assert row["energy_per_step_joules"] == pytest.approx(WATTS * row["n"] * row["step_seconds"], rel=0.15)
        hardware = PRICE * row["n"] * row["step_seconds"] * 1000 / 3600
        energy = row["energy_per_step_joules"] * 1000 / 3.6e6 * 0.15 * 1.3  # the default flat price and PUE
        assert row["cost_per_1000_steps"] == pytest.approx(hardware + energy)


@pytest.mark.integration
def test_two_runs_energy_cancels_the_start_up(stand_in: StandIn, tmp_path: Path) -> None:
    """Each run's energy includes the 1.5 s start-up at WATTS; the difference over the steps does not."""
    doc = _run(tmp_path, ["--gpus", "1", "--steps", "10,70"], ["--steps", "{steps}"])
    (row,) = doc["rows"]
    assert all(run["joules"] > WATTS * 1.5 for run in row["runs"])
    assert row["energy_per_step_joules"] == pytest.approx(WATTS * row["step_seconds"], rel=0.02)
