"""MIG instances in the exporter (issue 22, first part): the fake and NVML readers' layouts, the
instances' exact counters, a slice as a share of its GPU (a job on a ``1g.10gb`` charged 1/7 of the
GPU's time), conservation of the shares, a layout change, and the series a dcgm-exporter user knows.

Shares are by compute slices, not SMs (see ``exporter.sampling.mig``): 16 of the H100's 132 SMs is
not 1/7, and what MIG hands out, and a scheduler asks for, is slices.
"""

from __future__ import annotations

from pathlib import Path

import pynvml as real
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from domain.jobs import JobKey
from exporter.attribution.attributor import Attribution
from exporter.attribution.kubelet import PodDevice
from exporter.attribution.procfs import Owner
from exporter.attribution.shares import GpuJobs
from exporter.readers import GpmActivity, GpuLost, MigLayout, NotSupported, Process, ReaderError, mig_profile
from exporter.readers.fake import H100_MIG, H100_SLICES, FakeReader, fake_mig
from exporter.readers.nvml import NvmlReader
from exporter.readers.nvml_mig import RECHECK, MigReads
from exporter.sampling import mig, slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.scrape import render as rendering
from exporter.scrape.collector import SnapshotCollector
from tests.support.fake_pynvml import CountingNvml, FakeNvml
from tests.support.metrics import parse_metrics
from tests.support.mig import BUSY, mig_reader, mig_state
from tests.support.procfs import SLURM_V1, make_proc
from tests.support.sampling import make_sampler, step

ALICE = JobKey("4242", "alice")  # SLURM_V1's job, uid 1001


def text_of(snap: object) -> str:
    return rendering.render(snap).decode()  # type: ignore[arg-type]


# --- readers ------------------------------------------------------------------------------------------


def test_profile_names_are_nvidia_smis() -> None:
    for name, (slices, _, mb, _) in H100_MIG.items():
        assert mig_profile(slices, mb) == name
    assert mig_profile(1, 4864) == "1g.5gb"  # an A100 40GB's smallest
    assert mig_profile(7, 40192) == "7g.40gb"


def test_the_fake_refuses_a_layout_an_h100_cannot_hold() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        fake_mig(0, ("4g.40gb", "4g.40gb"))  # 8 compute slices
    with pytest.raises(ValueError, match="does not fit"):
        fake_mig(0, ("3g.40gb", "3g.40gb", "1g.10gb"))  # 7 compute, 9 memory slices
    with pytest.raises(ValueError, match="no H100 MIG profile"):
        fake_mig(0, ("1g.5gb",))


def test_the_fake_reader_in_mig_mode_answers_as_nvml_does() -> None:
    r = FakeReader(2, mig={0: ("3g.40gb", "2g.20gb", "2g.20gb")})
    with pytest.raises(NotSupported):
        r.utilization(0)
    assert r.mig_instances(1) is None  # MIG mode off
    layout = r.mig_instances(0)
    assert layout is not None and (layout.slices, layout.sm_count) == (H100_SLICES, 132)
    assert [i.profile for i in layout.instances] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    assert all(i.gpm is None for i in layout.instances)  # GPM's first read only starts its interval
    assert [layout.share(i) for i in layout.instances] == [3 / 7, 2 / 7, 2 / 7]
    assert layout.sm_share(layout.instances[0]) == 60 / 132 and layout.unallocated == 0.0
    second = r.mig_instances(0)
    assert second is not None and all(i.gpm is not None for i in second.instances)
    assert len({i.uuid for i in layout.instances}) == 3


def nvml(gpus: int = 2, layout: tuple[str, ...] = ("3g.40gb", "2g.20gb", "1g.10gb")) -> tuple[FakeNvml, NvmlReader]:
    fake = FakeNvml(gpus, mig={0: layout})
    r = NvmlReader(fake)
    r.open()
    return fake, r


