"""Per-job accounting: shares, energy apportioning, the sampler's job series, expiry, history,
hostile names in the exposition."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from domain.jobs import JobKey
from exporter import history
from exporter.attribution.attributor import Attribution
from exporter.attribution.kubelet import PodDevice
from exporter.attribution.procfs import Owner
from exporter.attribution.shares import GpuJobs, shares
from exporter.readers import FactValue, Process, ProcessUtil
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.snapshot import JobMinuteRow, MinuteRow
from tests.support.clock import FakeMonotonic
from tests.support.metrics import parse_metrics
from tests.support.procfs import K8S_SYSTEMD_V2, PLAIN_USER, SLURM_V1, make_proc
from tests.support.sampling import make_sampler, step
from tests.support.tools import require_binary

ALICE = Owner(uid=1001, user="alice", job_id="7")
BOB = Owner(uid=1002, user="bob", job_id="8")


def test_shares_follow_sm_utilisation_then_memory_then_equal_parts() -> None:
    procs = [Process(1, 1 << 30), Process(2, 3 << 30), Process(3, None)]
    owners = {1: ALICE, 2: BOB, 3: ALICE}
    by_sm = shares(procs, owners, [ProcessUtil(1, 0.6, 0.1), ProcessUtil(2, 0.2, 0.1)], None)
    assert by_sm == {JobKey("7", "alice"): pytest.approx(0.75), JobKey("8", "bob"): pytest.approx(0.25)}
    by_mem = shares(procs, owners, [], None)  # NVML: no process ran in the window
    assert by_mem == {JobKey("7", "alice"): pytest.approx(0.25), JobKey("8", "bob"): pytest.approx(0.75)}
    equal = shares([Process(1, None), Process(2, None)], owners, None, None)
    assert equal == {JobKey("7", "alice"): 0.5, JobKey("8", "bob"): 0.5}
    assert shares([], owners, None, None) == {}


def test_the_kubelet_names_the_pod_over_cgroup_ids() -> None:
    owner = Owner(uid=0, user="root", pod_uid="8f3d-uid", container_id="4b1c9f0e2d3a5b6c7d8e9f")
    assert shares([Process(5, 1)], {5: owner}, None, None) == {JobKey("", "root", "8f3d-uid", "", "4b1c9f0e2d3a"): 1.0}
    named = shares([Process(5, 1)], {5: owner}, None, PodDevice("train-0", "ml", "trainer"))
    assert named == {JobKey("", "root", "train-0", "ml", "trainer"): 1.0}
    unknown = shares([Process(6, 1)], {6: None}, None, None)  # not in /proc: nothing known
    assert unknown == {JobKey(): 1.0}


def test_energy_is_apportioned_from_the_counter_by_power_share() -> None:
    jobs = GpuJobs()
    a, b = JobKey("1", "a"), JobKey("2", "b")
    for _ in range(10):  # 10 s at 400 W, a holds 75 %
        jobs.integrate({a: 0.75, b: 0.25}, dt=1.0, busy=0.8, power=400.0, now=1.0, energy_from_power=False)
    for _ in range(10):  # 10 s at 100 W, nobody holds it
        jobs.integrate({}, dt=1.0, busy=0.0, power=100.0, now=2.0, energy_from_power=False)
    jobs.apportion_energy(5200.0)  # the counter says 5.2 kJ (the power integral said 5.0 kJ)
    assert jobs.jobs[a].energy_joules == pytest.approx(5200 * 3000 / 5000)
    assert jobs.jobs[b].energy_joules == pytest.approx(5200 * 1000 / 5000)
    assert jobs.jobs[a].busy_seconds == pytest.approx(6.0) and jobs.jobs[a].sampled_seconds == pytest.approx(10.0)
    jobs.expire(now=2.0 + 601, grace=600)
    assert jobs.jobs == {}


@pytest.fixture
def node(tmp_path: Path) -> tuple[FakeReader, Attribution, Path]:
    proc = tmp_path / "proc"
    passwd = tmp_path / "passwd"
    passwd.write_text(
        'root:x:0:0::/:/bin/sh\nalice:x:1001:1001::/:/bin/sh\nev"il\\user ü <script>:x:1003:1003::/:/bin/sh\n'
    )
    make_proc(proc, 300, uid=1001, cgroup=SLURM_V1)
    make_proc(proc, 301, uid=1003, cgroup=PLAIN_USER)
    make_proc(proc, 302, uid=0, cgroup=K8S_SYSTEMD_V2)
    r = FakeReader(2)
    r.gpus[0].util = 0.8
    r.gpus[0].power_watts = 400.0
    r.gpus[0].processes = [Process(300, 2 << 30), Process(301, 1 << 30)]
    r.gpus[0].process_util = [ProcessUtil(300, 0.45, 0.1), ProcessUtil(301, 0.15, 0.0)]
    r.gpus[1].processes = [Process(302, 1 << 30)]
    return r, Attribution(proc, passwd), tmp_path


def test_the_sampler_keeps_per_job_series(
    node: tuple[FakeReader, Attribution, Path], frozen_monotonic: FakeMonotonic
) -> None:
    r, attribution, _ = node
    s = make_sampler(r, job_grace=1.0)
    s.attribution = attribution
    s.tick()
    s.slow_tick()
    step(s, r, 1.0, ticks=10)
    g0, g1 = s.snapshot.gpus
    alice, evil = JobKey("4242", "alice"), JobKey("", 'ev"il\\user ü <script>')
    assert set(g0.jobs) == {alice, evil}
    assert g0.jobs[alice].sampled_seconds == pytest.approx(10.0) and g0.jobs[evil].sampled_seconds == pytest.approx(
        10.0
    )
    assert g0.jobs[alice].busy_seconds == pytest.approx(8.0 * 0.75)
    assert g0.jobs[alice].busy_seconds + g0.jobs[evil].busy_seconds == pytest.approx(g0.counters.busy_seconds)
    energy = g0.jobs[alice].energy_joules + g0.jobs[evil].energy_joules
    assert energy == pytest.approx(g0.counters.energy_joules, rel=0.11)  # the first round is a baseline
    pod = JobKey("", "root", "8f3d5c1e-1234-4a6b-9f1e-0a1b2c3d4e5f", "", "4b1c9f0e2d3a")
    assert set(g1.jobs) == {pod}
    # bob's job leaves GPU 0: no longer holding, series kept for the grace period, then gone
    r.gpus[0].processes = [Process(300, 2 << 30)]
    r.gpus[0].process_util = []
    step(s, r, 1.0, ticks=2)
    assert not s.snapshot.gpus[0].jobs[evil].holding and s.snapshot.gpus[0].jobs[alice].holding
    m = parse_metrics(render.render(s.snapshot).decode())
    info = {dict(k)["user"] for k in m["gpuledger_gpu_job_info"]}
    assert info == {"alice", "root"}  # info: only jobs holding a GPU now
    assert any(dict(k)["user"] == 'ev"il\\user ü <script>' for k in m["gpuledger_job_gpu_busy_seconds_total"])
    frozen_monotonic.advance(1.2)  # past the grace period
    step(s, r, 1.0)
    assert evil not in s.snapshot.gpus[0].jobs


def test_link_bytes_are_split_over_the_jobs_by_their_share_of_the_time(
    node: tuple[FakeReader, Attribution, Path], frozen_monotonic: FakeMonotonic
) -> None:
    """GPU 0 has 4 NVLink links and PCIe; alice's job holds it with 3/4 of the share (SM), the other
    job 1/4: each link counter's growth between reads goes 3:1 to them, together all of it (they
    hold the GPU every round). GPU 1's pod: PCIe only, no NVLink figure at all (absent, not 0)."""
    r, attribution, _ = node
    r.gpus[0].nvlinks = 4
    s = make_sampler(r)
    s.attribution = attribution
    s.tick()
    s.slow_tick()
    base = dict(s.snapshot.gpus[0].counters.facts)
    step(s, r, 1.0, ticks=10)
    g0, g1 = s.snapshot.gpus

    def both(facts: Mapping[str, FactValue], link: str) -> float:
        vals = [facts.get(f"{link}_{d}_bytes", 0.0) for d in ("tx", "rx")]
        return sum(sum(v.values()) if isinstance(v, Mapping) else v for v in vals)

    grew = {link: both(g0.counters.facts, link) - both(base, link) for link in ("nvlink", "pcie")}
    alice, evil = JobKey("4242", "alice"), JobKey("", 'ev"il\\user ü <script>')
    for link in ("nvlink", "pcie"):
        assert grew[link] > 0
        assert g0.jobs[alice].link_bytes[link] == pytest.approx(0.75 * grew[link])
        assert g0.jobs[evil].link_bytes[link] == pytest.approx(0.25 * grew[link])
    (pod,) = g1.jobs.values()
    assert set(pod.link_bytes) == {"pcie"}
    m = parse_metrics(render.render(s.snapshot).decode())
    links = {(dict(k)["gpu"], dict(k)["user"], dict(k)["link"]) for k in m["gpuledger_job_gpu_link_bytes_total"]}
    assert ("0", "alice", "nvlink") in links and ("1", "root", "pcie") in links and ("1", "root", "nvlink") not in links


