"""NvmlReader against a stand-in pynvml (real constants, errors and structs; capture values),
and against the real pynvml on this GPU-less machine."""

from __future__ import annotations

import pynvml as real
import pytest

from exporter.readers import GpuLost, NotSupported, ReaderError, ReaderUnavailable, XidEvent
from exporter.readers.nvml import NvmlReader
from tests.support.fake_pynvml import REC, RESERVED, STATIC, FakeNvml
from tests.support.sampling import make_sampler


def opened(gpus: int = 2) -> tuple[FakeNvml, NvmlReader]:
    fake = FakeNvml(gpus)
    reader = NvmlReader(fake)
    reader.open()
    return fake, reader


def test_values_come_back_in_si_units() -> None:
    _, r = opened()
    info = r.devices()
    assert [d.index for d in info] == [0, 1] and info[0].model == STATIC["name"]
    assert info[0].uuid != info[1].uuid and info[1].pci_bus_id == "00000000:01:00.0"
    assert r.power_watts(0) == REC["power_mW"] / 1000
    assert r.energy_joules(0) == REC["energy_mJ"] / 1000
    assert r.power_limit_watts(0) == 700.0
    assert r.utilization(0).gpu == REC["util_gpu_pct"] / 100
    assert r.clocks(0).sm_hertz == REC["sm_clock_MHz"] * 1e6
    assert r.memory(0).total_bytes == STATIC["memory_total_bytes"]
    assert r.temperature_celsius(0) == REC["temp_C"]
    assert r.clock_event_reasons(0) == REC["clock_event_reasons"]
    procs = r.processes(0)
    assert procs[0].pid == REC["procs"][0][0] and procs[0].used_memory_bytes == REC["procs"][0][1]
    assert procs[-1].used_memory_bytes is None
    ecc = r.ecc_errors(0)
    assert (ecc.corrected, ecc.uncorrected) == (5, 0)
    rows = r.remapped_rows(0)
    assert rows.correctable == 1 and rows.pending and not rows.failed
    pcie = r.pcie_throughput(0)
    assert (pcie.tx_bytes_per_second, pcie.rx_bytes_per_second) == (1000 * 1024, 2000 * 1024)


def test_process_utilization_averages_samples_and_not_found_is_empty() -> None:
    fake, r = opened()
    got = r.process_utilization(0)
    pid, sm, mem, _ = REC["proc_util"][0]
    assert len(got) == 1 and got[0].pid == pid and got[0].sm == sm / 100 and got[0].memory == mem / 100
    fake.fail["nvmlDeviceGetProcessUtilization"] = real.NVML_ERROR_NOT_FOUND
    assert r.process_utilization(0) == []  # no process ran in NVML's window


def test_samples_buffer_since_and_not_found() -> None:
    _, r = opened()
    samples = r.utilization_samples(0, 0)
    assert len(samples) == len(REC["util_samples"]) and samples[0][1] == REC["util_samples"][0][1] / 100
    assert r.utilization_samples(0, samples[-1][0]) == []  # NVML says NOT_FOUND: nothing new
    assert len(r.utilization_samples(0, samples[1][0])) == len(samples) - 2


def test_gpm_needs_two_samples_then_reports_ratios() -> None:
    fake, r = opened()
    assert r.gpm(0) is None
    a = r.gpm(0)
    assert a is not None and a.tensor == pytest.approx(REC["gpm"]["tensor_util"] / 100)
    assert a.sm == pytest.approx(REC["gpm"]["sm_util"] / 100)
    assert fake.gpm_gets == 2
    fake.fail["nvmlGpmQueryDeviceSupport"] = real.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(NotSupported):
        r.gpm(1)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (real.NVML_ERROR_NOT_SUPPORTED, NotSupported),
        (real.NVML_ERROR_NO_PERMISSION, NotSupported),
        (real.NVML_ERROR_GPU_IS_LOST, GpuLost),
        (real.NVML_ERROR_RESET_REQUIRED, GpuLost),
        (real.NVML_ERROR_GPU_NOT_FOUND, GpuLost),
        (real.NVML_ERROR_DRIVER_NOT_LOADED, ReaderUnavailable),
        (real.NVML_ERROR_UNKNOWN, ReaderError),
        (real.NVML_ERROR_TIMEOUT, ReaderError),
    ],
)
def test_nvml_errors_are_translated(code: int, kind: type[ReaderError]) -> None:
    fake, r = opened()
    fake.fail["nvmlDeviceGetPowerUsage"] = code
    with pytest.raises(kind) as e:
        r.power_watts(1)
    assert type(e.value) is kind and e.value.call == "power_watts" and e.value.gpu == 1


