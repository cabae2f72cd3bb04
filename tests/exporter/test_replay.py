"""Replay of the real H200 capture: counters against truths computed straight from the JSON."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from exporter.readers.capture import CaptureError, load
from exporter.readers.replay import ReplayReader
from exporter.sampling import slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.snapshot import GpuCounters
from tests.support.paths import CAPTURE

LINES = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
RECS = LINES[1:]
T0, T1 = RECS[0]["t"], RECS[-1]["t"]


def truth_util_samples() -> float:
    """Mean of the sub-second samples buffer over (t0, t1]: each sample is one sampling period."""
    samples = {(ts, v / 100) for r in RECS for ts, v in r["util_samples"] if T0 < ts / 1e6 <= T1}
    return float(statistics.mean(v for _, v in samples))


def truth_gpm(key: str) -> float:
    """Each record's GPM value describes the second before it."""
    return float(sum(r["gpm"][key] * (r["t"] - p["t"]) for p, r in itertools.pairwise(RECS)) / (T1 - T0))


def run(step: float, loops: int = 1, *, gpus: int = 1, samples: bool = True) -> tuple[ReplayReader, list[GpuCounters]]:
    clock = [0.0]
    reader = ReplayReader(CAPTURE, gpus=gpus, clock=lambda: clock[0])
    if not samples:
        reader.utilization_samples = lambda index, since_us: []  # type: ignore[method-assign]
    s = Sampler(reader, SamplerOptions(interval=step, cadence=slowlane.Cadence(energy=0, health=0, pcie=0)))
    s.tick()
    s.slow_tick()
    n = round(loops * (T1 - T0) / step)
    for k in range(1, n + 1):
        clock[0] = k * step
        s.tick()
        s.slow_tick()
    s.tick()
    return reader, [g.counters for g in s.snapshot.gpus]


def test_capture_figures_match_its_readme() -> None:
    assert len(RECS) == 78 and T1 - T0 == pytest.approx(77.0)
    assert statistics.mean(r["util_gpu_pct"] for r in RECS) == pytest.approx(49.9, abs=0.05)
    assert (RECS[-1]["energy_mJ"] - RECS[0]["energy_mJ"]) / 1000 == pytest.approx(26_184.6, abs=0.1)


@pytest.mark.parametrize("step", [1.0, 7.0, 11.0])
def test_counters_reproduce_the_capture_whatever_the_interval(step: float) -> None:
    _, (c,) = run(step)
    assert c.sampled_seconds == pytest.approx(77.0)
    util = 100 * c.busy_seconds / c.sampled_seconds
    gauge_mean = statistics.mean(r["util_gpu_pct"] for r in RECS)  # the capture README's 49.9 %
    assert util == pytest.approx(100 * truth_util_samples(), abs=0.1)
    # The buffer reads 99 where utilizationRates reads 100 in busy phases, so the README's gauge
    # mean (49.9 %, 78 point readings) sits 0.57 pp above the sub-second mean (49.33 %).
    assert abs(util - gauge_mean) < 0.6
    assert c.energy_joules == pytest.approx((RECS[-1]["energy_mJ"] - RECS[0]["energy_mJ"]) / 1000, rel=1e-9)
    assert c.sm_active_seconds is not None and c.tensor_active_seconds is not None
    assert c.sm_active_seconds / 77 == pytest.approx(truth_gpm("sm_util") / 100, abs=0.005)
    assert c.tensor_active_seconds / 77 == pytest.approx(truth_gpm("tensor_util") / 100, abs=0.005)


def test_utilisation_converges_on_the_samples_mean_over_many_loops() -> None:
    _, (c,) = run(1.0, loops=4)
    assert 100 * c.busy_seconds / c.sampled_seconds == pytest.approx(100 * truth_util_samples(), abs=0.05)


def test_without_the_samples_buffer_the_gauge_is_integrated() -> None:
    _, (c,) = run(1.0, samples=False)
    step_mean = statistics.mean(r["util_gpu_pct"] for r in RECS[1:]) / 100  # record r holds for the second after it
    assert c.busy_seconds / c.sampled_seconds == pytest.approx(step_mean, abs=0.005)


def test_allocated_and_allocated_idle_match_the_phases() -> None:
    _, (c,) = run(1.0)
    held = [r for r in RECS[1:] if r["procs"]]
    idle = [r for r in held if statistics.mean(v for _, v in r["util_samples"]) < 5]
    assert c.allocated_seconds == pytest.approx(len(held), abs=1.0)
    assert c.allocated_idle_seconds == pytest.approx(len(idle), abs=1.0)
    assert 14 <= c.allocated_idle_seconds <= 18  # the idle_end phase: memory held, GPU idle


def test_one_capture_as_many_gpus_with_distinct_identities() -> None:
    reader, counters = run(1.0, gpus=4)
    devs = reader.devices()
    assert len({d.uuid for d in devs}) == 4 and len({d.pci_bus_id for d in devs}) == 4
    assert all(d.uuid.startswith("GPU-") and d.model == "NVIDIA H200" for d in devs)
    # staggered: at one moment the GPUs are in different phases ...
    powers = {round(reader.power_watts(i)) for i in range(4)}
    assert len(powers) >= 3
    # ... but each covers the whole capture once per loop
    for c in counters:
        assert 100 * c.busy_seconds / c.sampled_seconds == pytest.approx(100 * truth_util_samples(), abs=0.3)


def test_loop_keeps_the_energy_counter_climbing_and_no_loop_holds_the_end() -> None:
    clock = [0.0]
    looped = ReplayReader(CAPTURE, clock=lambda: clock[0])
    once = ReplayReader(CAPTURE, loop=False, clock=lambda: clock[0])
    delta = (RECS[-1]["energy_mJ"] - RECS[0]["energy_mJ"]) / 1000
    e0 = looped.energy_joules(0)
    readings = []
    for t in range(0, 3 * 77 + 1, 7):
        clock[0] = float(t)
        readings.append(looped.energy_joules(0))
    assert readings == sorted(readings)
    clock[0] = 2 * 77.0
    assert looped.energy_joules(0) - e0 == pytest.approx(2 * delta)
    assert once.energy_joules(0) - e0 == pytest.approx(delta)
    assert once.power_watts(0) == RECS[-1]["power_mW"] / 1000


def test_replay_at_speed_runs_the_capture_faster() -> None:
    clock = [0.0]
    fast = ReplayReader(CAPTURE, speed=10.0, clock=lambda: clock[0])
    clock[0] = 7.7
    assert fast.now() == pytest.approx(77.0)
    assert fast.time_scale == 10.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty capture"),
        ('{"nope": 1}\n', "first line must be"),
        ('{"static": {"name": "x"}}\n', "bad static field"),
        (LINES and json.dumps(LINES[0]) + "\nnot json\n", ":2: not JSON"),
        (json.dumps(LINES[0]) + "\n" + json.dumps(RECS[0]) + "\n", "at least two samples"),
        (
            json.dumps(LINES[0]) + "\n" + json.dumps(RECS[1]) + "\n" + json.dumps(RECS[0]) + "\n",
            ":3: sample time",
        ),
        (json.dumps(LINES[0]) + "\n" + json.dumps({"t": 1}) + "\n", ":2: bad or missing field"),
    ],
)
def test_bad_captures_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(content)
    with pytest.raises(CaptureError, match=message):
        load(p)