def test_the_nvml_reader_reads_each_instance_through_its_handle() -> None:
    fake, r = nvml()
    first = r.mig_instances(0)
    assert first is not None and r.mig_instances(1) is None
    assert (first.slices, first.sm_count) == (7, 132)  # the largest GPU instance profile's
    i0, i1, i2 = first.instances
    assert [i.profile for i in first.instances] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert (i2.gpu_instance_id, i2.compute_instance_id, i2.slices, i2.sm_count) == (3, 0, 1, 16)
    assert i2.uuid.startswith("MIG-") and i2.memory is not None and i2.memory.total_bytes == 9856 << 20
    assert i1.processes == (Process(1001, 2 << 30),)
    assert i0.gpm is None  # the first GPM sample of each GPU instance
    again = r.mig_instances(0)
    assert again is not None and again.instances[2].gpm is not None and again.instances[2].gpm.sm > 0
    assert fake.mig_gpm_gets[-3:] == [(0, 1), (0, 2), (0, 3)]
    with pytest.raises(NotSupported):
        r.utilization(0)


def test_the_nvml_layout_is_read_again_only_every_recheck_seconds_or_when_an_instance_goes() -> None:
    fake = FakeNvml(1, mig={0: ("3g.40gb", "2g.20gb")})
    n = CountingNvml(fake)
    r = NvmlReader(n)
    r.open()
    now = [0.0]
    r._mig = MigReads(clock=lambda: now[0])
    r.mig_instances(0)
    r.mig_instances(0)
    assert n.calls["nvmlDeviceGetMigMode"] == 1 and n.calls["nvmlDeviceGetMemoryInfo"] == 4
    now[0] = RECHECK
    r.mig_instances(0)
    assert n.calls["nvmlDeviceGetMigMode"] == 2
    fake.mig[0] = ("3g.40gb",)  # the 2g instance was destroyed: its handle is stale
    with pytest.raises(ReaderError):
        r.mig_instances(0)
    layout = r.mig_instances(0)  # found afresh at once
    assert layout is not None and [i.profile for i in layout.instances] == ["3g.40gb"]
    assert n.calls["nvmlDeviceGetMigMode"] == 3


def test_an_unreadable_process_list_is_none_and_a_lost_gpu_raises() -> None:
    fake, r = nvml(1)
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = real.NVML_ERROR_NO_PERMISSION
    layout = r.mig_instances(0)
    assert layout is not None and all(i.processes is None and i.memory is not None for i in layout.instances)
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLost):
        r.mig_instances(0)


def test_a_gpu_without_mig_is_not_supported_and_a_mig_gpu_on_nvml_is_sampled() -> None:
    fake, r = nvml(1)
    fake.fail["nvmlDeviceGetMigMode"] = real.NVML_ERROR_NOT_SUPPORTED
    r._mig.forget(fake, 0)
    with pytest.raises(NotSupported):
        r.mig_instances(0)
    del fake.fail["nvmlDeviceGetMigMode"]
    r._mig.forget(fake, 0)
    n = CountingNvml(fake)
    s = Sampler(NvmlReader(n), SamplerOptions(cadence=slowlane.Cadence()))
    for _ in range(4):
        s.tick()
    g = s.snapshot.gpus[0]
    assert g.up and g.mig is not None and len(g.mig.instances) == 3
    assert "nvmlDeviceGetUtilizationRates" not in n.calls  # NotSupported under MIG: not asked
    assert "utilization" not in s.errors.totals()
    assert g.mig.instances[2].counters.sampled_seconds > 0


# --- sampling -----------------------------------------------------------------------------------------


def test_instances_count_like_gpus_and_the_gpu_is_their_sum() -> None:
    _, s, snap = mig_state(8)
    g = snap.gpus[0]
    assert g.up and g.mig is not None
    three, two, one = g.mig.instances
    assert one.counters.sampled_seconds == pytest.approx(8.0) and three.counters.sampled_seconds == pytest.approx(8.0)
    assert one.counters.busy_seconds == pytest.approx(BUSY.sm * 8)
    assert one.counters.tensor_active_seconds == pytest.approx(BUSY.tensor * 8)
    assert one.counters.allocated_seconds == pytest.approx(8.0) and two.counters.allocated_seconds == 0.0
    assert g.counters.sampled_seconds == pytest.approx(8.0)
    assert g.counters.busy_seconds == pytest.approx(BUSY.sm * 8 / 7)  # the 1g's activity at its share
    assert sum(i.share for i in g.mig.instances) + g.mig.unallocated == pytest.approx(1.0)
    assert g.mig.unallocated == pytest.approx(1 / 7)
    assert "utilization" not in snap.reader_errors and "utilization" not in s._gpus[0].unsupported


