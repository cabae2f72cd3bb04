"""Charged seconds conserve the GPU's time: jobs sharing a GPU are charged each round times their
share (per-process SM, else memory, else equal), so together never more than the round, while
each job's sampled seconds stay the time it held the GPU (hypothesis over random holders)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.jobs import JobKey
from exporter.attribution.procfs import Owner
from exporter.attribution.shares import GpuJobs, shares
from exporter.readers import Process, ProcessUtil

OWNERS = {pid: Owner(uid=1000 + pid, user=f"u{pid}", job_id=str(pid)) for pid in range(1, 7)}


def key(pid: int) -> JobKey:
    return JobKey(str(pid), f"u{pid}")


SHAPES = {
    "equal, 2 holders": ([Process(1, None), Process(2, None)], None, {1: 0.5, 2: 0.5}),
    "equal, 3 holders": ([Process(1, None), Process(2, None), Process(3, None)], None, {1: 1 / 3, 2: 1 / 3, 3: 1 / 3}),
    "memory, 2 holders": ([Process(1, 1 << 30), Process(2, 3 << 30)], None, {1: 0.25, 2: 0.75}),
    "memory, 3 holders": (
        [Process(1, 1 << 30), Process(2, 1 << 30), Process(3, 2 << 30)],
        [],
        {1: 0.25, 2: 0.25, 3: 0.5},
    ),
    "SM, 2 holders": (
        [Process(1, 1 << 30), Process(2, 1 << 30)],
        [ProcessUtil(1, 0.6, 0.0), ProcessUtil(2, 0.2, 0.0)],
        {1: 0.75, 2: 0.25},
    ),
    "SM, 3 holders": (
        [Process(1, 1 << 30), Process(2, 1 << 30), Process(3, 8 << 30)],
        [ProcessUtil(1, 0.5, 0.0), ProcessUtil(2, 0.3, 0.0), ProcessUtil(3, 0.0, 0.0)],
        {1: 0.625, 2: 0.375, 3: 0.0},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_shared_gpu_charges_each_round_once(shape: str) -> None:
    procs, util, expected = SHAPES[shape]
    held = shares(procs, OWNERS, util, None)
    assert held == {key(p): pytest.approx(v) for p, v in expected.items()}
    jobs = GpuJobs()
    dt, busy, rounds = 2.0, 0.8, 10
    for k in range(rounds):
        jobs.integrate(held, dt=dt, busy=busy, power=300.0, now=float(k), energy_from_power=True)
        assert sum(c.charged_seconds for c in jobs.jobs.values()) == pytest.approx(dt * (k + 1))
    for pid, share in expected.items():
        c = jobs.jobs[key(pid)]
        assert c.sampled_seconds == pytest.approx(dt * rounds)  # time held: the whole GPU, each of them
        assert c.charged_seconds == pytest.approx(dt * rounds * share)
    assert sum(c.sampled_seconds for c in jobs.jobs.values()) == pytest.approx(len(expected) * dt * rounds)
    assert sum(c.busy_seconds for c in jobs.jobs.values()) <= busy * dt * rounds + 1e-9


process = st.tuples(
    st.integers(1, 6),  # pid (and so its job)
    st.one_of(st.none(), st.integers(0, 8 << 30)),  # memory held
    st.one_of(st.none(), st.floats(0.0, 1.0)),  # SM share NVML reports for it
)
round_ = st.tuples(
    st.lists(process, max_size=5, unique_by=lambda p: p[0]),
    st.floats(0.01, 30.0),  # dt
    st.floats(0.0, 1.0),  # busy
)


@given(st.lists(round_, min_size=1, max_size=40))
def test_jobs_are_never_charged_more_than_the_gpu_had(
    rounds: list[tuple[list[tuple[int, int | None, float | None]], float, float]],
) -> None:
    jobs = GpuJobs()
    gpu_sampled = gpu_busy = 0.0
    for k, (procs, dt, busy) in enumerate(rounds):
        util = [ProcessUtil(pid, sm, 0.0) for pid, _, sm in procs if sm is not None]
        held = shares([Process(pid, mem) for pid, mem, _ in procs], OWNERS, util, None)
        if held:
            assert sum(held.values()) == pytest.approx(1.0)
        jobs.integrate(held, dt=dt, busy=busy, power=None, now=float(k), energy_from_power=False)
        gpu_sampled += dt
        gpu_busy += busy * dt
    counters = list(jobs.jobs.values())
    assert sum(c.charged_seconds for c in counters) <= gpu_sampled * (1 + 1e-9)
    assert sum(c.busy_seconds for c in counters) <= gpu_busy * (1 + 1e-9) + 1e-9
    for c in counters:
        assert 0.0 <= c.charged_seconds <= c.sampled_seconds * (1 + 1e-9)
        assert c.busy_seconds <= c.charged_seconds * (1 + 1e-9) + 1e-9


@given(
    rounds=st.lists(
        st.tuples(
            st.dictionaries(st.integers(1, 4), st.floats(0.05, 1.0), max_size=4),  # holders and raw weights
            st.floats(0.1, 5.0),  # dt
        ),
        min_size=1,
        max_size=30,
    ),
    reads=st.lists(st.tuples(st.integers(0, 29), st.floats(0.0, 1e12)), max_size=8),
)
def test_link_bytes_split_over_the_jobs_never_exceed_the_gpus(
    rounds: list[tuple[dict[int, float], float]], reads: list[tuple[int, float]]
) -> None:
    """Each read's increase of a link counter is split by the jobs' share of the covered time since
    the previous read: all jobs together get the increase x the held fraction of that time, never
    more, and time no job held keeps its bytes with the GPU (the unallocated row's)."""
    jobs = GpuJobs()
    at = {k: inc for k, inc in reads}
    expected, sampled, held_time = 0.0, 0.0, 0.0
    for k, (weights, dt) in enumerate(rounds):
        total = sum(weights.values())
        holders = {key(p): w / total for p, w in weights.items()}
        jobs.integrate(holders, dt=dt, busy=0.5, power=100.0, now=float(k), energy_from_power=True)
        sampled += dt
        held_time += dt if holders else 0.0
        if k in at:
            jobs.apportion_link("nvlink", at[k])
            expected += at[k] * held_time / sampled
            sampled = held_time = 0.0
    got = sum(c.link_bytes.get("nvlink", 0.0) for c in jobs.jobs.values())
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-3)
    assert all("pcie" not in c.link_bytes for c in jobs.jobs.values())  # never read: no figure, not 0
