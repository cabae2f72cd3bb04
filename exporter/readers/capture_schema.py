"""What one line of a capture may hold (format: ``exporter/captures/README.md``), checked before
anything is replayed: exact JSON types (no strings for numbers, no booleans), finite numbers,
and bounds no real GPU exceeds. Keys the replay does not read are ignored."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

MAX_EPOCH = 1e11  # seconds: the year 5138
MAX_BYTES = 2**64


def _num(hi: float) -> Any:
    return Field(ge=0, le=hi, allow_inf_nan=False)


Percent = Annotated[float, _num(100)]
Count = Annotated[int, Field(ge=0, le=MAX_BYTES)]
Epoch = Annotated[float, _num(MAX_EPOCH)]
EpochMicros = Annotated[int, Field(ge=0, le=int(MAX_EPOCH * 1e6))]
Pid = Annotated[int, Field(ge=0, le=2**32)]
Watts = Annotated[float, _num(1e8)]  # milliwatts: 100 kW
MHz = Annotated[float, _num(1e6)]
Text = Annotated[str, Field(max_length=256)]
FactName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")]  # a row's name in exporter/facts
FactNumber = Annotated[float, _num(1e20)]
Links = Annotated[dict[Annotated[str, Field(pattern=r"^[0-9]{1,2}$")], FactNumber], Field(max_length=64)]
_Pair = BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)  # JSON has arrays, not tuples


class _Line(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class StaticLine(_Line):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    uuid: Annotated[str, Field(min_length=1, max_length=128)]
    driver: Text = ""
    nvml: Text = ""
    memory_total_bytes: Count
    power_limit_mW: Watts
    pci_bus_id: Annotated[str, Field(pattern=r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")] = (
        "00000000:00:00.0"
    )


class GpmLine(_Line):
    sm_util: Percent
    tensor_util: Percent
    dram_bw_util: Percent
    sm_occupancy: Percent
    graphics_util: Percent | None = None  # GRAPHICS_UTIL; captures before it have none


ProcUtil = Annotated[list[Annotated[float, _num(MAX_EPOCH * 1e6)]], Field(min_length=3, max_length=4)]


class RecordLine(_Line):
    t: Epoch
    power_mW: Watts
    energy_mJ: Annotated[float, _num(1e20)]
    util_gpu_pct: Percent
    util_mem_pct: Percent
    mem_used_bytes: Count
    temp_C: Annotated[float, _num(1000)]
    sm_clock_MHz: MHz
    mem_clock_MHz: MHz
    clock_event_reasons: Annotated[int, Field(ge=0, lt=2**64)] = 0
    util_samples: Annotated[list[Annotated[tuple[EpochMicros, Percent], _Pair]], Field(max_length=100_000)] = []
    procs: Annotated[list[Annotated[tuple[Pid, Count], _Pair]], Field(max_length=4096)] = []
    proc_util: Annotated[list[ProcUtil], Field(max_length=4096)] | Text | None = None  # or NVML's error text
    gpm: GpmLine | Text | None = None  # or NVML's error text
    ecc_uncorrected_volatile: Count | None = None
    facts: Annotated[dict[FactName, FactNumber | Links], Field(max_length=256)] = {}  # facts of the table, by name

    @model_validator(mode="after")
    def _proc_util(self) -> RecordLine:
        for i, p in enumerate(self.proc_util if isinstance(self.proc_util, list) else []):
            if p[0] != int(p[0]) or p[0] > 2**32 or p[1] > 100 or p[2] > 100:
                raise ValueError(f"proc_util[{i}]: expected [pid, sm_pct <= 100, mem_pct <= 100, ...], got {p}")
        return self
