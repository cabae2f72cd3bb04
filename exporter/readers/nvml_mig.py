"""NvmlReader's MIG side: a GPU's MIG instances through their own NVML handles.

NVML's documented calls: ``nvmlDeviceGetMigMode`` (current, pending), ``nvmlDeviceGetMaxMigDeviceCount``
and ``nvmlDeviceGetMigDeviceHandleByIndex`` (an empty index: NOT_FOUND), on each MIG handle
``nvmlDeviceGetUUID``, ``nvmlDeviceGetGpuInstanceId``, ``nvmlDeviceGetComputeInstanceId``,
``nvmlDeviceGetAttributes`` (SMs, GPU and compute instance slices, memory MB),
``nvmlDeviceGetMemoryInfo`` and ``nvmlDeviceGetComputeRunningProcesses``; the GPU's own slices and
SMs are those of its largest GPU instance profile (``nvmlDeviceGetGpuInstanceProfileInfo``), and a GPU
instance's activity is ``nvmlGpmMigSampleGet`` (utilisation is NotSupported under MIG).

The layout (mode, handles, attributes) is read again at most every ``RECHECK`` seconds: asking the
mode took ~220 µs on an H200, and instances change only while no process uses them; a call on an
instance that has gone makes the next read find the layout afresh. None of this has run on MIG
hardware yet; ``scripts/gpu-check`` prints what it reads.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.readers.base import (
    GpmActivity,
    Memory,
    MigInstance,
    MigLayout,
    NotSupported,
    Process,
    ReaderError,
    fatal,
    mig_profile,
)
from exporter.readers.nvml_errors import translate

T = TypeVar("T")
RECHECK = 10.0  # seconds a layout is trusted before the mode and the instances are read again
CALL = "mig_instances"


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def process_memory(v: Any) -> int | None:
    """A process' GPU memory; None where NVML cannot see it (NVML_VALUE_NOT_AVAILABLE, all ones)."""
    try:
        iv = int(v)
    except (TypeError, ValueError):
        return None
    return None if iv >= (1 << 63) or iv < 0 else iv


