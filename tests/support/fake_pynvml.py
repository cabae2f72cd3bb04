"""A stand-in for the ``pynvml`` module, answering from a record of the real H200 capture.

It reuses the real binding's constants, error class and structs, so NvmlReader's translation
code runs exactly as against a driver; only the C calls are replaced.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml as real

from tests.support.paths import CAPTURE

LINES = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
STATIC = LINES[0]["static"]
REC = LINES[25]  # the matmul phase: busy, tensor cores active


class FakeNvml:
    def __init__(self, gpus: int = 2) -> None:
        for name in dir(real):
            if name.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason")) or name in (
                "NVMLError",
                "c_nvmlGpmMetricsGet_t",
            ):
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.fail: dict[str, int] = {}  # function name -> NVML error code to raise
        self.init_error: int | None = None
        self.events: list[tuple[int, int]] = []  # (device index, xid)
        self.gpm_gets = 0

    def _check(self, fn: str) -> None:
        code = self.fail.get(fn)
        if code is not None:
            raise real.NVMLError(code)

    def _h(self, handle: Any) -> int:
        idx: int = handle
        if not 0 <= idx < self.gpus:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return idx

    def __getattr__(self, fn: str) -> Callable[..., Any]:
        raise AttributeError(fn)

    # --- system -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(STATIC["driver"])

    def nvmlSystemGetNVMLVersion(self) -> bytes:
        return str(STATIC["nvml"]).encode()

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex")
        return self._h(i)

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"{STATIC['uuid'][:-1]}{self._h(h)}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(STATIC["name"])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:0{self._h(h)}:00.0".encode(), busIdLegacy=b"")

    # --- readings -----------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._check("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=REC["util_gpu_pct"], memory=REC["util_mem_pct"])

    def nvmlDeviceGetSamples(self, h: int, kind: int, since: int) -> tuple[int, list[Any]]:
        self._check("nvmlDeviceGetSamples")
        fresh = [(ts, v) for ts, v in REC["util_samples"] if ts > since]
        if not fresh:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return 1, [SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=v)) for ts, v in fresh]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check("nvmlDeviceGetPowerUsage")
        return int(REC["power_mW"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(STATIC["power_limit_mW"])

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption")
        return int(REC["energy_mJ"])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=REC["mem_used_bytes"], total=STATIC["memory_total_bytes"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(REC["temp_C"])

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return int(REC["sm_clock_MHz"] if clock == real.NVML_CLOCK_SM else REC["mem_clock_MHz"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(REC["clock_event_reasons"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses")
        procs = [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in REC["procs"]]
        return [
            *procs,
            SimpleNamespace(pid=99, usedGpuMemory=None),
        ]  # memory hidden (no permission)

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[Any]:
        self._check("nvmlDeviceGetProcessUtilization")
        if isinstance(REC["proc_util"], str):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return [
            SimpleNamespace(pid=p, smUtil=sm, memUtil=mem, timeStamp=ts, encUtil=0, decUtil=0)
            for p, sm, mem, ts in REC["proc_util"] * 2
        ]  # two samples per process

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors")
        return 5 if kind == real.NVML_MEMORY_ERROR_TYPE_CORRECTED else int(REC["ecc_uncorrected_volatile"])

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        self._check("nvmlDeviceGetRemappedRows")
        return (1, 0, 1, 0)

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return 1000 if counter == real.NVML_PCIE_UTIL_TX_BYTES else 2000  # KB/s

    # --- GPM ----------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        self._check("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return ctypes.pointer(real.struct_c_nvmlGpmSample_t())

    def nvmlGpmSampleFree(self, s: object) -> None:
        pass

    def nvmlGpmSampleGet(self, h: int, sample: object) -> object:
        self.gpm_gets += 1
        return sample

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        values = {
            real.NVML_GPM_METRIC_SM_UTIL: REC["gpm"]["sm_util"],
            real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: REC["gpm"]["tensor_util"],
            real.NVML_GPM_METRIC_DRAM_BW_UTIL: REC["gpm"]["dram_bw_util"],
            real.NVML_GPM_METRIC_SM_OCCUPANCY: REC["gpm"]["sm_occupancy"],
        }
        a, b = ctypes.addressof(req.sample1.contents), ctypes.addressof(req.sample2.contents)
        assert a != b, "GPM needs two distinct samples"
        for k in range(req.numMetrics):
            req.metrics[k].value = values[req.metrics[k].metricId]
        return req

    # --- events -------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlEventSetFree(self, s: str) -> None:
        pass

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, s: str) -> None:
        self._check("nvmlDeviceRegisterEvents")
        if self._h(h) == 1:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> Any:
        if not self.events:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        idx, xid = self.events.pop(0)
        return SimpleNamespace(device=idx, eventType=real.nvmlEventTypeXidCriticalError, eventData=xid)