def test_job_minutes_reach_the_history(node: tuple[FakeReader, Attribution, Path]) -> None:
    r, attribution, tmp = node
    rows: list[MinuteRow | JobMinuteRow] = []
    wall = [6000.0]
    s = make_sampler(r)
    s.attribution = attribution
    s._minute_sink = rows.extend
    s._wall = lambda: wall[0]
    s.tick()
    for _ in range(130):
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
        s.slow_tick()
    s.stop()
    db = history.connect(tmp / "h.db")
    w = history.HistoryWriter(tmp / "h.db", hostname="n")
    w.submit(rows)
    w.stop()
    totals = {(t.uuid, t.job): t for t in history.job_totals(db, 0, 10**10)}
    g0 = s._gpus[0]  # the state the final partial minute was cut from (the snapshot lags the slow lane)
    assert len(g0.jobs.jobs) == 2
    for key, c in g0.jobs.jobs.items():
        t = totals[(g0.info.uuid, key)]
        sampled, busy, energy = t.sampled_seconds, t.busy_seconds, t.energy_joules
        assert sampled == pytest.approx(c.sampled_seconds) and busy == pytest.approx(c.busy_seconds)
        assert energy == pytest.approx(c.energy_joules)


@pytest.mark.integration
def test_hostile_names_are_escaped_and_promtool_agrees(node: tuple[FakeReader, Attribution, Path]) -> None:
    r, attribution, _ = node
    s = make_sampler(r)
    s.attribution = attribution
    attribution._pods = {r.gpus[1].uuid: PodDevice('p"od\\1\nx', "ns <script>", "c ü")}
    s.tick()
    step(s, r, 1.0, ticks=3)
    text = render.render(s.snapshot).decode()
    m = parse_metrics(text)
    labels = [dict(k) for k in m["gpuledger_gpu_job_info"]]
    assert {"pod": 'p"od\\1\nx', "namespace": "ns <script>", "container": "c ü"}.items() <= next(
        d for d in labels if d["gpu"] == "1"
    ).items()
    assert 'pod="p\\"od\\\\1\\nx"' in text  # escaped on the wire
    res = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