def memory_info(n: Any, handle: Any) -> Memory:
    """A device's memory as nvidia-smi's "Used" counts it: ``nvmlDeviceGetMemoryInfo_v2``, whose
    ``used`` leaves out what the driver reserves (v1's includes it: 615 MiB "used" on an idle H200
    with driver 580, where nvidia-smi says 0 and "Reserved 616 MiB"); v1 where the driver or the
    binding has no v2. Raises NVMLError as the call does."""
    version = getattr(n, "nvmlMemory_v2", None)
    if version is not None:
        try:
            m = n.nvmlDeviceGetMemoryInfo(handle, version=version)
            return Memory(used_bytes=int(m.used), total_bytes=int(m.total))
        except n.NVMLError as e:
            older = (n.NVML_ERROR_FUNCTION_NOT_FOUND, n.NVML_ERROR_NOT_SUPPORTED,
                     getattr(n, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", None))  # fmt: skip
            if getattr(e, "value", None) not in older:
                raise
    m = n.nvmlDeviceGetMemoryInfo(handle)
    return Memory(used_bytes=int(m.used), total_bytes=int(m.total))


def gpm_between(n: Any, prev: Any, cur: Any) -> GpmActivity | None:
    """SM, tensor, DRAM activity, SM occupancy and graphics engine activity between two GPM samples
    (``n``: pynvml); None where NVML gives one of the first four that is no number for the interval
    (graphics alone unreadable is None in the answer)."""
    ids = (
        n.NVML_GPM_METRIC_SM_UTIL,
        n.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        n.NVML_GPM_METRIC_DRAM_BW_UTIL,
        n.NVML_GPM_METRIC_SM_OCCUPANCY,
        n.NVML_GPM_METRIC_GRAPHICS_UTIL,
    )
    req = n.c_nvmlGpmMetricsGet_t()
    req.version = n.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(ids)
    req.sample1 = prev
    req.sample2 = cur
    for k, metric_id in enumerate(ids):
        req.metrics[k].metricId = metric_id
    n.nvmlGpmMetricsGet(req)
    vals = [req.metrics[k].value / 100.0 for k in range(len(ids))]
    if not all(math.isfinite(v) for v in vals[:4]):
        # seen on an H200 (driver 580): DRAM bandwidth NaN for two samples milliseconds apart. A NaN
        # integrated once would poison a counter for good: the interval reads as not measured.
        return None
    graphics = vals[4] if math.isfinite(vals[4]) else None
    return GpmActivity(sm=vals[0], tensor=vals[1], dram=vals[2], sm_occupancy=vals[3], graphics=graphics)


@dataclass(frozen=True, slots=True)
class _Device:
    handle: Any
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    slices: int
    sm_count: int


@dataclass(frozen=True, slots=True)
class _Layout:
    slices: int
    sm_count: int
    devices: tuple[_Device, ...]


class MigReads:
    """The MIG state NvmlReader keeps: each GPU's layout and when it was read, GPM samples per GPU instance."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._layouts: dict[int, tuple[float, _Layout | None]] = {}
        self._gpm: dict[tuple[int, int], tuple[Any, Any, bool]] = {}  # (gpu, GPU instance) -> samples
        self._no_gpm: set[int] = set()  # GPUs without GPM
        self._gpm_checked: set[int] = set()  # GPUs whose GPM support was asked

    def read(self, n: Any, parent: Any, index: int) -> MigLayout | None:
        """The GPU's instances now; None while MIG mode is off. Raises the reader errors of ``base``."""
        now = self._clock()
        cached = self._layouts.get(index)
        if cached is None or now - cached[0] >= RECHECK:
            cached = (now, self._discover(n, parent, index))
            self._layouts[index] = cached
        layout = cached[1]
        if layout is None:
            return None
        try:
            gpm = self._activity(n, parent, index, {d.gpu_instance_id for d in layout.devices})
            insts = tuple(self._instance(n, index, d, gpm.get(d.gpu_instance_id)) for d in layout.devices)
        except ReaderError:
            self._layouts.pop(index, None)  # an instance went away, perhaps: find the layout afresh
            raise
        return MigLayout(layout.slices, layout.sm_count, insts)

    def forget(self, n: Any, index: int) -> None:
        """Drop what is known of GPU ``index`` (its handle changed)."""
        self._layouts.pop(index, None)
        self._gpm_checked.discard(index)
        self._no_gpm.discard(index)
        self._drop_gpm(n, index, keep=set())

    def close(self, n: Any) -> None:
        for samples in self._gpm.values():
            self._free(n, samples)
        self._gpm, self._layouts, self._no_gpm, self._gpm_checked = {}, {}, set(), set()

    # --- helpers ------------------------------------------------------------------------

    def _call(self, n: Any, index: int, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except n.NVMLError as e:
            raise translate(n, getattr(e, "value", None), str(e), CALL, index) from e

    def _maybe(self, n: Any, index: int, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, or None where it fails this round; raises where the GPU, the driver or the
        instance itself is gone."""
        try:
            return fn(*args)
        except n.NVMLError as e:
            code = getattr(e, "value", None)
            err = translate(n, code, str(e), CALL, index)
            if fatal(err) or code in (n.NVML_ERROR_INVALID_ARGUMENT, n.NVML_ERROR_NOT_FOUND):
                raise err from e
            return None

    def _discover(self, n: Any, parent: Any, index: int) -> _Layout | None:
        mode_of = getattr(n, "nvmlDeviceGetMigMode", None)
        if mode_of is None:
            raise NotSupported("this NVML has no MIG", call=CALL, gpu=index)
        current, _pending = self._call(n, index, mode_of, parent)
        if current != n.NVML_DEVICE_MIG_ENABLE:
            self._drop_gpm(n, index, keep=set())
            return None
        slices, sms = self._whole(n, parent, index)
        devices = []
        for k in range(int(self._call(n, index, n.nvmlDeviceGetMaxMigDeviceCount, parent))):
            try:
                h = n.nvmlDeviceGetMigDeviceHandleByIndex(parent, k)
            except n.NVMLError as e:
                if getattr(e, "value", None) == n.NVML_ERROR_NOT_FOUND:
                    continue  # no instance at this index
                raise translate(n, getattr(e, "value", None), str(e), CALL, index) from e
            a = self._call(n, index, n.nvmlDeviceGetAttributes, h)
            gi_slices = int(a.gpuInstanceSliceCount)
            devices.append(
                _Device(
                    handle=h,
                    uuid=text(self._call(n, index, n.nvmlDeviceGetUUID, h)),
                    gpu_instance_id=int(self._call(n, index, n.nvmlDeviceGetGpuInstanceId, h)),
                    compute_instance_id=int(self._call(n, index, n.nvmlDeviceGetComputeInstanceId, h)),
                    profile=mig_profile(gi_slices, int(a.memorySizeMB)),
                    slices=int(a.computeInstanceSliceCount) or gi_slices,
                    sm_count=int(a.multiprocessorCount),
                )
            )
        self._drop_gpm(n, index, keep={d.gpu_instance_id for d in devices})
        return _Layout(slices, sms, tuple(devices))

    def _whole(self, n: Any, parent: Any, index: int) -> tuple[int, int]:
        """The GPU's compute slices and SMs: those of its largest GPU instance profile (7g on an H100)."""
        best = (0, 0)
        for profile in range(int(n.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile)
            except n.NVMLError:
                continue  # a profile this GPU does not offer
            best = max(best, (int(info.sliceCount), int(info.multiprocessorCount)))
        if not best[0]:
            raise ReaderError("MIG mode is on but NVML lists no GPU instance profile", call=CALL, gpu=index)
        return best

    def _instance(self, n: Any, index: int, d: _Device, gpm: GpmActivity | None) -> MigInstance:
        memory = self._maybe(n, index, memory_info, n, d.handle)
        running = self._maybe(n, index, n.nvmlDeviceGetComputeRunningProcesses, d.handle)
        procs = (
            None
            if running is None
            else tuple(Process(pid=int(p.pid), used_memory_bytes=process_memory(p.usedGpuMemory)) for p in running)
        )
        ids = (d.gpu_instance_id, d.compute_instance_id)
        return MigInstance(d.uuid, *ids, d.profile, d.slices, d.sm_count, memory, procs, gpm)

    def _activity(self, n: Any, parent: Any, index: int, instances: set[int]) -> dict[int, GpmActivity]:
        """Each GPU instance's GPM activity since the previous read (none on the first, or without GPM)."""
        if index in self._no_gpm:
            return {}
        try:
            if index not in self._gpm_checked:
                self._gpm_checked.add(index)
                if not n.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice:
                    self._no_gpm.add(index)
                    return {}
            out: dict[int, GpmActivity] = {}
            for gi in sorted(instances):
                entry = self._gpm.get((index, gi)) or (n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc(), False)
                prev, cur, primed = entry
                n.nvmlGpmMigSampleGet(parent, gi, cur)
                self._gpm[(index, gi)] = (cur, prev, True)
                if primed and (activity := gpm_between(n, prev, cur)) is not None:
                    out[gi] = activity
            return out
        except n.NVMLError as e:
            err = translate(n, getattr(e, "value", None), str(e), CALL, index)
            if isinstance(err, NotSupported):
                self._no_gpm.add(index)
                return {}
            raise err from e

    def _drop_gpm(self, n: Any, index: int, keep: set[int]) -> None:
        """Free GPU ``index``'s GPM samples but those of the GPU instances in ``keep``."""
        for key in [k for k in self._gpm if k[0] == index and k[1] not in keep]:
            self._free(n, self._gpm.pop(key))

    @staticmethod
    def _free(n: Any, samples: tuple[Any, Any, bool]) -> None:
        for s in samples[:2]:
            with contextlib.suppress(n.NVMLError):
                n.nvmlGpmSampleFree(s)
