"""The reader interface: what the sampler needs from a source of GPU readings.

Every method is one *call* (its name is the ``call`` label of
``gpuledger_reader_errors_total``) and returns SI units: watts, joules, bytes,
hertz, ratios in 0..1. A reader raises one of the errors below and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from exporter.readers.probes import FactValue, Probe

# --- errors -------------------------------------------------------------------------------


class ReaderError(Exception):
    """A call failed. ``call`` names the reader method, ``gpu`` the device index if any."""

    def __init__(self, message: str, *, call: str = "", gpu: int | None = None) -> None:
        super().__init__(message)
        self.call = call
        self.gpu = gpu

    def __str__(self) -> str:
        where = f"gpu {self.gpu} " if self.gpu is not None else ""
        what = f"{self.call}: " if self.call else ""
        return f"{where}{what}{self.args[0]}"

    def renamed(self, call: str) -> ReaderError:
        """The same failure told for another call (a batch's failure, per fact it was to read)."""
        return type(self)(str(self.args[0]), call=call, gpu=self.gpu)


class NotSupported(ReaderError):
    """The device or driver cannot answer this call; the sampler stops asking."""


class GpuLost(ReaderError):
    """The GPU fell off the bus or needs a reset; its ``up`` goes to 0."""


class ReaderUnavailable(ReaderError):
    """The whole source is gone (no driver, driver unloaded). ``library_missing`` is True when
    the NVIDIA library is not installed at all, as on a machine with no NVIDIA GPU."""

    def __init__(self, message: str, *, call: str = "", gpu: int | None = None, library_missing: bool = False) -> None:
        super().__init__(message, call=call, gpu=gpu)
        self.library_missing = library_missing

    def renamed(self, call: str) -> ReaderError:
        return ReaderUnavailable(str(self.args[0]), call=call, gpu=self.gpu, library_missing=self.library_missing)


def fatal(e: ReaderError) -> bool:
    """An error that ends the round for its GPU (``GpuLost``) or for the reader (``ReaderUnavailable``)."""
    return isinstance(e, GpuLost | ReaderUnavailable)


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriverInfo:
    driver_version: str
    nvml_version: str


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu: float  # share of the last NVML sample period with a kernel running, 0..1
    memory: float  # share of it with device memory being read or written, 0..1


@dataclass(frozen=True, slots=True)
class Memory:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class Clocks:
    sm_hertz: float
    memory_hertz: float


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class ProcessUtil:
    """A process' share of the GPU over the sampling window NVML reports (0..1)."""

    pid: int
    sm: float
    memory: float


@dataclass(frozen=True, slots=True)
class GpmActivity:
    """Hopper GPM activity over the interval since the previous ``gpm`` call, 0..1."""

    sm: float
    tensor: float
    dram: float
    sm_occupancy: float
    # the share of time the graphics/compute engine had work resident (GPM GRAPHICS_UTIL, DCGM's
    # GR_ENGINE_ACTIVE): utilisation's counterpart, the one "busy" NVML gives a MIG instance; None: unread
    graphics: float | None = None


@dataclass(frozen=True, slots=True)
class EccErrors:
    """Volatile ECC error counts (since the driver loaded); None where not reported."""

    corrected: int | None
    uncorrected: int | None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(frozen=True, slots=True)
class PcieThroughput:
    tx_bytes_per_second: float
    rx_bytes_per_second: float


@dataclass(frozen=True, slots=True)
class XidEvent:
    uuid: str
    xid: int


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (a compute instance inside a GPU instance) as NVML shows it under its own handle."""

    uuid: str  # the MIG device's UUID ("MIG-..."): what CUDA_VISIBLE_DEVICES and the kubelet name
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # its GPU instance's profile, "1g.10gb" (nvidia-smi's name; dcgm-exporter's GPU_I_PROFILE)
    slices: int  # its compute slices (NVML computeInstanceSliceCount; the GPU instance's when it is whole)
    sm_count: int
    memory: Memory | None  # None: unreadable this time
    processes: tuple[Process, ...] | None  # None: unreadable this time
    gpm: GpmActivity | None  # its GPU instance's activity since the previous read; None: first read or none


@dataclass(frozen=True, slots=True)
class MigLayout:
    """A GPU in MIG mode: how many compute slices and SMs the whole GPU has, and its instances."""

    slices: int  # the GPU's compute slices (7 on an A100 or H100): the denominator of every share
    sm_count: int
    instances: tuple[MigInstance, ...]

    def share(self, inst: MigInstance) -> float:
        """The instance's share of the GPU: its compute slices over the GPU's (what a job on it holds)."""
        return inst.slices / self.slices

    def sm_share(self, inst: MigInstance) -> float:
        """Its SMs over the GPU's (information: a 1g slice of an H100 has 16 of 132 SMs, not 1/7)."""
        return inst.sm_count / self.sm_count if self.sm_count else 0.0

    @property
    def unallocated(self) -> float:
        """The share of the GPU's compute slices in no instance (shares + this = 1)."""
        return (self.slices - sum(i.slices for i in self.instances)) / self.slices


def mig_profile(slices: int, memory_mb: int) -> str:
    """A GPU instance profile's name as nvidia-smi and dcgm-exporter write it: compute slices, then the
    memory in GB rounded up (4864 MB -> 1g.5gb on an A100 40GB, 9856 MB -> 1g.10gb on an H100)."""
    return f"{slices}g.{-(-memory_mb // 1024)}gb"


UtilSample = tuple[int, float]
"""One entry of the utilisation samples buffer: (timestamp in µs, share busy 0..1)."""

Readout = dict[str, FactValue | ReaderError]
"""``Reader.read_facts``' answer: by fact name, the value, or the error reading it gave
(``NotSupported``: this GPU has no such fact, and the sampler stops asking)."""


# --- the interface ------------------------------------------------------------------------


@runtime_checkable
class Reader(Protocol):
    """A source of GPU readings. Implementations: NvmlReader, ReplayReader, FakeReader."""

    kind: str
    """Short name shown in ``gpuledger_exporter_info{reader}``: nvml, replay, fake."""

    time_scale: float
    """Reader seconds per wall second (1 except for a replay played faster)."""

    def open(self) -> DriverInfo: ...
    def close(self) -> None: ...
    def now(self) -> float:
        """Seconds on the reader's monotonic clock; counters integrate over its differences."""
        ...

    def devices(self) -> list[DeviceInfo]: ...
    def device(self, index: int) -> DeviceInfo:
        """Look one device up again (used to bring a lost GPU back)."""
        ...

    def utilization(self, index: int) -> Utilization: ...
    def utilization_samples(self, index: int, since_us: int) -> list[UtilSample]:
        """Samples newer than ``since_us`` (0: whatever the buffer holds), oldest first."""
        ...

    def power_watts(self, index: int) -> float: ...
    def power_limit_watts(self, index: int) -> float: ...
    def energy_joules(self, index: int) -> float:
        """A monotonic energy counter (NVML: since the driver loaded)."""
        ...

    def memory(self, index: int) -> Memory: ...
    def temperature_celsius(self, index: int) -> float: ...
    def clocks(self, index: int) -> Clocks: ...
    def clock_event_reasons(self, index: int) -> int: ...
    def processes(self, index: int) -> list[Process]: ...
    def process_utilization(self, index: int) -> list[ProcessUtil]:
        """Per-process SM and memory activity over NVML's recent window; [] when no process
        ran in it."""
        ...

    def gpm(self, index: int) -> GpmActivity | None:
        """Activity since the previous call; None on the first call."""
        ...

    def ecc_errors(self, index: int) -> EccErrors: ...
    def remapped_rows(self, index: int) -> RemappedRows: ...
    def pcie_throughput(self, index: int) -> PcieThroughput: ...
    def wait_xid(self, timeout_seconds: float) -> list[XidEvent]:
        """Block up to ``timeout_seconds`` for XID events; NotSupported if none can be watched."""
        ...

    def mig_instances(self, index: int) -> MigLayout | None:
        """The GPU's MIG instances, each with its memory, processes and GPM activity (utilisation is
        NotSupported under MIG); None while MIG mode is off; NotSupported where the GPU has no MIG."""
        ...

    def read_facts(self, index: int, probes: Sequence[Probe]) -> Readout:
        """Read facts of the table (``exporter.facts``) in as few calls as the source allows (NVML:
        every field value in one ``nvmlDeviceGetFieldValues``). Each fact's value or error; raises
        only ``GpuLost`` and ``ReaderUnavailable``, which end the round for the GPU or the reader."""
        ...


NO_NVML = frozenset({"replay"})
"""Readers whose readings do not come from NVML: no ``gpuledger_nvml_up``, and no "NVML" on
their page, health or logs (``gpuledger_exporter_info{reader}`` names them). The fake reader
stands in for NVML in tests and reports as NVML would."""


def source_name(kind: str) -> str:
    """What a reader's readings come from, for a log line or a page: "NVML", "the replay reader"."""
    return f"the {kind} reader" if kind in NO_NVML else "NVML"


CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML clock-event (throttle) reason bits and the label value each gets."""
