"""Load a recorded NVML capture (format: ``exporter/captures/README.md``) into typed records.

A capture covers ``[t0, t1]`` (its first and last sample). Interval quantities (the
utilisation samples buffer, GPM activity) describe the time *before* their timestamp, so
record ``r`` covers ``(t[r-1], t[r]]``; gauges (power, clocks) hold from a record onwards.
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from daemonkit.settings import ConfigError
from exporter.readers import capture_schema as schema
from exporter.readers.probes import FactValue

BUNDLED = "h200-phases.jsonl"
MAX_LINE = 4 * 2**20  # bytes in one line (the bundled capture's longest: 2 kB)
MAX_RECORDS = 1_000_000  # samples in one capture: 11 days at one a second
M = TypeVar("M", bound=BaseModel)


class CaptureError(ConfigError, ValueError):
    """The capture file cannot be used; the message names the file and line. A ``ConfigError``:
    the commands that load one exit 2 with this one line."""


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
    graphics: float | None = None  # GPM's graphics activity; None: not in the capture


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
    facts: Mapping[str, FactValue] = field(default_factory=dict)  # facts of the table (exporter.facts) by name


@dataclass(frozen=True)
class Capture:
    path: str
    static: CaptureStatic
    records: tuple[Record, ...]
    samples: tuple[tuple[float, float], ...]  # (epoch seconds, share busy) inside (t0, t1]
    offsets: tuple[float, ...]  # record times minus t0, for bisection
    sample_offsets: tuple[float, ...]  # sample times minus t0
    fact_names: frozenset[str] = frozenset()  # the facts any record holds; the others are absent

    def fact_loop(self, name: str) -> FactValue:
        """A counter's increase over the capture, first record to last (0 where either lacks it)."""
        a, b = self.records[0].facts.get(name), self.records[-1].facts.get(name)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            return {k: v - a[k] for k, v in b.items() if k in a}
        return b - a if isinstance(a, float) and isinstance(b, float) else 0.0

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
    """Read and check a whole capture; any problem raises one ``CaptureError`` naming ``file:line``."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return _load(path, _lines(path, f))
    except OSError as e:
        raise CaptureError(f"{path}: cannot read capture: {e.strerror or e}") from e


def _lines(path: Path, f: BinaryIO) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whether it ended with a newline): UTF-8 text lines of bounded length."""
    for n in itertools.count(1):
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        if n == 1 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise CaptureError(f"{path}:1: UTF-16 text; a capture is UTF-8 JSON lines")
        if n == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        if len(raw) > MAX_LINE:
            raise CaptureError(f"{path}:{n}: line longer than {MAX_LINE // 2**20} MiB")
        if b"\0" in raw:
            raise CaptureError(f"{path}:{n}: binary data (a NUL byte), not a JSON line")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = f"byte 0x{raw[e.start]:02x} at column {e.start + 1}"
            raise CaptureError(f"{path}:{n}: not UTF-8 text ({bad})") from None
        yield n, text, text.endswith("\n")


def _load(path: Path, lines: Iterator[tuple[int, str, bool]]) -> Capture:
    first = next(lines, None)
    if first is None or not first[1].strip():
        raise CaptureError(f"{path}: empty capture")
    static = _static(path, first[1], first[2])
    records: list[Record] = []
    samples: list[tuple[float, float]] = []
    for n, line, whole in lines:
        if not line.strip():
            continue
        if len(records) >= MAX_RECORDS:
            raise CaptureError(f"{path}:{n}: more than {MAX_RECORDS:,} samples")
        raw = _check(path, n, schema.RecordLine, _json(path, n, line, whole))
        rec = _record(raw)
        if records and rec.t <= records[-1].t:
            raise CaptureError(f"{path}:{n}: sample time {rec.t} is not after the previous one ({records[-1].t})")
        if records and rec.energy_joules < records[-1].energy_joules:
            raise CaptureError(f"{path}:{n}: energy_mJ {raw.energy_mJ:g} is below the previous sample's")
        records.append(rec)
        samples.extend((ts_us / 1e6, pct / 100.0) for ts_us, pct in raw.util_samples)
    if len(records) < 2:
        raise CaptureError(f"{path}: a capture needs at least two samples")
    t0, t1 = records[0].t, records[-1].t
    kept = sorted({s for s in samples if t0 < s[0] <= t1})
    offsets = tuple(r.t - t0 for r in records)
    sample_offsets = tuple(s[0] - t0 for s in kept)
    names = frozenset(k for r in records for k in r.facts)
    return Capture(str(path), static, tuple(records), tuple(kept), offsets, sample_offsets, names)


