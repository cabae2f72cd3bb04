"""Stalled time (exporter.sampling.stalls): the run state machine, the real H200 capture (no stall
in any phase), a real and a synthetic spin-wait capture, the split over jobs, the exposition and the history."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import pytest

from domain.jobs import JobKey
from exporter import history
from exporter.readers import DeviceInfo, GpmActivity, Process
from exporter.readers.fake import FakeReader
from exporter.readers.replay import ReplayReader
from exporter.sampling import fastlane, slowlane
from exporter.sampling.gpu_state import TrackedGpu
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.sampling.stalls import StallRule, StallRun, step
from exporter.scrape import render
from exporter.snapshot import GpuCounters, GpuGauges, JobMinuteRow, MinuteRow
from tests.support.metrics import parse_metrics
from tests.support.paths import CAPTURE, REPO
from tests.support.sampling import make_sampler
from tests.support.sampling import step as sampler_step

SPIN = REPO / "tests" / "data" / "spin-wait-synthetic.jsonl"
SPIN_GPM = GpmActivity(sm=0.008, tensor=0.0, dram=0.0, sm_occupancy=0.0001)  # one SM of 132 spinning
WORKING = GpmActivity(sm=0.7, tensor=0.25, dram=0.3, sm_occupancy=0.4)


def rounds(run: StallRun, pattern: list[bool], *, dt: float = 1.0, min_seconds: float = 300.0) -> list[float]:
    """What each round counts, for rounds of busy seconds ``dt`` stalled or not by ``pattern``."""
    out = []
    for stalled in pattern:
        counted = step(run, stalled=stalled, dt=dt, amounts={"gpu": dt}, min_seconds=min_seconds)
        out.append(counted.get("gpu", 0.0))
    return out


def test_a_run_counts_from_its_start_once_it_reaches_the_minimum() -> None:
    counted = rounds(StallRun(), [True] * 302)
    assert counted[:299] == [0.0] * 299
    assert counted[299] == 300.0  # the 300th second: the whole run so far
    assert counted[300:] == [1.0, 1.0]
    assert sum(counted) == 302.0


def test_a_run_broken_at_299_seconds_counts_nothing() -> None:
    run = StallRun()
    counted = rounds(run, [True] * 299 + [False] + [True] * 299)
    assert sum(counted) == 0.0
    assert run.seconds == 299.0  # the second run, also short of the minimum, still pending
    assert sum(rounds(run, [False])) == 0.0 and run.pending == {}


def test_a_zero_minimum_counts_every_stalled_round_at_once() -> None:
    assert rounds(StallRun(), [True, False, True], min_seconds=0.0) == [1.0, 0.0, 1.0]


def test_pending_amounts_are_kept_per_key() -> None:
    run = StallRun()
    a, b = JobKey("1", "a"), JobKey("2", "b")
    amounts: list[dict[Hashable, float]] = [{"gpu": 1.0, a: 1.0}, {"gpu": 1.0, a: 0.5, b: 0.5}]
    assert step(run, stalled=True, dt=1.0, amounts=amounts[0], min_seconds=2.0) == {}
    assert step(run, stalled=True, dt=1.0, amounts=amounts[1], min_seconds=2.0) == {"gpu": 2.0, a: 1.5, b: 0.5}


@pytest.mark.parametrize(
    ("busy", "gpm", "stalled"),
    [
        (1.0, SPIN_GPM, True),  # torch.cuda._sleep on one SM
        (0.95, GpmActivity(0.24, 0.0, 0.0, 0.1), True),  # a hung NCCL ring: 32 channels of 132 SMs
        (0.89, SPIN_GPM, False),  # not busy enough
        (1.0, GpmActivity(0.99, 0.0, 0.88, 0.9), False),  # a device copy: memory-bound, not stalled
        (1.0, GpmActivity(0.1, 0.06, 0.0, 0.1), False),  # tensor cores moving
        (1.0, GpmActivity(0.1, 0.0, 0.05, 0.1), False),  # DRAM moving
        (1.0, WORKING, False),
    ],
)
def test_the_rule(busy: float, gpm: GpmActivity, stalled: bool) -> None:
    assert StallRule().holds(busy, gpm) is stalled


def replay(capture: Path, seconds: float, rule: StallRule, step_s: float = 1.0) -> GpuCounters:
    """The sampler over a capture (looped) for ``seconds``, one tick each ``step_s``."""
    clock = [0.0]
    reader = ReplayReader(capture, clock=lambda: clock[0])
    s = Sampler(reader, SamplerOptions(interval=step_s, cadence=slowlane.Cadence(0, 0, 0), stall=rule))
    s.tick()
    for k in range(1, round(seconds / step_s) + 1):
        clock[0] = k * step_s
        s.tick()
    return s.snapshot.gpus[0].counters


@pytest.mark.parametrize("step_s", [1.0, 7.0])
def test_the_h200_capture_has_no_stall_even_without_a_minimum(step_s: float) -> None:
    """Its device-copy phase reads 100 % busy with tensor 0 %, but SMs 99 % and DRAM 88 %:
    memory-bound, not stalled; training moves SMs 54-78 %."""
    c = replay(CAPTURE, 77.0, StallRule(min_seconds=0.0), step_s)
    assert c.busy_seconds > 35.0  # matmul, copy and training phases were busy
    assert c.stalled_seconds == 0.0


def test_a_spin_wait_counts_its_busy_seconds_once_past_the_minimum() -> None:
    c = replay(SPIN, 360.0, StallRule())  # the 60 s capture, looped six times
    assert c.busy_seconds == pytest.approx(360.0)
    assert c.stalled_seconds == pytest.approx(c.busy_seconds)
    assert c.sm_active_seconds is not None and c.sm_active_seconds < 0.01 * 360


def test_a_real_spin_wait_on_an_h200_is_stalled_and_its_gpu_busy() -> None:
    """The real capture (gpu-check on an H200): NVML says 100 % busy for 60 s, GPM one SM of 132.
    With no minimum the stalled time is its busy time but the first busy round (the rule needs a
    GPM interval to judge, and the first one is the NaN interval read as not measured)."""
    spin = REPO / "exporter" / "captures" / "h200-spin-wait.jsonl"
    c = replay(spin, 66.0, StallRule(min_seconds=0.0))
    assert 55.0 < c.busy_seconds < 66.0
    assert c.stalled_seconds is not None and c.stalled_seconds >= 0.95 * c.busy_seconds
    assert c.sm_active_seconds is not None and c.sm_active_seconds < 0.01 * c.busy_seconds
    assert replay(spin, 66.0, StallRule()).stalled_seconds == 0.0  # 60 s: under the default 300 s minimum


def test_a_spin_wait_shorter_than_the_minimum_counts_nothing() -> None:
    assert replay(SPIN, 60.0, StallRule()).stalled_seconds == 0.0
    assert replay(SPIN, 60.0, StallRule(min_seconds=30.0)).stalled_seconds == pytest.approx(60.0)


def test_without_gpm_nothing_is_counted() -> None:
    r = FakeReader(1)
    r.gpus[0].util = 1.0
    s = make_sampler(r, stall=StallRule(min_seconds=0.0))
    s.tick()
    sampler_step(s, r, 1.0, ticks=5)
    assert s.snapshot.gpus[0].counters.stalled_seconds is None
    m = parse_metrics(render.render(s.snapshot).decode())
    assert "gpuledger_gpu_stalled_seconds_total" not in m


def tracked() -> TrackedGpu:
    return TrackedGpu(info=DeviceInfo(index=0, uuid="GPU-1", model="H200", pci_bus_id="00000000:01:00.0"))


def fold_round(g: TrackedGpu, t: float, busy: float, gpm: GpmActivity | None, holders: dict[JobKey, float]) -> None:
    """One round as the sampler folds it: the GPU's counters, the jobs', then stalls."""
    r = fastlane.FastReading(t=t, gauges=GpuGauges(utilization=busy), busy=busy, gpm=gpm, processes=len(holders))
    dt = fastlane.integrate(g, r, max_gap=10.0, idle_below=0.05)
    if dt is not None:
        g.jobs.integrate(holders, dt=dt, busy=busy, power=None, now=t, energy_from_power=False)
    fastlane.fold_stall(g, r, dt, holders, StallRule(min_seconds=10.0))


def test_per_job_stalled_splits_by_share_and_a_gap_breaks_the_run() -> None:
    g = tracked()
    a, b = JobKey("1", "a"), JobKey("2", "b")
    for t in range(21):  # a baseline, then 20 s of spinning: 10 pending, then counted
        fold_round(g, float(t), 1.0, SPIN_GPM, {a: 0.75, b: 0.25})
    assert g.counters.stalled_seconds == pytest.approx(20.0)
    assert g.jobs.jobs[a].stalled_seconds == pytest.approx(15.0)
    assert g.jobs.jobs[b].stalled_seconds == pytest.approx(5.0)
    for t in range(21, 31):  # working: no stall, the jobs' counters present and unchanged
        fold_round(g, float(t), 1.0, WORKING, {a: 0.75, b: 0.25})
    for t in (31, 40, 41, 42, 43, 44, 45, 46, 47, 48):  # 9 s of spin, a round without GPM, more spin
        fold_round(g, float(t), 1.0, None if t == 40 else SPIN_GPM, {a: 0.5, b: 0.5})
    assert g.counters.stalled_seconds == pytest.approx(20.0)
    assert g.jobs.jobs[a].stalled_seconds == pytest.approx(15.0)
    assert g.counters.busy_seconds == pytest.approx(48.0)  # busy - stalled = 28 s of work


def test_exposition_and_history_carry_stalled_and_charged(tmp_path: Path) -> None:
    r = FakeReader(2)
    g0, g1 = r.gpus
    g0.util, g0.gpm, g0.processes = 1.0, SPIN_GPM, [Process(11, 1 << 30)]
    g1.util, g1.processes = 0.5, [Process(12, 1 << 30)]  # no GPM
    rows: list[MinuteRow | JobMinuteRow] = []
    wall = [6000.0]
    s = make_sampler(r, stall=StallRule(min_seconds=30.0))
    s._minute_sink = rows.extend
    s._wall = lambda: wall[0]
    s.tick()
    for _ in range(130):
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
    m = parse_metrics(render.render(s.snapshot).decode())
    uuid0, uuid1 = g0.uuid, g1.uuid
    gpu_stalled = {dict(k)["uuid"]: v for k, v in m["gpuledger_gpu_stalled_seconds_total"].items()}
    assert gpu_stalled == {uuid0: pytest.approx(130.0)}  # every covered round (the baseline read GPM's start)
    job_stalled = {dict(k)["uuid"]: v for k, v in m["gpuledger_job_gpu_stalled_seconds_total"].items()}
    assert job_stalled == {uuid0: pytest.approx(130.0)}
    charged = {dict(k)["uuid"]: v for k, v in m["gpuledger_job_gpu_charged_seconds_total"].items()}
    assert charged == {uuid0: pytest.approx(130.0), uuid1: pytest.approx(130.0)}
    s.stop()
    path = tmp_path / "h.db"
    w = history.HistoryWriter(path, hostname="n")
    w.submit(rows)
    w.stop()
    db = history.connect(path)
    hours = {h.uuid: h for h in history.gpu_hours(db, 0, 10**10)}
    assert hours[uuid0].values["stalled_seconds"] == pytest.approx(130.0)
    assert hours[uuid1].values["stalled_seconds"] is None
    totals = {t.uuid: t for t in history.job_totals(db, 0, 10**10)}
    assert totals[uuid0].charged_seconds == pytest.approx(130.0)
    assert totals[uuid0].stalled_seconds == pytest.approx(130.0)
    assert totals[uuid1].charged_seconds == pytest.approx(130.0) and totals[uuid1].stalled_seconds is None
    db.close()