def test_init_failures() -> None:
    fake = FakeNvml()
    fake.init_error = real.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(ReaderUnavailable) as e:
        NvmlReader(fake).open()
    assert e.value.library_missing
    fake.init_error = real.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(ReaderUnavailable) as e:
        NvmlReader(fake).open()
    assert not e.value.library_missing


def test_xid_events_skip_devices_without_support_and_time_out_quietly() -> None:
    fake, r = opened()
    assert r.wait_xid(0.01) == []
    fake.events.append((0, 79))
    assert r.wait_xid(0.01) == [XidEvent(uuid=r.devices()[0].uuid, xid=79)]


def test_xid_watch_without_any_capable_gpu_is_not_supported_and_keeps_nothing() -> None:
    fake, r = opened()
    fake.fail["nvmlDeviceRegisterEvents"] = real.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(NotSupported):
        r.wait_xid(0.01)
    del fake.fail["nvmlDeviceRegisterEvents"]
    fake.events.append((0, 48))
    assert r.wait_xid(0.01) == [XidEvent(uuid=r.devices()[0].uuid, xid=48)]  # registered afresh
    r.close()


def test_sampler_runs_on_the_nvml_reader() -> None:
    fake, r = opened(gpus=2)
    s = make_sampler(r)  # type: ignore[arg-type]
    s.tick()
    s.slow_tick()
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = real.NVML_ERROR_UNKNOWN
    s.tick()
    snap = s.snapshot
    assert snap.nvml_up and [g.up for g in snap.gpus] == [True, True]
    assert snap.reader_errors == {"processes": 2}
    assert snap.gpus[0].health.power_limit_watts == 700.0


def test_real_pynvml_without_a_driver_is_unavailable_and_library_missing() -> None:
    try:
        real.nvmlInit()
    except real.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU machine
        real.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; scripts/gpu-check covers the real path")
    with pytest.raises(ReaderUnavailable) as e:
        NvmlReader().open()
    assert e.value.library_missing


def test_memory_used_leaves_out_what_the_driver_reserves_as_nvidia_smi_does() -> None:
    """Driver 580 on an H200: v1's "used" counts the 616 MiB the driver reserves (615 MiB "used" on
    an idle GPU, nvidia-smi 0); v2's does not. Where the driver has no v2, v1 is what there is."""
    fake, r = opened()
    assert r.memory(0).used_bytes == REC["mem_used_bytes"]
    assert r.memory(0).total_bytes == STATIC["memory_total_bytes"]
    fake.fail["nvmlDeviceGetMemoryInfo_v2"] = real.NVML_ERROR_FUNCTION_NOT_FOUND
    assert r.memory(0).used_bytes == REC["mem_used_bytes"] + RESERVED
    fake.fail["nvmlDeviceGetMemoryInfo_v2"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLost):
        r.memory(0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_gpm_values_that_are_no_number_read_as_not_measured(monkeypatch: pytest.MonkeyPatch, bad: float) -> None:
    """An H200 gave DRAM bandwidth NaN for two GPM samples milliseconds apart: that interval is not
    measured (None), so no counter can take the NaN in, and the next interval is read as usual."""
    _, r = opened()
    assert r.gpm(0) is None  # the first read only starts the interval
    monkeypatch.setitem(REC["gpm"], "dram_bw_util", bad)
    assert r.gpm(0) is None
    monkeypatch.undo()
    got = r.gpm(0)
    assert got is not None and got.dram == REC["gpm"]["dram_bw_util"] / 100


def test_gpm_graphics_activity_is_read_and_alone_unreadable_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """GRAPHICS_UTIL (what judges a MIG instance's stalls) is the fifth GPM metric of the same call;
    where it alone is no number the other four stand and graphics is None (not measured)."""
    _, r = opened()
    assert r.gpm(0) is None
    got = r.gpm(0)
    assert got is not None and got.graphics == REC["util_gpu_pct"] / 100 and got.sm == REC["gpm"]["sm_util"] / 100
    monkeypatch.setitem(REC, "util_gpu_pct", float("nan"))  # the fake's GRAPHICS_UTIL is the capture's util
    got = r.gpm(0)
    assert got is not None and got.graphics is None and got.sm == REC["gpm"]["sm_util"] / 100
