"""A stand-in for the ``pynvml`` module, answering from a record of the real H200 capture.

It reuses the real binding's constants, error class and structs, so NvmlReader's translation
code runs exactly as against a driver; only the C calls are replaced.
"""

from __future__ import annotations

import ctypes
import json
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

import pynvml as real

from exporter.readers.fake import H100_MIG, H100_SLICES
from tests.support.paths import CAPTURE

LINES = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
STATIC = LINES[0]["static"]
REC = LINES[25]  # the matmul phase: busy, tensor cores active
RESERVED = 616 << 20  # what driver 580 reserves on an H200: in v1's "used", not in v2's or nvidia-smi's


ULL, UINT = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, real.NVML_VALUE_TYPE_UNSIGNED_INT
FIELDS: dict[int, tuple[int, int]] = {  # field id -> (value type, value) of every GPU; absent: NOT_SUPPORTED
    real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (ULL, 10_000_000),
    real.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (ULL, 20_000_000),
    real.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (ULL, 3),
    real.NVML_FI_DEV_PERF_POLICY_POWER: (ULL, 2_500_000_000),  # ns
    real.NVML_FI_DEV_PERF_POLICY_THERMAL: (ULL, 0),
    real.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: (ULL, 0),
    real.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: (ULL, 0),
    real.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: (ULL, 1_000_000_000),
    real.NVML_FI_DEV_PERF_POLICY_RELIABILITY: (ULL, 0),
}
LINK_FIELDS: dict[int, tuple[int, int]] = {  # per NVLink link (the scope id), times link + 1 for the bytes
    real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (ULL, 1000),  # KiB
    real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (ULL, 2000),
    real.NVML_FI_DEV_NVLINK_GET_STATE: (UINT, real.NVML_NVLINK_STATE_ACTIVE),
    real.NVML_FI_DEV_NVLINK_GET_SPEED: (UINT, 26562),  # MB/s, an H100's NVLink4 link
    real.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: (ULL, 0),
    real.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: (ULL, 0),
    real.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: (ULL, 0),
}


BYTE_FIELDS = {real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX}

GI_PROFILES = {  # NVML's GPU instance profile ids -> the H100 80GB's profiles (others: NOT_SUPPORTED)
    real.NVML_GPU_INSTANCE_PROFILE_1_SLICE: "1g.10gb",
    real.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.20gb",
    real.NVML_GPU_INSTANCE_PROFILE_2_SLICE: "2g.20gb",
    real.NVML_GPU_INSTANCE_PROFILE_3_SLICE: "3g.40gb",
    real.NVML_GPU_INSTANCE_PROFILE_4_SLICE: "4g.40gb",
    real.NVML_GPU_INSTANCE_PROFILE_7_SLICE: "7g.80gb",
}


class MigHandle(NamedTuple):
    """The handle of MIG device ``k`` of GPU ``gpu`` (GPU instance k + 1, compute instance 0)."""

    gpu: int
    k: int