def _json(path: Path, n: int, line: str, whole: bool) -> dict[str, Any]:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        cut = "" if whole else " (the file ends mid-line: truncated?)"
        raise CaptureError(f"{path}:{n}: not JSON: {e.msg} (column {e.colno}){cut}") from None
    except RecursionError:
        raise CaptureError(f"{path}:{n}: not a capture line: JSON nested too deeply") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise CaptureError(f"{path}:{n}: not JSON: {str(e).partition(':')[0][:120]}") from None
    if not isinstance(raw, dict):
        raise CaptureError(f"{path}:{n}: expected a JSON object")
    return raw


def _check(path: Path, n: int, model: type[M], raw: object) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        what = "bad static field" if model is schema.StaticLine else "bad or missing field"
        more = f"; {e.error_count() - 1} more" if e.error_count() > 1 else ""
        if not err["loc"]:  # a check of the whole line: its message says what
            raise CaptureError(f"{path}:{n}: {what} {err['msg'].removeprefix('Value error, ')}{more}") from None
        where = ".".join(str(x) for x in err["loc"])
        got = "" if err["type"] == "missing" else f" (got {_short(err.get('input'))})"
        raise CaptureError(f"{path}:{n}: {what} {where}: {err['msg']}{got}{more}") from None


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _static(path: Path, line: str, whole: bool) -> CaptureStatic:
    raw = _json(path, 1, line, whole).get("static")
    if not isinstance(raw, dict):
        raise CaptureError(f'{path}:1: the first line must be {{"static": {{...}}}}')
    st = _check(path, 1, schema.StaticLine, raw)
    return CaptureStatic(
        name=st.name,
        uuid=st.uuid,
        driver=st.driver,
        nvml=st.nvml,
        memory_total_bytes=st.memory_total_bytes,
        power_limit_watts=st.power_limit_mW / 1000.0,
        pci_bus_id=st.pci_bus_id,
    )


def _record(raw: schema.RecordLine) -> Record:
    g = raw.gpm
    gpm = (
        Gpm(
            g.sm_util / 100,
            g.tensor_util / 100,
            g.dram_bw_util / 100,
            g.sm_occupancy / 100,
            None if g.graphics_util is None else g.graphics_util / 100,
        )
        if isinstance(g, schema.GpmLine)
        else None
    )
    pu = raw.proc_util
    return Record(
        t=raw.t,
        power_watts=raw.power_mW / 1000.0,
        energy_joules=raw.energy_mJ / 1000.0,
        util_gpu=raw.util_gpu_pct / 100.0,
        util_memory=raw.util_mem_pct / 100.0,
        memory_used_bytes=raw.mem_used_bytes,
        temperature_celsius=raw.temp_C,
        sm_clock_hertz=raw.sm_clock_MHz * 1e6,
        memory_clock_hertz=raw.mem_clock_MHz * 1e6,
        clock_event_reasons=raw.clock_event_reasons,
        processes=tuple(raw.procs),
        process_util=tuple((int(p[0]), p[1] / 100, p[2] / 100) for p in pu) if isinstance(pu, list) else (),
        gpm=gpm,
        ecc_uncorrected=raw.ecc_uncorrected_volatile,
        facts={k: v if isinstance(v, float) else {int(x): y for x, y in v.items()} for k, v in raw.facts.items()},
    )
