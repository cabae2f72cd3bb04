"""The fact table through the real readers: NvmlReader's field values against a stand-in pynvml
(real constants, structs and return codes), NVML calls per sampling round, and the replay of
captures with and without facts."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml as real
import pytest

from exporter.facts import FACTS, nvlink, pcie, throttle
from exporter.readers import GpuLost, NotSupported, ReaderError
from exporter.readers.capture import CaptureError, load
from exporter.readers.nvml import NvmlReader
from exporter.readers.replay import ReplayReader
from exporter.sampling import slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions
from tests.support.fake_pynvml import CountingNvml, FakeNvml
from tests.support.hostile_captures import HEADER, RECORDS
from tests.support.paths import CAPTURE
from tests.support.sampling import make_sampler

NVLINK = [f for f in FACTS if f in nvlink.FACTS]


def opened(gpus: int = 2, nvlinks: int = 0) -> tuple[FakeNvml, NvmlReader]:
    fake = FakeNvml(gpus, nvlinks)
    reader = NvmlReader(fake)
    reader.open()
    return fake, reader


def test_field_values_come_back_in_si_units_in_one_call() -> None:
    fake, r = opened(nvlinks=2)
    got = r.read_facts(0, FACTS)
    assert fake.field_gets == 2  # the GPU's links, counted once, and the batch
    assert (got["pcie_tx_bytes"], got["pcie_rx_bytes"], got["pcie_replays"]) == (1e7, 2e7, 3.0)
    assert got["nvlink_tx_bytes"] == {0: 1000 * 1024.0, 1: 2000 * 1024.0}  # KiB
    assert got["nvlink_state"] == {0: 1.0, 1: 1.0}
    assert got["nvlink_crc_errors"] == {0: 0.0, 1: 0.0}
    assert got["power_violation_seconds"] == pytest.approx(2.5)  # nanoseconds
    assert got["low_utilization_violation_seconds"] == pytest.approx(1.0)
    assert len(fake.asked) == 3 + 6 + 2 * len(NVLINK)
    r.read_facts(0, FACTS)
    assert fake.field_gets == 3, "one call a round once the links are known"


def test_a_pcie_attached_gpu_has_no_nvlink_and_a_field_nvml_lacks_is_not_asked_again() -> None:
    fake, r = opened()  # as the capture's H200: NVML_FI_DEV_NVLINK_LINK_COUNT is NotSupported
    del fake.fields[real.NVML_FI_DEV_PERF_POLICY_RELIABILITY]
    got = r.read_facts(1, FACTS)
    for f in NVLINK:
        assert isinstance(got[f.name], NotSupported) and "no NVLink" in str(got[f.name])
    assert isinstance(got["reliability_violation_seconds"], NotSupported)
    assert got["pcie_tx_bytes"] == 1e7
    r.read_facts(1, FACTS)
    assert (real.NVML_FI_DEV_PERF_POLICY_RELIABILITY, 0) not in fake.asked
    assert isinstance(r.read_facts(1, FACTS)["reliability_violation_seconds"], NotSupported)
    assert fake.field_gets == 1 + 3  # the link count once, then one batch a read


def test_a_failed_batch_fails_each_fact_and_a_lost_gpu_raises() -> None:
    fake, r = opened(nvlinks=1)
    facts = [pcie.TX, throttle.FACTS[0], *NVLINK]
    fake.fail["nvmlDeviceGetFieldValues"] = real.NVML_ERROR_UNKNOWN
    got = r.read_facts(0, facts)
    assert {type(e) for e in got.values()} == {ReaderError}
    assert {e.call for e in got.values() if isinstance(e, ReaderError)} == {f.name for f in facts}
    fake.fail["nvmlDeviceGetFieldValues"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLost):
        r.read_facts(0, facts)
    del fake.fail["nvmlDeviceGetFieldValues"]
    assert r.read_facts(0, facts)["nvlink_rx_bytes"] == {0: 2000 * 1024.0}  # the links were counted afresh


def test_nvml_calls_per_round_do_not_grow_and_the_blocking_pcie_call_is_gone() -> None:
    n = CountingNvml(FakeNvml(8))
    s = Sampler(NvmlReader(n), SamplerOptions(cadence=slowlane.Cadence()))
    s.tick()
    s.slow_tick()
    n.calls.clear()
    s.tick()
    assert sum(n.calls.values()) == 96, n.calls  # 12 a GPU, as before the fact table
    assert "nvmlDeviceGetFieldValues" not in n.calls
    n.calls.clear()
    for g in s._gpus:
        g.due.clear()  # everything due: energy, health (and its facts), pcie (and its counters)
    s.slow_tick()
    assert dict(n.calls) == {
        "nvmlDeviceGetTotalEnergyConsumption": 8,
        "nvmlDeviceGetEnforcedPowerLimit": 8,
        "nvmlDeviceGetTotalEccErrors": 16,
        "nvmlDeviceGetRemappedRows": 8,
        "nvmlDeviceGetFieldValues": 8,  # was nvmlDeviceGetPcieThroughput: 16, ~21 ms each
    }


def test_the_sampler_on_nvml_serves_the_counters_from_their_first_reading() -> None:
    fake, r = opened(gpus=1)
    s = make_sampler(r)  # type: ignore[arg-type]
    s.tick()
    s.slow_tick()
    fake.fields[real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES] = (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 10_004_096)
    s.slow_tick()
    s.tick()
    g = s.snapshot.gpus[0]
    assert g.facts["pcie_tx_bytes"] == 4096.0 and g.facts["power_violation_seconds"] == 0.0
    assert not any(f.name in g.facts for f in NVLINK) and s.snapshot.reader_errors == {}


# --- replay and captures --------------------------------------------------------------------------------


def capture_with_facts(tmp_path: Path) -> Path:
    """The bundled capture's first 10 s, each record with PCIe bytes and two NVLink links."""
    lines = [HEADER]
    for k, rec in enumerate(RECORDS[:11]):
        lines.append({**rec, "facts": {"pcie_tx_bytes": 1000 * k, "nvlink_state": {"0": 1, "1": 0}}})
    path = tmp_path / "facts.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_the_bundled_capture_holds_no_fact_so_the_replay_serves_none() -> None:
    clock = [0.0]
    r = ReplayReader(CAPTURE, gpus=2, clock=lambda: clock[0])
    assert all(isinstance(v, NotSupported) for v in r.read_facts(0, FACTS).values())
    s = Sampler(r, SamplerOptions(cadence=slowlane.Cadence(energy=0, health=0, pcie=1e-6)))
    for k in range(3):
        clock[0] = float(k)
        s.tick()
        s.slow_tick()
    assert all(g.facts == {} and g.health.pcie is None for g in s.snapshot.gpus)  # absent, not zero
    assert s.snapshot.reader_errors == {}


