"""FakeReader: a programmable reader for unit tests and benchmarks.

Its clock only moves when ``advance()`` is called, so tests drive the sampler tick by tick.
``latencies`` makes each call take that long (a busy-wait under 1 ms, a sleep above: the
short NVML calls burn CPU in the driver, the long ones mostly wait). ``fail()`` makes chosen
calls raise; ``lose()`` makes a GPU fall off the bus. ``mig={0: ("3g.40gb", "2g.20gb", "2g.20gb")}``
(or ``set_mig()``) puts a GPU in MIG mode with instances of the H100 80GB's profiles (``H100_MIG``):
then, as NVML does, utilisation is NotSupported on it and each instance has its own memory,
processes and GPM activity.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.readers.base import (
    Clocks,
    DeviceInfo,
    DriverInfo,
    EccErrors,
    GpmActivity,
    GpuLost,
    Memory,
    MigInstance,
    MigLayout,
    NotSupported,
    PcieThroughput,
    Process,
    ProcessUtil,
    ReaderError,
    Readout,
    RemappedRows,
    Utilization,
    UtilSample,
    XidEvent,
    fatal,
)
from exporter.readers.mig_profiles import H100_MIG, MEMORY_SLICES, SLICES, SMS
from exporter.readers.probes import Const, FactValue, Grows, Probe

H200_LATENCIES: dict[str, float] = {
    # Seconds per call as measured on an H200 (driver 580), except gpm, ecc_errors and
    # remapped_rows, which were not measured there and are set to the cost of similar calls.
    "utilization": 3e-6,
    "power_watts": 3e-6,
    "temperature_celsius": 3e-6,
    "clocks": 6e-6,  # two clock reads
    "clock_event_reasons": 3e-6,
    "memory": 13e-6,
    "processes": 13e-6,
    "process_utilization": 30e-6,
    "energy_joules": 4.1e-3,
    "utilization_samples": 2.8e-3,
    "gpm": 40e-6,
    "power_limit_watts": 3e-6,
    "ecc_errors": 6e-6,
    "remapped_rows": 13e-6,
    "pcie_throughput": 42e-3,  # two directions, ~21 ms each
    # one nvmlDeviceGetFieldValues of the fact table, not measured alone: the batch with the energy
    # counter took 4.8 ms and the energy counter alone 4.1 ms
    "read_facts": 0.7e-3,
}

SAMPLE_PERIOD_US = 200_000  # the H200 buffer holds about five samples a second

# The H100 80GB's GPU instance profiles (NVIDIA's MIG user guide; ``mig_profiles.H100_MIG``): compute
# slices, SMs, memory MB, memory slices of the GPU's 8. The whole GPU: 7 compute slices, 132 SMs.
H100_SLICES, H100_SMS, H100_MEMORY_SLICES = SLICES, SMS, MEMORY_SLICES
MIG_UNSUPPORTED = frozenset({"utilization", "utilization_samples", "process_utilization"})
"""Calls NVML answers NotSupported on a GPU in MIG mode."""


@dataclass
class FakeMig:
    """One MIG instance of a fake GPU (a whole GPU instance: one compute instance, id 0)."""

    profile: str
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int = 0
    memory_used_bytes: int = 0
    processes: list[Process] = field(default_factory=list)
    gpm: GpmActivity | None = field(default_factory=lambda: GpmActivity(0.0, 0.0, 0.0, 0.0))  # None: no GPM
    _gpm_started: bool = False

    def reading(self) -> MigInstance:
        slices, sms, mb, _ = H100_MIG[self.profile]
        gpm = self.gpm if self._gpm_started else None  # GPM's first read only starts its interval
        self._gpm_started = self.gpm is not None
        memory = Memory(used_bytes=self.memory_used_bytes, total_bytes=mb << 20)
        ids = (self.gpu_instance_id, self.compute_instance_id)
        return MigInstance(self.uuid, *ids, self.profile, slices, sms, memory, tuple(self.processes), gpm)


def fake_mig(gpu: int, profiles: Sequence[str], first: int = 0) -> list[FakeMig]:
    """Instances of these profiles on GPU ``gpu`` (UUIDs numbered from ``first``); refuses a layout the
    H100 cannot hold (more than its 7 compute or 8 memory slices; NVIDIA's placement rules are finer,
    but no test needs them)."""
    unknown = [p for p in profiles if p not in H100_MIG]
    if unknown:
        raise ValueError(f"no H100 MIG profile {unknown}; known: {sorted(H100_MIG)}")
    if (
        sum(H100_MIG[p][0] for p in profiles) > H100_SLICES
        or sum(H100_MIG[p][3] for p in profiles) > H100_MEMORY_SLICES
    ):
        raise ValueError(f"MIG layout {profiles} does not fit an H100 (7 compute, 8 memory slices)")
    return [FakeMig(p, f"MIG-{gpu:08x}-{first + k:04x}-0000-0000-000000000000", k + 1) for k, p in enumerate(profiles)]


@dataclass
class FakeGpu:
    uuid: str
    model: str = "NVIDIA Fake H200"
    pci_bus_id: str = "00000000:00:00.0"
    util: float = 0.0
    memory_util: float = 0.0
    power_watts: float = 100.0
    power_limit_watts: float = 700.0
    energy_joules: float = 1_000.0
    memory_used_bytes: int = 0
    memory_total_bytes: int = 150_754_820_096
    temperature_celsius: float = 35.0
    sm_hertz: float = 1.98e9
    memory_hertz: float = 3.2e9
    clock_event_reasons: int = 0
    processes: list[Process] = field(default_factory=list)
    process_util: list[ProcessUtil] = field(default_factory=list)
    gpm: GpmActivity | None = None  # None: GPM not supported
    ecc: EccErrors = field(default_factory=lambda: EccErrors(0, 0))
    remapped: RemappedRows = field(default_factory=lambda: RemappedRows(0, 0, False, False))
    pcie: PcieThroughput = field(default_factory=lambda: PcieThroughput(1e6, 2e6))
    nvlinks: int = 0  # NVLink links; 0: none (NVLink facts NotSupported, as on a PCIe-attached H200)
    facts: dict[str, FactValue | Const | Grows] = field(default_factory=dict)
    """A fact's answer (by fact name) instead of its row's ``fake``; ``unsupported``: NotSupported."""
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    mig: list[FakeMig] | None = None  # MIG mode on, with these instances; None: off
    samples: list[UtilSample] = field(default_factory=list)
    _gpm_started: bool = False


def fake_gpus(n: int) -> list[FakeGpu]:
    return [
        FakeGpu(uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", pci_bus_id=f"00000000:{i + 1:02X}:00.0") for i in range(n)
    ]


class FakeReader:
    kind = "fake"
    time_scale = 1.0

    def __init__(
        self,
        gpus: list[FakeGpu] | int = 1,
        *,
        latencies: Mapping[str, float] | None = None,
        open_error: ReaderError | None = None,
        start: float = 1_000.0,
        mig: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        self.gpus = fake_gpus(gpus) if isinstance(gpus, int) else gpus
        self._migs = 0  # MIG instances made so far (each gets a UUID of its own)
        for index, profiles in (mig or {}).items():
            self.set_mig(index, profiles)
        self.latencies = dict(latencies or {})
        self.open_error = open_error
        self.clock = start
        self._start = start
        self.calls: dict[str, int] = {}
        self.opened = 0
        self._failures: dict[tuple[str, int | None], deque[ReaderError]] = {}
        self._xids: deque[XidEvent] = deque()
        self._xid_ready = threading.Event()
        self._lock = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()
        self._gated: set[str] = set()

    # --- test controls ------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the clock; energy accrues at the current power, samples at the current util."""
        start_us = int(self.clock * 1e6)
        self.clock += seconds
        end_us = int(self.clock * 1e6)
        for g in self.gpus:
            g.energy_joules += g.power_watts * seconds
            ts = (start_us // SAMPLE_PERIOD_US + 1) * SAMPLE_PERIOD_US
            while ts <= end_us and g.mig is None:  # no utilisation under MIG
                g.samples.append((ts, g.util))
                ts += SAMPLE_PERIOD_US
            del g.samples[:-100]

    def fail(self, call: str, gpu: int | None = None, times: int = 1, error: ReaderError | None = None) -> None:
        """Make the next ``times`` calls of ``call`` (on ``gpu``, or any GPU) raise ``error``."""
        exc = error or ReaderError("injected failure", call=call, gpu=gpu)
        self._failures.setdefault((call, gpu), deque()).extend([exc] * times)

    def hang(self, *calls: str) -> None:
        """Make these calls block until ``release()``: a wedged driver."""
        self._gated.update(calls)
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def set_mig(self, index: int, profiles: Sequence[str] | None) -> list[FakeMig] | None:
        """Give GPU ``index`` this MIG layout (new instances, new UUIDs); None: MIG mode off."""
        self.gpus[index].mig = None if profiles is None else fake_mig(index, profiles, self._migs)
        self._migs += len(profiles or ())
        return self.gpus[index].mig

    def lose(self, index: int, lost: bool = True) -> None:
        self.gpus[index].lost = lost

    def emit_xid(self, index: int, xid: int) -> None:
        with self._lock:
            self._xids.append(XidEvent(uuid=self.gpus[index].uuid, xid=xid))
        self._xid_ready.set()

    # --- Reader -------------------------------------------------------------------------

    def open(self) -> DriverInfo:
        self._enter("open", None)
        self.opened += 1
        if self.open_error is not None:
            raise self.open_error
        return DriverInfo(driver_version="580.00.00-fake", nvml_version="13.580.00-fake")

    def close(self) -> None:
        pass

    def now(self) -> float:
        return self.clock

    def devices(self) -> list[DeviceInfo]:
        self._enter("devices", None)
        return [self._info(i) for i in range(len(self.gpus))]

    def device(self, index: int) -> DeviceInfo:
        self._gpu("device", index)
        return self._info(index)

    def utilization(self, index: int) -> Utilization:
        g = self._gpu("utilization", index)
        return Utilization(gpu=g.util, memory=g.memory_util)

    def utilization_samples(self, index: int, since_us: int) -> list[UtilSample]:
        g = self._gpu("utilization_samples", index)
        return [s for s in g.samples if s[0] > since_us]

    def power_watts(self, index: int) -> float:
        return self._gpu("power_watts", index).power_watts

    def power_limit_watts(self, index: int) -> float:
        return self._gpu("power_limit_watts", index).power_limit_watts

    def energy_joules(self, index: int) -> float:
        return self._gpu("energy_joules", index).energy_joules

    def memory(self, index: int) -> Memory:
        g = self._gpu("memory", index)
        return Memory(used_bytes=g.memory_used_bytes, total_bytes=g.memory_total_bytes)

    def temperature_celsius(self, index: int) -> float:
        return self._gpu("temperature_celsius", index).temperature_celsius

    def clocks(self, index: int) -> Clocks:
        g = self._gpu("clocks", index)
        return Clocks(sm_hertz=g.sm_hertz, memory_hertz=g.memory_hertz)

    def clock_event_reasons(self, index: int) -> int:
        return self._gpu("clock_event_reasons", index).clock_event_reasons

    def processes(self, index: int) -> list[Process]:
        g = self._gpu("processes", index)
        return [*g.processes, *(p for m in g.mig or [] for p in m.processes)]  # the parent sees them all

    def process_utilization(self, index: int) -> list[ProcessUtil]:
        return list(self._gpu("process_utilization", index).process_util)

    def gpm(self, index: int) -> GpmActivity | None:
        g = self._gpu("gpm", index)
        if g.gpm is None:
            raise NotSupported("GPM not supported", call="gpm", gpu=index)
        if not g._gpm_started:
            g._gpm_started = True
            return None
        return g.gpm

    def ecc_errors(self, index: int) -> EccErrors:
        return self._gpu("ecc_errors", index).ecc

    def remapped_rows(self, index: int) -> RemappedRows:
        return self._gpu("remapped_rows", index).remapped

    def pcie_throughput(self, index: int) -> PcieThroughput:
        return self._gpu("pcie_throughput", index).pcie

    def mig_instances(self, index: int) -> MigLayout | None:
        g = self._gpu("mig_instances", index)
        if g.mig is None:
            return None
        return MigLayout(H100_SLICES, H100_SMS, tuple(m.reading() for m in g.mig))

    def read_facts(self, index: int, probes: Sequence[Probe]) -> Readout:
        """One call for all (``calls["read_facts"]``, latency ``read_facts``); ``fail(name)`` and
        ``unsupported`` act per fact, ``fail("read_facts")`` on the whole batch."""
        try:
            g = self._gpu("read_facts", index)
        except ReaderError as e:
            if fatal(e):
                raise
            return {p.name: e.renamed(p.name) for p in probes}
        return {p.name: self._fact(index, g, p) for p in probes}

    def wait_xid(self, timeout_seconds: float) -> list[XidEvent]:
        self._enter("wait_xid", None)
        self._xid_ready.wait(timeout_seconds)
        with self._lock:
            events = list(self._xids)
            self._xids.clear()
            self._xid_ready.clear()
        return events

    # --- helpers ------------------------------------------------------------------------

    def _info(self, i: int) -> DeviceInfo:
        g = self.gpus[i]
        return DeviceInfo(index=i, uuid=g.uuid, model=g.model, pci_bus_id=g.pci_bus_id)

    def _enter(self, call: str, index: int | None) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1
        if call in self._gated:
            self._gate.wait()
        delay = self.latencies.get(call, 0.0)
        if delay >= 1e-3:
            time.sleep(delay)
        elif delay > 0:
            end = time.perf_counter() + delay
            while time.perf_counter() < end:
                pass
        for key in ((call, index), (call, None)):
            queue = self._failures.get(key)
            if queue:
                raise queue.popleft()

    def _fact(self, index: int, g: FakeGpu, p: Probe) -> FactValue | ReaderError:
        for key in ((p.name, index), (p.name, None)):
            queue = self._failures.get(key)
            if queue:
                e = queue.popleft()
                if fatal(e):
                    raise e
                return e
        if p.name in g.unsupported or (p.per_link and not g.nvlinks):
            return NotSupported("not supported" if g.nvlinks else "no NVLink", call=p.name, gpu=index)
        spec = g.facts.get(p.name, p.fake)
        if isinstance(spec, Const | Grows):
            v = spec.value if isinstance(spec, Const) else spec.per_second * (self.clock - self._start)
            return dict.fromkeys(range(g.nvlinks), v) if p.per_link else v
        return spec

    def _gpu(self, call: str, index: int) -> FakeGpu:
        self._enter(call, index)
        if not 0 <= index < len(self.gpus):
            raise ReaderError(f"no GPU with index {index}", call=call, gpu=index)
        g = self.gpus[index]
        if g.lost:
            raise GpuLost("GPU is lost", call=call, gpu=index)
        if call in g.unsupported or (g.mig is not None and call in MIG_UNSUPPORTED):
            raise NotSupported("not supported" if g.mig is None else "not supported in MIG mode", call=call, gpu=index)
        return g


__all__ = ["H100_MIG", "H200_LATENCIES", "FakeGpu", "FakeMig", "FakeReader", "fake_gpus", "fake_mig"]
