"""ReplayReader: plays a recorded capture as if it were live GPUs.

Reader time starts at 0 when the reader opens and runs at ``speed`` capture seconds per wall
second. GPU ``i`` sits at capture position ``now + offset_i`` (offsets spread the GPUs over
the capture when ``stagger`` is on, so a demo fleet is not eight copies of one phase). With
``loop`` the capture repeats and the energy counter keeps climbing; without it the last
record holds once the capture is over.

``mig`` (``--replay-mig``, synthetic: the capture holds no MIG instance) presents every GPU in MIG
mode with that layout (``mig_profiles.parse_layout``). Each instance plays the capture at its own
position (spread over the capture like the GPUs), so the instances' activity differs: its GPM
activity, processes and memory (the capture's times the instance's share of the memory) are the
capture's there. As NVML does under MIG, the GPU's utilisation, its samples and per-process
utilisation are NotSupported, and so is the parent's own GPM: busy time comes from the instances.
"""

from __future__ import annotations

import bisect
import math
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from exporter.readers import capture as cap
from exporter.readers import mig_profiles
from exporter.readers.base import (
    Clocks,
    DeviceInfo,
    DriverInfo,
    EccErrors,
    GpmActivity,
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
)
from exporter.readers.probes import FactValue, Probe

_NAMESPACE = uuidlib.UUID("6c1d3c52-5a0e-4f51-9a43-6f2b7f6b1e20")