def test_a_failed_mig_read_leaves_the_round_uncovered_and_changes_nothing_else() -> None:
    r, s, before = mig_state(3)
    r.fail("mig_instances", gpu=0)
    step(s, r, 1.0, ticks=3)  # the failed round is not covered; the next two are
    g = s.snapshot.gpus[0]
    assert s.snapshot.reader_errors["mig_instances"] == 1 and g.up and g.mig is not None
    assert g.counters.sampled_seconds == pytest.approx(before.gpus[0].counters.sampled_seconds + 2.0)
    assert not {"utilization", "processes", "mig_instances"} & s._gpus[0].unsupported


@pytest.fixture
def attribution(tmp_path: Path) -> Attribution:
    proc, passwd = tmp_path / "proc", tmp_path / "passwd"
    passwd.write_text("root:x:0:0::/:/bin/sh\nalice:x:1001:1001::/:/bin/sh\n")
    make_proc(proc, 42, uid=1001, cgroup=SLURM_V1)
    return Attribution(proc, passwd)


def test_a_job_on_a_1g_slice_holds_and_pays_a_seventh(attribution: Attribution) -> None:
    r = mig_reader()
    s = make_sampler(r)
    s.attribution = attribution
    s.tick()
    step(s, r, 1.0, ticks=7)
    g = s.snapshot.gpus[0]
    job = g.jobs[ALICE]
    assert job.sampled_seconds == pytest.approx(7.0)  # it held its slice all the time
    assert job.charged_seconds == pytest.approx(7.0 / 7)  # 1/7 of the GPU's time, not its SMs' 16/132
    assert job.busy_seconds == pytest.approx(BUSY.sm * 7 / 7)  # its instance's activity at its share
    assert job.busy_seconds <= job.charged_seconds <= g.counters.sampled_seconds * g.mig.instances[2].share  # type: ignore[union-attr]
    m = parse_metrics(text_of(s.snapshot))
    charged = m["gpuledger_job_gpu_charged_seconds_total"]
    assert [v for k, v in charged.items() if ("job_id", "4242") in k] == [pytest.approx(1.0)]


def test_the_kubelet_names_the_pod_of_a_mig_device(attribution: Attribution) -> None:
    r = mig_reader()
    one_g = (r.gpus[0].mig or [])[-1]
    attribution._pods = {one_g.uuid: PodDevice("train-0", "ml", "trainer")}
    s = make_sampler(r)
    s.attribution = attribution
    s.tick()
    step(s, r, 1.0, ticks=2)
    (key,) = s.snapshot.gpus[0].jobs
    assert (key.job_id, key.pod, key.namespace) == ("4242", "train-0", "ml")


def test_a_gpu_whose_layout_changes_keeps_its_identity_and_counters() -> None:
    r, s, before = mig_state(4)
    g0 = before.gpus[0]
    old = {i.reading.uuid for i in g0.mig.instances}  # type: ignore[union-attr]
    r.set_mig(0, ("7g.80gb",))
    step(s, r, 1.0, ticks=3)  # the first round after the change only starts the new instance's GPM
    g = s.snapshot.gpus[0]
    assert g.info.uuid == g0.info.uuid and g.up
    assert g.counters.sampled_seconds == pytest.approx(4.0 + 2.0)
    assert g.mig is not None and [i.reading.profile for i in g.mig.instances] == ["7g.80gb"]
    assert not old & {i.reading.uuid for i in g.mig.instances} and g.mig.unallocated == 0.0
    m = parse_metrics(text_of(s.snapshot))
    assert {dict(k)["mig_profile"] for k in m["gpuledger_mig_sampled_seconds_total"]} == {"7g.80gb"}
    assert g.counters.busy_seconds == pytest.approx(4 * BUSY.sm / 7)  # the 1g's, then the idle 7g's
    r.set_mig(0, None)  # MIG mode off: utilisation answers again
    r.gpus[0].util = 0.5
    step(s, r, 1.0, ticks=2)
    g = s.snapshot.gpus[0]
    assert g.mig is None and g.counters.busy_seconds == pytest.approx(4 * BUSY.sm / 7 + 2 * 0.5)
    assert "gpuledger_mig_sampled_seconds_total" not in parse_metrics(text_of(s.snapshot))


# --- metrics ------------------------------------------------------------------------------------------


