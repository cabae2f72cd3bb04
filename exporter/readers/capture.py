"""Load a recorded NVML capture (format: ``exporter/captures/README.md``) into typed records.

A capture covers ``[t0, t1]`` (its first and last sample). Interval quantities (the
utilisation samples buffer, GPM activity) describe the time *before* their timestamp, so
record ``r`` covers ``(t[r-1], t[r]]``; gauges (power, clocks) hold from a record onwards.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

BUNDLED = "h200-phases.jsonl"


class CaptureError(ValueError):
    """The capture file cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class CaptureStatic:
    name: str
    uuid: str
    driver: str
    nvml: str
    memory_total_bytes: int
    power_limit_watts: float
    pci_bus_id: str


@dataclass(frozen=True, slots=True)
class Gpm:
    sm: float
    tensor: float
    dram: float
    sm_occupancy: float


@dataclass(frozen=True, slots=True)
class Record:
    t: float
    power_watts: float
    energy_joules: float
    util_gpu: float
    util_memory: float
    memory_used_bytes: int
    temperature_celsius: float
    sm_clock_hertz: float
    memory_clock_hertz: float
    clock_event_reasons: int
    processes: tuple[tuple[int, int], ...]
    process_util: tuple[tuple[int, float, float], ...]  # pid, SM share, memory share
    gpm: Gpm | None
    ecc_uncorrected: int | None


@dataclass(frozen=True)
class Capture:
    path: str
    static: CaptureStatic
    records: tuple[Record, ...]
    samples: tuple[tuple[float, float], ...]  # (epoch seconds, share busy) inside (t0, t1]
    offsets: tuple[float, ...]  # record times minus t0, for bisection
    sample_offsets: tuple[float, ...]  # sample times minus t0

    @property
    def t0(self) -> float:
        return self.records[0].t

    @property
    def duration(self) -> float:
        return self.records[-1].t - self.records[0].t

    def index_at(self, t: float) -> int:
        """Index of the last record at or before capture time ``t`` (gauge semantics)."""
        return max(0, bisect.bisect_right(self.offsets, t - self.t0) - 1)

    def energy_at(self, t: float) -> float:
        """The energy counter at ``t``, linear between records."""
        recs = self.records
        i = self.index_at(t)
        if i >= len(recs) - 1:
            return recs[-1].energy_joules
        a, b = recs[i], recs[i + 1]
        f = (t - a.t) / (b.t - a.t)
        return a.energy_joules + f * (b.energy_joules - a.energy_joules)


def bundled_path() -> Path:
    return Path(str(resources.files("exporter") / "captures" / BUNDLED))


def load(path: str | Path) -> Capture:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise CaptureError(f"{path}: cannot read capture: {e.strerror}") from e
    if not lines:
        raise CaptureError(f"{path}: empty capture")
    static = _static(path, lines[0])
    records: list[Record] = []
    samples: list[tuple[float, float]] = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        raw = _json(path, n, line)
        rec = _record(path, n, raw)
        if records and rec.t <= records[-1].t:
            raise CaptureError(f"{path}:{n}: sample time {rec.t} is not after the previous one")
        records.append(rec)
        for ts_us, pct in raw.get("util_samples") or []:
            samples.append((ts_us / 1e6, float(pct) / 100.0))
    if len(records) < 2:
        raise CaptureError(f"{path}: a capture needs at least two samples")
    t0, t1 = records[0].t, records[-1].t
    kept = sorted({s for s in samples if t0 < s[0] <= t1})
    offsets = tuple(r.t - t0 for r in records)
    sample_offsets = tuple(s[0] - t0 for s in kept)
    return Capture(str(path), static, tuple(records), tuple(kept), offsets, sample_offsets)


def _json(path: Path, n: int, line: str) -> dict[str, Any]:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise CaptureError(f"{path}:{n}: not JSON: {e.msg}") from e
    if not isinstance(raw, dict):
        raise CaptureError(f"{path}:{n}: expected a JSON object")
    return raw


def _static(path: Path, line: str) -> CaptureStatic:
    raw = _json(path, 1, line).get("static")
    if not isinstance(raw, dict):
        raise CaptureError(f'{path}:1: the first line must be {{"static": {{...}}}}')
    try:
        return CaptureStatic(
            name=str(raw["name"]),
            uuid=str(raw["uuid"]),
            driver=str(raw.get("driver", "")),
            nvml=str(raw.get("nvml", "")),
            memory_total_bytes=int(raw["memory_total_bytes"]),
            power_limit_watts=float(raw["power_limit_mW"]) / 1000.0,
            pci_bus_id=str(raw.get("pci_bus_id", "00000000:00:00.0")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CaptureError(f"{path}:1: bad static field: {e}") from e


def _record(path: Path, n: int, raw: dict[str, Any]) -> Record:
    try:
        gpm_raw = raw.get("gpm")
        gpm = (
            Gpm(
                sm=float(gpm_raw["sm_util"]) / 100.0,
                tensor=float(gpm_raw["tensor_util"]) / 100.0,
                dram=float(gpm_raw["dram_bw_util"]) / 100.0,
                sm_occupancy=float(gpm_raw["sm_occupancy"]) / 100.0,
            )
            if isinstance(gpm_raw, dict)
            else None
        )
        ecc = raw.get("ecc_uncorrected_volatile")
        pu = raw.get("proc_util")
        process_util = (
            tuple((int(p[0]), float(p[1]) / 100, float(p[2]) / 100) for p in pu) if isinstance(pu, list) else ()
        )
        return Record(
            t=float(raw["t"]),
            power_watts=float(raw["power_mW"]) / 1000.0,
            energy_joules=float(raw["energy_mJ"]) / 1000.0,
            util_gpu=float(raw["util_gpu_pct"]) / 100.0,
            util_memory=float(raw["util_mem_pct"]) / 100.0,
            memory_used_bytes=int(raw["mem_used_bytes"]),
            temperature_celsius=float(raw["temp_C"]),
            sm_clock_hertz=float(raw["sm_clock_MHz"]) * 1e6,
            memory_clock_hertz=float(raw["mem_clock_MHz"]) * 1e6,
            clock_event_reasons=int(raw.get("clock_event_reasons", 0)),
            processes=tuple((int(p), int(b)) for p, b in raw.get("procs") or []),
            process_util=process_util,
            gpm=gpm,
            ecc_uncorrected=None if ecc is None else int(ecc),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CaptureError(f"{path}:{n}: bad or missing field: {e}") from e