class ReplayReader:
    kind = "replay"

    def __init__(
        self,
        capture: cap.Capture | str | Path | None = None,
        *,
        gpus: int = 1,
        speed: float = 1.0,
        loop: bool = True,
        stagger: bool = True,
        clock: Callable[[], float] = time.monotonic,
        devices: Sequence[DeviceInfo] = (),
        mig: Sequence[str] = (),
    ) -> None:
        """``devices``: present these identities (index 0.., UUID, model, PCI id; ``gpus`` is then
        their count) instead of ones derived from the capture: a demo's live GPUs are its fleet's.
        ``mig``: every GPU in MIG mode with instances of these profiles (``mig_profiles``); () off."""
        gpus = len(devices) or gpus
        if any(d.index != i for i, d in enumerate(devices)):
            raise ValueError("devices must be indexed 0, 1, ... in order")
        if gpus < 1:
            raise ValueError("gpus must be >= 1")
        if speed <= 0:
            raise ValueError("speed must be > 0")
        if capture is None:
            capture = cap.bundled_path()
        self.capture = capture if isinstance(capture, cap.Capture) else cap.load(capture)
        self.time_scale = speed
        self._loop = loop
        self._clock = clock
        self._start = clock()
        d = self.capture.duration
        self._offsets = [(i * d / gpus) if stagger else 0.0 for i in range(gpus)]
        self._gpm_last: dict[int | tuple[int, int], float] = {}
        self._devices = list(devices) or [self._identity(i, gpus) for i in range(gpus)]
        for p in mig:
            mig_profiles.profile(p)  # KeyError for an unknown profile: parse_layout() checks first
        self._mig = tuple(mig)

    # --- lifecycle ----------------------------------------------------------------------

    def open(self) -> DriverInfo:
        self._start = self._clock()
        self._gpm_last.clear()
        s = self.capture.static
        return DriverInfo(driver_version=s.driver, nvml_version=s.nvml)

    def close(self) -> None:
        pass

    def now(self) -> float:
        return (self._clock() - self._start) * self.time_scale

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def device(self, index: int) -> DeviceInfo:
        return self._dev(index, "device")

    def position(self, index: int, at: float | None = None) -> float:
        """Capture position (seconds from the first record, not wrapped) of GPU ``index``."""
        return (self.now() if at is None else at) + self._offsets[index]

    # --- readings -----------------------------------------------------------------------

    def utilization(self, index: int) -> Utilization:
        self._not_in_mig(index, "utilization")
        r = self._record(index, "utilization")
        return Utilization(gpu=r.util_gpu, memory=r.util_memory)

    def utilization_samples(self, index: int, since_us: int) -> list[UtilSample]:
        self._not_in_mig(index, "utilization_samples")
        now = self.now()
        lo = max(since_us / 1e6, 0.0)
        if lo >= now:
            return []
        off = self._offsets[index]
        out: list[UtilSample] = []
        samples = self.capture.samples
        keys = self.capture.sample_offsets
        for base, qa, qb in self._segments(lo + off, now + off):
            j = bisect.bisect_right(keys, qa)
            while j < len(keys) and keys[j] <= qb:
                ts = round((base + keys[j] - off) * 1e6)
                if ts > since_us:  # guard against float rounding at the window's edge
                    out.append((ts, samples[j][1]))
                j += 1
        return out

    def power_watts(self, index: int) -> float:
        return self._record(index, "power_watts").power_watts

    def power_limit_watts(self, index: int) -> float:
        self._dev(index, "power_limit_watts")
        return self.capture.static.power_limit_watts

    def energy_joules(self, index: int) -> float:
        self._dev(index, "energy_joules")
        c = self.capture
        p = self.position(index)
        first = c.records[0].energy_joules
        if not self._loop:
            return c.energy_at(c.t0 + min(p, c.duration))
        k = math.floor(p / c.duration)
        q = p - k * c.duration
        per_loop = c.records[-1].energy_joules - first
        return c.energy_at(c.t0 + q) + k * per_loop

    def memory(self, index: int) -> Memory:
        r = self._record(index, "memory")
        return Memory(used_bytes=r.memory_used_bytes, total_bytes=self.capture.static.memory_total_bytes)

    def temperature_celsius(self, index: int) -> float:
        return self._record(index, "temperature_celsius").temperature_celsius

    def clocks(self, index: int) -> Clocks:
        r = self._record(index, "clocks")
        return Clocks(sm_hertz=r.sm_clock_hertz, memory_hertz=r.memory_clock_hertz)

    def clock_event_reasons(self, index: int) -> int:
        return self._record(index, "clock_event_reasons").clock_event_reasons

    def processes(self, index: int) -> list[Process]:
        r = self._record(index, "processes")
        return [Process(pid=pid + index, used_memory_bytes=used) for pid, used in r.processes]

    def process_utilization(self, index: int) -> list[ProcessUtil]:
        self._not_in_mig(index, "process_utilization")
        r = self._record(index, "process_utilization")
        return [ProcessUtil(pid=pid + index, sm=sm, memory=mem) for pid, sm, mem in r.process_util]

    def gpm(self, index: int) -> GpmActivity | None:
        self._not_in_mig(index, "gpm")
        return self._gpm(index, index, self._offsets[index], "gpm")

    def _gpm(self, index: int, key: int | tuple[int, int], off: float, call: str) -> GpmActivity | None:
        """The capture's GPM activity at offset ``off`` since ``key``'s last read (None the first time)."""
        self._dev(index, call)
        if all(r.gpm is None for r in self.capture.records):
            raise NotSupported("capture has no GPM data", call=call, gpu=index)
        now = self.now()
        last = self._gpm_last.get(key)
        self._gpm_last[key] = now
        if last is None or now <= last:
            return None
        means = [self._interval_mean(last + off, now + off, f) for f in ("sm", "tensor", "dram", "sm_occupancy")]
        if any(m is None for m in means):
            return None
        sm, tensor, dram, occ = (float(m or 0.0) for m in means)
        graphics = self._interval_mean(last + off, now + off, "graphics")
        return GpmActivity(sm=sm, tensor=tensor, dram=dram, sm_occupancy=occ, graphics=graphics)

    def ecc_errors(self, index: int) -> EccErrors:
        r = self._record(index, "ecc_errors")
        if r.ecc_uncorrected is None:
            raise NotSupported("capture has no ECC counts", call="ecc_errors", gpu=index)
        return EccErrors(corrected=None, uncorrected=r.ecc_uncorrected)

    def remapped_rows(self, index: int) -> RemappedRows:
        raise NotSupported("not in the capture", call="remapped_rows", gpu=index)

    def pcie_throughput(self, index: int) -> PcieThroughput:
        raise NotSupported("not in the capture", call="pcie_throughput", gpu=index)

    def wait_xid(self, timeout_seconds: float) -> list[XidEvent]:
        raise NotSupported("captures hold no XID events", call="wait_xid")

    def mig_instances(self, index: int) -> MigLayout | None:
        if not self._mig:
            raise NotSupported("captures hold no MIG instances", call="mig_instances", gpu=index)
        dev = self._dev(index, "mig_instances")
        return MigLayout(
            mig_profiles.SLICES, mig_profiles.SMS, tuple(self._instance(index, dev, k) for k in range(len(self._mig)))
        )

    def _instance(self, index: int, dev: DeviceInfo, k: int) -> MigInstance:
        """Instance ``k`` of GPU ``index``: the capture at its own position (synthetic)."""
        name = self._mig[k]
        slices, sms, memory_mb, memory_slices = mig_profiles.profile(name)
        off = self._offsets[index] + (k + 1) * self.capture.duration / (len(self._mig) + 1)
        r = self._record_at(self.now() + off)
        total = memory_mb << 20
        used = min(total, round(r.memory_used_bytes * memory_slices / mig_profiles.MEMORY_SLICES))
        procs = tuple(Process(pid=pid + index + 1000 * (k + 1), used_memory_bytes=used) for pid, _ in r.processes)
        uuid = f"MIG-{uuidlib.uuid5(_NAMESPACE, f'{dev.uuid}/mig/{k}')}"
        try:
            gpm = self._gpm(index, (index, k), off, "mig_instances")
        except NotSupported:
            gpm = None  # a capture without GPM: busy time under MIG is then not measured, as on an A100
        return MigInstance(uuid, k + 1, 0, name, slices, sms, Memory(used, total), procs, gpm)

    def _not_in_mig(self, index: int, call: str) -> None:
        if self._mig:
            self._dev(index, call)
            raise NotSupported("not supported in MIG mode", call=call, gpu=index)

    def read_facts(self, index: int, probes: Sequence[Probe]) -> Readout:
        """A fact the capture holds in no record is NotSupported (absent, not zero: the bundled
        capture holds none); a looping counter adds the capture's increase at each loop."""
        return {p.name: self._fact(index, p) for p in probes}

    def _fact(self, index: int, p: Probe) -> FactValue | ReaderError:
        c = self.capture
        try:
            r = self._record(index, p.name)
        except ReaderError as e:
            return e
        if p.name not in c.fact_names:
            return NotSupported("not in the capture", call=p.name, gpu=index)
        v = r.facts.get(p.name)
        if v is None:
            return ReaderError("not in this sample of the capture", call=p.name, gpu=index)
        loops = math.floor(self.position(index) / c.duration) if p.counter and self._loop else 0
        if not loops:
            return v
        inc = c.fact_loop(p.name)
        if isinstance(v, Mapping):
            per = inc if isinstance(inc, Mapping) else {}
            return {k: x + loops * per.get(k, 0.0) for k, x in v.items()}
        return v + loops * (inc if isinstance(inc, float) else 0.0)

    # --- helpers ------------------------------------------------------------------------

    def _identity(self, i: int, n: int) -> DeviceInfo:
        s = self.capture.static
        if n == 1:
            return DeviceInfo(index=0, uuid=s.uuid, model=s.name, pci_bus_id=s.pci_bus_id)
        uid = f"GPU-{uuidlib.uuid5(_NAMESPACE, f'{s.uuid}/{i}')}"
        domain, bus, rest = [*s.pci_bus_id.split(":"), "", ""][:3]
        dev = int(rest.split(".")[0] or "0", 16) + i
        pci = f"{domain}:{bus}:{dev:02X}.0"
        return DeviceInfo(index=i, uuid=uid, model=s.name, pci_bus_id=pci)

    def _dev(self, index: int, call: str) -> DeviceInfo:
        if not 0 <= index < len(self._devices):
            raise ReaderError(f"no GPU with index {index}", call=call, gpu=index)
        return self._devices[index]

    def _record(self, index: int, call: str) -> cap.Record:
        self._dev(index, call)
        return self._record_at(self.position(index))

    def _record_at(self, p: float) -> cap.Record:
        c = self.capture
        q = (p % c.duration) if self._loop else min(p, c.duration)
        return c.records[c.index_at(c.t0 + q)]

    def _segments(self, pa: float, pb: float) -> Iterator[tuple[float, float, float]]:
        """Split positions (pa, pb] into per-loop pieces: (loop start position, qa, qb)."""
        d = self.capture.duration
        if not self._loop:
            qa, qb = min(pa, d), min(pb, d)
            if qb > qa:
                yield 0.0, qa, qb
            return
        k = math.floor(pa / d)
        while k * d < pb:
            qa, qb = max(pa - k * d, 0.0), min(pb - k * d, d)
            if qb > qa:
                yield k * d, qa, qb
            k += 1

    def _interval_mean(self, pa: float, pb: float, field: str) -> float | None:
        """Time-weighted mean of a GPM field over positions (pa, pb]; record r covers the capture
        interval (offset[r-1], offset[r]]. ``graphics`` where a capture has none (those before it was
        recorded) is the record's utilisation, which NVML derives from the same engine activity."""
        offs = self.capture.offsets
        recs = self.capture.records
        total = weight = 0.0
        for _, qa, qb in self._segments(pa, pb):
            r = max(1, bisect.bisect_right(offs, qa))
            while r < len(offs) and offs[r - 1] < qb:
                lo, hi = max(qa, offs[r - 1]), min(qb, offs[r])
                g = recs[r].gpm
                if g is not None and hi > lo:
                    v = getattr(g, field)
                    total += float(recs[r].util_gpu if v is None else v) * (hi - lo)
                    weight += hi - lo
                r += 1
        return total / weight if weight > 0 else None
