"""NvmlReader: real GPUs through NVML (the ``nvidia-ml-py`` binding, module ``pynvml``).

NVML is thread-safe; the sampler, the slow lane and the XID watcher call it from their own
threads. Every NVML error is translated into the reader errors of ``base``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from exporter.readers.base import (
    Clocks,
    DeviceInfo,
    DriverInfo,
    EccErrors,
    GpmActivity,
    Memory,
    MigLayout,
    NotSupported,
    PcieThroughput,
    Process,
    ProcessUtil,
    ReaderError,
    ReaderUnavailable,
    Readout,
    RemappedRows,
    Utilization,
    UtilSample,
    XidEvent,
)
from exporter.readers.nvml_errors import translate
from exporter.readers.nvml_fields import FieldReads
from exporter.readers.nvml_mig import MigReads, gpm_between, memory_info, process_memory, text
from exporter.readers.probes import Call, Probe

T = TypeVar("T")

_NVML: Any = None


def _nvml() -> Any:
    """Import pynvml lazily so a missing package reads as 'no NVML', not an import crash."""
    global _NVML
    if _NVML is None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - it is a dependency
            raise ReaderUnavailable("pynvml is not installed", library_missing=True) from e
        _NVML = pynvml
    return _NVML


class NvmlReader:
    kind = "nvml"
    time_scale = 1.0

    def __init__(self, nvml: Any = None) -> None:
        self._n = nvml  # injectable for tests; the real module otherwise
        self._handles: list[Any] = []
        self._gpm_samples: dict[int, tuple[Any, Any, bool]] = {}
        self._fields = FieldReads()
        self._mig = MigReads()
        self._events: Any = None
        self._events_uuids: set[str] = set()
        self._events_lock = threading.Lock()  # close() must not free the set under a waiter

    @property
    def n(self) -> Any:
        if self._n is None:
            self._n = _nvml()
        return self._n

    # --- lifecycle ----------------------------------------------------------------------

    def open(self) -> DriverInfo:
        n = self.n
        try:
            n.nvmlInit()
        except n.NVMLError as e:
            raise self._translate(e, "open", None) from e
        self._handles = []
        self._gpm_samples = {}
        self._fields = FieldReads()
        self._mig.close(n)
        driver = self._call("open", None, n.nvmlSystemGetDriverVersion)
        try:
            version = text(n.nvmlSystemGetNVMLVersion())
        except n.NVMLError:
            version = ""
        count = self._call("devices", None, n.nvmlDeviceGetCount)
        for i in range(count):
            self._handles.append(self._call("devices", i, n.nvmlDeviceGetHandleByIndex, i))
        return DriverInfo(driver_version=text(driver), nvml_version=version)

    def close(self) -> None:
        n = self.n
        for s1, s2, _ in self._gpm_samples.values():
            for s in (s1, s2):
                with contextlib.suppress(n.NVMLError):
                    n.nvmlGpmSampleFree(s)
        self._gpm_samples = {}
        self._mig.close(n)
        with self._events_lock:
            if self._events is not None:
                with contextlib.suppress(n.NVMLError):
                    n.nvmlEventSetFree(self._events)
                self._events = None
                self._events_uuids = set()
        with contextlib.suppress(n.NVMLError):
            n.nvmlShutdown()

    def now(self) -> float:
        return time.monotonic()

    def devices(self) -> list[DeviceInfo]:
        return [self._info(i, "devices") for i in range(len(self._handles))]

    def device(self, index: int) -> DeviceInfo:
        n = self.n
        self._handles[index] = self._call("device", index, n.nvmlDeviceGetHandleByIndex, index)
        self._gpm_samples.pop(index, None)
        self._fields.forget(index)
        self._mig.forget(n, index)
        return self._info(index, "device")

    # --- fast readings ------------------------------------------------------------------

    def utilization(self, index: int) -> Utilization:
        u = self._dev("utilization", index, self.n.nvmlDeviceGetUtilizationRates)
        return Utilization(gpu=u.gpu / 100.0, memory=u.memory / 100.0)

    def utilization_samples(self, index: int, since_us: int) -> list[UtilSample]:
        n = self.n
        try:
            _, samples = self._dev(
                "utilization_samples",
                index,
                n.nvmlDeviceGetSamples,
                n.NVML_GPU_UTILIZATION_SAMPLES,
                since_us,
            )
        except ReaderError as e:
            if isinstance(e.__cause__, n.NVMLError) and e.__cause__.value == n.NVML_ERROR_NOT_FOUND:
                return []  # no sample newer than since_us yet
            raise
        return [(int(s.timeStamp), s.sampleValue.uiVal / 100.0) for s in samples if s.timeStamp > since_us]

    def power_watts(self, index: int) -> float:
        return float(self._dev("power_watts", index, self.n.nvmlDeviceGetPowerUsage)) / 1000.0

    def memory(self, index: int) -> Memory:
        return self._dev("memory", index, lambda handle: memory_info(self.n, handle))

    def temperature_celsius(self, index: int) -> float:
        n = self.n
        return float(self._dev("temperature_celsius", index, n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU))

    def clocks(self, index: int) -> Clocks:
        n = self.n
        sm = self._dev("clocks", index, n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM)
        mem = self._dev("clocks", index, n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM)
        return Clocks(sm_hertz=sm * 1e6, memory_hertz=mem * 1e6)

    def clock_event_reasons(self, index: int) -> int:
        n = self.n
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(self._dev("clock_event_reasons", index, fn))

    def processes(self, index: int) -> list[Process]:
        procs = self._dev("processes", index, self.n.nvmlDeviceGetComputeRunningProcesses)
        return [Process(pid=int(p.pid), used_memory_bytes=process_memory(p.usedGpuMemory)) for p in procs]

    def process_utilization(self, index: int) -> list[ProcessUtil]:
        n = self.n
        since = int((time.time() - 5.0) * 1e6)  # NVML's buffer: the last few seconds
        try:
            samples = self._dev("process_utilization", index, n.nvmlDeviceGetProcessUtilization, since)
        except ReaderError as e:
            if isinstance(e.__cause__, n.NVMLError) and e.__cause__.value == n.NVML_ERROR_NOT_FOUND:
                return []  # no process ran in the window
            raise
        by_pid: dict[int, list[tuple[float, float]]] = {}
        for s in samples:
            by_pid.setdefault(int(s.pid), []).append((s.smUtil / 100.0, s.memUtil / 100.0))
        return [
            ProcessUtil(pid, sum(v[0] for v in vals) / len(vals), sum(v[1] for v in vals) / len(vals))
            for pid, vals in by_pid.items()
        ]

    def gpm(self, index: int) -> GpmActivity | None:
        n = self.n
        entry = self._gpm_samples.get(index)
        if entry is None:
            support = self._dev("gpm", index, n.nvmlGpmQueryDeviceSupport)
            if not support.isSupportedDevice:
                raise NotSupported("GPM not supported on this device", call="gpm", gpu=index)
            entry = (
                self._call("gpm", index, n.nvmlGpmSampleAlloc),
                self._call("gpm", index, n.nvmlGpmSampleAlloc),
                False,
            )
        prev, cur, primed = entry
        self._dev("gpm", index, n.nvmlGpmSampleGet, cur)
        self._gpm_samples[index] = (cur, prev, True)
        if not primed:
            return None
        return self._call("gpm", index, gpm_between, n, prev, cur)

    # --- slow readings ------------------------------------------------------------------

    def power_limit_watts(self, index: int) -> float:
        return float(self._dev("power_limit_watts", index, self.n.nvmlDeviceGetEnforcedPowerLimit)) / 1000.0

    def energy_joules(self, index: int) -> float:
        return float(self._dev("energy_joules", index, self.n.nvmlDeviceGetTotalEnergyConsumption)) / 1000.0

    def ecc_errors(self, index: int) -> EccErrors:
        n = self.n
        corr = self._dev(
            "ecc_errors",
            index,
            n.nvmlDeviceGetTotalEccErrors,
            n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            n.NVML_VOLATILE_ECC,
        )
        unc = self._dev(
            "ecc_errors",
            index,
            n.nvmlDeviceGetTotalEccErrors,
            n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            n.NVML_VOLATILE_ECC,
        )
        return EccErrors(corrected=int(corr), uncorrected=int(unc))

    def remapped_rows(self, index: int) -> RemappedRows:
        corr, unc, pending, failed = self._dev("remapped_rows", index, self.n.nvmlDeviceGetRemappedRows)
        return RemappedRows(
            correctable=int(corr),
            uncorrectable=int(unc),
            pending=bool(pending),
            failed=bool(failed),
        )

    def pcie_throughput(self, index: int) -> PcieThroughput:
        n = self.n
        tx = self._dev("pcie_throughput", index, n.nvmlDeviceGetPcieThroughput, n.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._dev("pcie_throughput", index, n.nvmlDeviceGetPcieThroughput, n.NVML_PCIE_UTIL_RX_BYTES)
        return PcieThroughput(tx_bytes_per_second=tx * 1024.0, rx_bytes_per_second=rx * 1024.0)

    def mig_instances(self, index: int) -> MigLayout | None:
        if not 0 <= index < len(self._handles):
            raise ReaderError(f"no GPU with index {index}", call="mig_instances", gpu=index)
        return self._mig.read(self.n, self._handles[index], index)

    def read_facts(self, index: int, probes: Sequence[Probe]) -> Readout:
        if not 0 <= index < len(self._handles):
            return {p.name: ReaderError(f"no GPU with index {index}", call=p.name, gpu=index) for p in probes}
        n, handle = self.n, self._handles[index]
        out: Readout = {
            p.name: self._fields.call(n, handle, index, p, p.nvml) for p in probes if isinstance(p.nvml, Call)
        }
        fields = [p for p in probes if not isinstance(p.nvml, Call)]
        if fields:
            out.update(self._fields.read(n, handle, index, fields))
        return out

    def wait_xid(self, timeout_seconds: float) -> list[XidEvent]:
        n = self.n
        with self._events_lock:
            if self._events is None:
                self._register_events()
            try:
                data = n.nvmlEventSetWait_v2(self._events, max(1, int(timeout_seconds * 1000)))
            except n.NVMLError as e:
                if e.value == n.NVML_ERROR_TIMEOUT:
                    return []
                raise self._translate(e, "wait_xid", None) from e
        if not data.eventType & n.nvmlEventTypeXidCriticalError:
            return []
        try:
            uuid = text(n.nvmlDeviceGetUUID(data.device))
        except n.NVMLError:
            uuid = ""
        return [XidEvent(uuid=uuid, xid=int(data.eventData))]

    def _register_events(self) -> None:
        """Create the event set and register every GPU that can report XIDs (caller holds
        the events lock). On failure nothing is kept, so the next call starts over."""
        n = self.n
        events = self._call("wait_xid", None, n.nvmlEventSetCreate)
        uuids: set[str] = set()
        try:
            for i, h in enumerate(self._handles):
                try:
                    n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, events)
                    uuids.add(text(n.nvmlDeviceGetUUID(h)))
                except n.NVMLError as e:
                    if e.value not in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_NO_PERMISSION):
                        raise self._translate(e, "wait_xid", i) from e
            if not uuids:
                raise NotSupported("no GPU supports XID events", call="wait_xid")
        except ReaderError:
            with contextlib.suppress(n.NVMLError):
                n.nvmlEventSetFree(events)
            raise
        self._events, self._events_uuids = events, uuids

    # --- helpers ------------------------------------------------------------------------

    def _info(self, index: int, call: str) -> DeviceInfo:
        n = self.n
        h = self._handles[index]
        uuid = text(self._call(call, index, n.nvmlDeviceGetUUID, h))
        name = text(self._call(call, index, n.nvmlDeviceGetName, h))
        pci = self._call(call, index, n.nvmlDeviceGetPciInfo, h)
        bus = text(getattr(pci, "busIdLegacy", b"") or pci.busId)
        return DeviceInfo(index=index, uuid=uuid, model=name, pci_bus_id=bus)

    def _dev(self, call: str, index: int, fn: Callable[..., T], *args: Any) -> T:
        if not 0 <= index < len(self._handles):
            raise ReaderError(f"no GPU with index {index}", call=call, gpu=index)
        return self._call(call, index, fn, self._handles[index], *args)

    def _call(self, call: str, index: int | None, fn: Callable[..., T], *args: Any) -> T:
        n = self.n
        try:
            return fn(*args)
        except n.NVMLError as e:
            raise self._translate(e, call, index) from e

    def _translate(self, e: Any, call: str, index: int | None) -> ReaderError:
        return translate(self.n, getattr(e, "value", None), str(e), call, index)