def test_instance_series_carry_the_labels_a_dcgm_exporter_user_knows() -> None:
    _, _, snap = mig_state(3)
    m = parse_metrics(text_of(snap))
    g0 = snap.gpus[0]
    one = g0.mig.instances[2].reading  # type: ignore[union-attr]
    want = {
        ("gpu", "0"),
        ("uuid", g0.info.uuid),
        ("gpu_instance_id", str(one.gpu_instance_id)),
        ("mig_profile", "1g.10gb"),
        ("mig_uuid", one.uuid),
    }
    share = {frozenset(k): v for k, v in m["gpuledger_mig_share_ratio"].items()}
    assert share[frozenset(want)] == pytest.approx(1 / 7)
    assert m["gpuledger_mig_sm_share_ratio"][tuple(sorted(want))] == pytest.approx(16 / 132)
    assert m["gpuledger_gpu_mig_unallocated_ratio"][(("gpu", "0"), ("uuid", g0.info.uuid))] == pytest.approx(1 / 7)
    assert all(dict(k)["gpu"] == "0" for k in m["gpuledger_mig_instance_info"])  # GPU 1 is not in MIG mode


def test_a_gpu_not_in_mig_mode_serves_no_mig_series() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0, ticks=2)
    assert "mig" not in text_of(s.snapshot)


def test_the_mig_exposition_is_prometheus_clients() -> None:
    _, _, snap = mig_state(2)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap))
    assert rendering.render(snap) == generate_latest(registry)


# --- conservation over random layouts -----------------------------------------------------------------

PROFILES = sorted(H100_MIG)
OWNERS = {pid: Owner(uid=1000 + pid, user=f"u{pid}", job_id=str(pid)) for pid in range(1, 6)}


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[str, ...], list[list[int]], list[float]]:
    """A layout an H100 holds, the jobs (pids 1-5) on each instance, each instance's SM activity."""
    profiles: list[str] = []
    for p in draw(st.lists(st.sampled_from(PROFILES), max_size=7)):
        try:
            fake_mig(0, (*profiles, p))
        except ValueError:
            continue
        profiles.append(p)
    jobs = [draw(st.lists(st.integers(1, 5), max_size=3)) for _ in profiles]
    active = [draw(st.floats(0.0, 1.0)) for _ in profiles]
    return tuple(profiles), jobs, active


@settings(max_examples=60, deadline=None)
@given(layouts(), st.integers(1, 5))
def test_shares_are_conserved_and_no_job_is_charged_above_its_instances(
    case: tuple[tuple[str, ...], list[list[int]], list[float]], rounds: int
) -> None:
    profiles, jobs, active = case
    insts = fake_mig(0, profiles)
    for inst, pids, sm in zip(insts, jobs, active, strict=True):
        inst.processes = [Process(pid, 1 << 30) for pid in pids]
        inst.gpm = GpmActivity(sm, 0.0, 0.0, 0.0)
        inst.reading()  # start GPM's interval
    layout = MigLayout(H100_SLICES, 132, tuple(i.reading() for i in insts))
    assert sum(layout.share(i) for i in layout.instances) + layout.unallocated == pytest.approx(1.0)
    held, busy_of, _ = mig.holders(layout, OWNERS, lambda uuid: None)
    book = GpuJobs()
    for t in range(rounds):
        book.integrate(held, dt=1.0, busy=mig.busy(layout) or 0.0, power=100.0, now=t, energy_from_power=True,
                       busy_of=busy_of)  # fmt: skip
    gpu_busy = (mig.busy(layout) or 0.0) * rounds
    charged = sum(c.charged_seconds for c in book.jobs.values())
    assert charged == pytest.approx(rounds * (1 - layout.unallocated - sum(
        layout.share(i) for i in layout.instances if not i.processes)))  # fmt: skip
    assert sum(c.busy_seconds for c in book.jobs.values()) <= gpu_busy + 1e-9
    for key, c in book.jobs.items():
        mine = [i for i in layout.instances if any(OWNERS[p.pid].job_id == key.job_id for p in i.processes or ())]
        assert c.charged_seconds <= rounds * sum(layout.share(i) for i in mine) + 1e-9
        assert c.busy_seconds <= c.charged_seconds + 1e-9 and c.sampled_seconds == rounds