class FakeNvml:
    def __init__(self, gpus: int = 2, nvlinks: int = 0, mig: dict[int, tuple[str, ...]] | None = None) -> None:
        for name in dir(real):
            if name.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason")) or name in (
                "NVMLError",
                "c_nvmlGpmMetricsGet_t",
                "nvmlMemory_v2",
            ):
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.nvlinks = nvlinks  # 0: NVLink NotSupported, as on the capture's PCIe-attached H200
        self.fields = dict(FIELDS)
        self.link_fields = dict(LINK_FIELDS)
        self.field_gets = 0
        self.asked: list[tuple[int, int]] = []  # the (field id, scope) pairs of the last field-values call
        self.fail: dict[str, int] = {}  # function name -> NVML error code to raise
        self.init_error: int | None = None
        self.events: list[tuple[int, int]] = []  # (device index, xid)
        self.gpm_gets = 0
        self.mig = dict(mig or {})  # GPU index -> its MIG instances' profiles (MIG mode on); absent: off
        self.mig_gpm_gets: list[tuple[int, int]] = []  # (GPU, GPU instance id) of each nvmlGpmMigSampleGet

    def _check(self, fn: str) -> None:
        code = self.fail.get(fn)
        if code is not None:
            raise real.NVMLError(code)

    def _mig(self, h: MigHandle) -> str:
        layout = self.mig.get(h.gpu, ())
        if h.k >= len(layout):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)  # the instance has gone
        return layout[h.k]

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

    def nvmlDeviceGetUUID(self, h: Any) -> bytes:
        if isinstance(h, MigHandle):
            self._mig(h)
            return f"MIG-{h.gpu:08x}-{h.k:04x}-4000-8000-000000000000".encode()
        return f"{STATIC['uuid'][:-1]}{self._h(h)}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(STATIC["name"])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:0{self._h(h)}:00.0".encode(), busIdLegacy=b"")

    # --- readings -----------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._check("nvmlDeviceGetUtilizationRates")
        if h in self.mig:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)  # no utilisation under MIG
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

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        """v2 (``version``) leaves the driver's reserved memory out of ``used``; v1 counts it in,
        as a real driver 580 does (RESERVED)."""
        if version is not None:
            self._check("nvmlDeviceGetMemoryInfo_v2")
        reserved = 0 if version is not None else RESERVED
        if isinstance(h, MigHandle):
            return SimpleNamespace(used=((h.k + 1) << 30) + reserved, total=H100_MIG[self._mig(h)][2] << 20)
        return SimpleNamespace(used=REC["mem_used_bytes"] + reserved, total=STATIC["memory_total_bytes"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(REC["temp_C"])

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return int(REC["sm_clock_MHz"] if clock == real.NVML_CLOCK_SM else REC["mem_clock_MHz"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(REC["clock_event_reasons"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses")
        if isinstance(h, MigHandle):  # one process per instance: pid 1000 + k, k + 1 GiB
            self._mig(h)
            return [SimpleNamespace(pid=1000 + h.k, usedGpuMemory=(h.k + 1) << 30)]
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

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int | tuple[int, int]]) -> Any:
        """As the binding: an array of c_nvmlFieldValue_t, one return code per field."""
        self._check("nvmlDeviceGetFieldValues")
        self._h(h)
        self.field_gets += 1
        self.asked = [x if isinstance(x, tuple) else (x, 0) for x in ids]
        out = (real.c_nvmlFieldValue_t * len(ids))()
        for v, asked in zip(out, ids, strict=True):
            fid, scope = asked if isinstance(asked, tuple) else (asked, 0)
            v.fieldId, v.scopeId = fid, scope
            got = self._field(fid, scope)
            v.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED if got is None else real.NVML_SUCCESS
            if got is not None:
                v.valueType = got[0]
                if got[0] == UINT:
                    v.value.uiVal = got[1]
                else:
                    v.value.ullVal = got[1]
        return out

    def _field(self, fid: int, scope: int) -> tuple[int, int] | None:
        if fid == real.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return (UINT, self.nvlinks) if self.nvlinks else None
        if fid in self.link_fields:
            kind, value = self.link_fields[fid]
            scaled = value * (scope + 1) if fid in BYTE_FIELDS else value
            return (kind, scaled) if scope < self.nvlinks else None
        return self.fields.get(fid)

    # --- MIG ----------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        self._check("nvmlDeviceGetMigMode")
        on = int(self._h(h) in self.mig)
        return [on, on]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, profile: int) -> Any:
        self._h(h)
        name = GI_PROFILES.get(profile)
        if name is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        slices, sms, mb, _ = H100_MIG[name]
        return SimpleNamespace(sliceCount=slices, multiprocessorCount=sms, memorySizeMB=mb)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        self._h(h)
        return H100_SLICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, k: int) -> MigHandle:
        if k >= len(self.mig.get(self._h(h), ())):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return MigHandle(h, k)

    def nvmlDeviceGetAttributes(self, h: MigHandle) -> Any:
        slices, sms, mb, _ = H100_MIG[self._mig(h)]
        return SimpleNamespace(
            multiprocessorCount=sms, gpuInstanceSliceCount=slices, computeInstanceSliceCount=slices, memorySizeMB=mb
        )

    def nvmlDeviceGetGpuInstanceId(self, h: MigHandle) -> int:
        self._mig(h)
        return h.k + 1

    def nvmlDeviceGetComputeInstanceId(self, h: MigHandle) -> int:
        self._mig(h)
        return 0

    def nvmlGpmMigSampleGet(self, h: int, gpu_instance: int, sample: object) -> object:
        self._check("nvmlGpmMigSampleGet")
        self.mig_gpm_gets.append((self._h(h), gpu_instance))
        return sample

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
            real.NVML_GPM_METRIC_GRAPHICS_UTIL: REC["util_gpu_pct"],  # the capture has no GPM graphics: NVML's util
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


class CountingNvml:
    """A FakeNvml whose NVML function calls are counted by name (constants pass through)."""

    def __init__(self, inner: FakeNvml) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not (name.startswith("nvml") and callable(value)) or name in ("nvmlInit", "nvmlShutdown"):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted
