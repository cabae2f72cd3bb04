"""Stalled time under MIG (issue 22): each instance judged on its own GPM graphics activity, counted
at the busy time MIG gives it (its share times its SM activity), for the GPU and for each job on it;
never above busy, absent (not zero) where the graphics activity was not read."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.jobs import JobKey
from exporter.attribution.attributor import Attribution
from exporter.attribution.procfs import Owner
from exporter.readers import DeviceInfo, GpmActivity, MigLayout, Process
from exporter.readers.fake import H100_SLICES, FakeMig, FakeReader, fake_mig
from exporter.readers.replay import ReplayReader
from exporter.sampling import mig, slowlane
from exporter.sampling.gpu_state import TrackedGpu
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.sampling.stalls import StallRule
from exporter.scrape import render
from tests.support.metrics import parse_metrics
from tests.support.paths import CAPTURE, REPO
from tests.support.procfs import SLURM_V1, make_proc
from tests.support.sampling import make_sampler, step

HUNG = GpmActivity(sm=0.1, tensor=0.0, dram=0.0, sm_occupancy=0.05, graphics=1.0)  # a spinning collective
WORKING = GpmActivity(sm=0.8, tensor=0.4, dram=0.3, sm_occupancy=0.5, graphics=1.0)
Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]
ALICE, BOB = JobKey("4242", "alice"), JobKey("4343", "bob")


@pytest.fixture
def attribution(tmp_path: Path) -> Attribution:
    proc, passwd = tmp_path / "proc", tmp_path / "passwd"
    passwd.write_text("alice:x:1001:1001::/:/bin/sh\nbob:x:1002:1002::/:/bin/sh\n")
    make_proc(proc, 42, uid=1001, cgroup=SLURM_V1)
    make_proc(proc, 43, uid=1002, cgroup=SLURM_V1.replace("uid_1001", "uid_1002").replace("4242", "4343"))
    return Attribution(proc, passwd)


def sampled(attribution: Attribution, one_g: GpmActivity | None, three_g: GpmActivity | None, seconds: int) -> Metrics:
    """A GPU with a 3g instance (bob's job) and a 1g (alice's), sampled ``seconds`` one-second
    rounds with a 5-second minimum; the exposition's series by name."""
    r = FakeReader(1, mig={0: ("3g.40gb", "1g.10gb")})
    big, small = r.gpus[0].mig or []
    big.processes, big.gpm = [Process(43, 1 << 30)], three_g
    small.processes, small.gpm = [Process(42, 1 << 30)], one_g
    s = make_sampler(r, stall=StallRule(min_seconds=5.0))
    s.attribution = attribution
    s.tick()
    step(s, r, 1.0, ticks=seconds)
    return parse_metrics(render.render(s.snapshot).decode())


def by_job(m: Metrics, name: str) -> dict[str, float]:
    return {dict(k)["job_id"]: v for k, v in m.get(name, {}).items()}


def test_a_hung_slice_stalls_its_job_alone_at_its_busy_time(attribution: Attribution) -> None:
    m = sampled(attribution, HUNG, WORKING, 10)
    stalled = by_job(m, "gpuledger_job_gpu_stalled_seconds_total")
    busy = by_job(m, "gpuledger_job_gpu_busy_seconds_total")
    # the baseline round started GPM's interval: 10 covered rounds, all counted once 5 s had held
    assert stalled["4242"] == pytest.approx(HUNG.sm * 10 / 7)
    assert stalled["4242"] == pytest.approx(busy["4242"])  # all its busy time was spinning
    assert stalled["4343"] == 0.0  # measured, and working
    (gpu,) = m["gpuledger_gpu_stalled_seconds_total"].values()
    assert gpu == pytest.approx(stalled["4242"])
    (gpu_busy,) = m["gpuledger_gpu_busy_seconds_total"].values()
    assert gpu_busy == pytest.approx((HUNG.sm / 7 + WORKING.sm * 3 / 7) * 10)


def test_a_hang_shorter_than_the_minimum_counts_nothing(attribution: Attribution) -> None:
    m = sampled(attribution, HUNG, WORKING, 4)
    assert by_job(m, "gpuledger_job_gpu_stalled_seconds_total") == {"4242": 0.0, "4343": 0.0}


def test_without_graphics_activity_stalled_time_is_not_measured(attribution: Attribution) -> None:
    """An instance whose graphics activity is unread (a driver without GRAPHICS_UTIL): nothing is
    judged, on any instance, and the counters are absent rather than zero."""
    m = sampled(attribution, GpmActivity(0.1, 0.0, 0.0, 0.05), WORKING, 10)
    assert "gpuledger_gpu_stalled_seconds_total" not in m
    assert "gpuledger_job_gpu_stalled_seconds_total" not in m
    assert set(by_job(m, "gpuledger_job_gpu_busy_seconds_total")) == {"4242", "4343"}  # busy still measured


def tracked() -> TrackedGpu:
    return TrackedGpu(info=DeviceInfo(index=0, uuid="GPU-1", model="H100", pci_bus_id="00000000:01:00.0"))