def test_a_capture_with_facts_is_replayed_and_its_counters_keep_growing_over_loops(tmp_path: Path) -> None:
    clock = [0.0]
    r = ReplayReader(capture_with_facts(tmp_path), clock=lambda: clock[0])
    duration = r.capture.duration
    probes = [pcie.TX, pcie.RX, *NVLINK]
    clock[0] = 3.5
    got = r.read_facts(0, probes)
    assert got["pcie_tx_bytes"] == 3000.0 and got["nvlink_state"] == {0: 1.0, 1: 0.0}
    assert isinstance(got["pcie_rx_bytes"], NotSupported) and isinstance(got["nvlink_tx_bytes"], NotSupported)
    clock[0] = duration + 3.5  # the second loop: a counter adds the capture's increase, a gauge repeats
    again = r.read_facts(0, probes)
    assert again["pcie_tx_bytes"] == 3000.0 + 10_000.0 and again["nvlink_state"] == {0: 1.0, 1: 0.0}


@pytest.mark.parametrize(
    "facts",
    [{"PCIe": 1}, {"pcie_tx_bytes": -1}, {"pcie_tx_bytes": "7"}, {"nvlink_state": {"x": 1}}, ["pcie_tx_bytes"]],
)
def test_a_capture_with_bad_facts_is_refused_naming_its_line(tmp_path: Path, facts: object) -> None:
    lines = [HEADER, RECORDS[0], {**RECORDS[1], "facts": facts}]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(CaptureError, match=r"bad.jsonl:3: bad or missing field facts"):
        load(path)