def test_an_unread_round_breaks_every_instances_run() -> None:
    insts = fake_mig(0, ("1g.10gb", "1g.10gb"))
    for i in insts:
        i.gpm = HUNG
        i.reading()
    layout = MigLayout(H100_SLICES, 132, tuple(i.reading() for i in insts))
    g, rule = tracked(), StallRule(min_seconds=3.0)
    for t in range(5):
        mig.fold_stall(g, layout, None if t == 2 else 1.0, {}, rule)  # t=2: a gap
    assert g.counters.stalled_seconds == 0.0  # two rounds, a break, two rounds: never 3 s
    mig.fold_stall(g, layout, 1.0, {}, rule)
    assert g.counters.stalled_seconds == pytest.approx(2 * 3 * HUNG.sm / 7)  # 3 s of each 1g instance
    mig.fold_stall(g, None, 1.0, {}, rule)  # the layout went unread: runs forgotten
    assert g.mig_stall == {}


OWNERS = {pid: Owner(job_id=str(pid), user=f"u{pid}") for pid in range(1, 6)}
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[FakeMig], list[list[int]], list[GpmActivity]]:
    profiles: list[str] = []
    for p in draw(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=7)):
        try:
            fake_mig(0, (*profiles, p))
        except ValueError:
            continue
        profiles.append(p)
    insts = fake_mig(0, profiles)
    jobs = [draw(st.lists(st.integers(1, 5), max_size=3)) for _ in insts]
    unit = st.floats(0.0, 1.0)
    gpm = [GpmActivity(draw(unit), draw(unit), draw(unit), 0.0, draw(unit)) for _ in insts]
    return insts, jobs, gpm


@settings(max_examples=80, deadline=None)
@given(layouts(), st.integers(1, 6), st.sampled_from([0.0, 2.0]))
def test_stalled_never_exceeds_busy_and_the_jobs_never_exceed_the_gpu(
    case: tuple[list[FakeMig], list[list[int]], list[GpmActivity]], rounds: int, minimum: float
) -> None:
    insts, jobs, gpm = case
    for inst, pids, a in zip(insts, jobs, gpm, strict=True):
        inst.processes, inst.gpm = [Process(pid, 1 << 30) for pid in pids], a
        inst.reading()  # start GPM's interval
    layout = MigLayout(H100_SLICES, 132, tuple(i.reading() for i in insts))
    held, busy_of, by_instance = mig.holders(layout, OWNERS, lambda uuid: None)
    g, rule = tracked(), StallRule(min_seconds=minimum)
    for t in range(rounds):
        g.jobs.integrate(held, dt=1.0, busy=mig.busy(layout) or 0.0, power=None, now=t, energy_from_power=False,
                         busy_of=busy_of)  # fmt: skip
        mig.fold_stall(g, layout, 1.0, by_instance, rule)
    stalled = g.counters.stalled_seconds
    assert stalled is not None
    # the truth: an instance that holds the rule for the whole window counts all its busy time once
    # it has lasted the minimum, the others nothing
    long_enough = rounds >= minimum
    truth = sum(
        layout.share(i) * i.gpm.sm * rounds
        for i in layout.instances
        if i.gpm is not None and i.gpm.graphics is not None and rule.holds(i.gpm.graphics, i.gpm) and long_enough
    )
    assert stalled == pytest.approx(truth, abs=1e-9)
    assert stalled <= (mig.busy(layout) or 0.0) * rounds + 1e-9
    assert sum(j.stalled_seconds or 0.0 for j in g.jobs.jobs.values()) <= stalled + 1e-9
    for key, j in g.jobs.jobs.items():
        assert j.stalled_seconds is not None, key  # measured: zero or more, never absent
        assert j.stalled_seconds <= j.busy_seconds + 1e-9


@pytest.mark.parametrize(("capture", "stalls"), [("spin-wait-synthetic.jsonl", True), (None, False)])
def test_a_capture_replayed_as_mig_instances_stalls_only_where_it_spun(capture: str | None, stalls: bool) -> None:
    """The replay presents each instance at its own place in the capture; its graphics activity is the
    capture's utilisation (captures before GRAPHICS_UTIL was recorded). The synthetic spin-wait (100 %
    busy, SMs near still) stalls every instance, the bundled H200 capture (matmul, copies, training)
    none."""
    clock = [0.0]
    path = REPO / "tests" / "data" / capture if capture else CAPTURE
    reader = ReplayReader(path, clock=lambda: clock[0], mig=("3g.40gb", "2g.20gb", "2g.20gb"))
    options = SamplerOptions(interval=1.0, cadence=slowlane.Cadence(0, 0, 0), stall=StallRule(min_seconds=0.0))
    s = Sampler(reader, options)
    s.tick()
    for k in range(1, 78):
        clock[0] = float(k)
        s.tick()
    c = s.snapshot.gpus[0].counters
    assert c.busy_seconds is not None and c.stalled_seconds is not None and c.busy_seconds > 0
    if stalls:
        assert c.stalled_seconds == pytest.approx(c.busy_seconds, rel=0.05)
    else:
        assert c.stalled_seconds == 0.0
