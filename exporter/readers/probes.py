"""How a reader reads one fact of the GPU fact table (``exporter.facts``).

A fact row carries a probe: the NVML field value or function that answers it, what the fake
reader answers by default, and whether it is a counter or one value per NVLink link. Each reader
knows how to read a probe (``Reader.read_facts``); none of them lists the facts that exist.
Captures hold facts by name under a line's ``"facts"`` key (``exporter/captures/README.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Field:
    """An NVML field value (``nvmlDeviceGetFieldValues``, named by its pynvml constant). Every field
    a GPU is asked in one round goes in one call; a per-link fact asks it once per NVLink link,
    the link as the field's scope id."""

    field: str  # e.g. "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"
    scale: float = 1.0  # NVML's unit in SI units (KiB: 1024, ns: 1e-9)


@dataclass(frozen=True, slots=True)
class Call:
    """An NVML function of the device handle (then the link, for a per-link fact), with pynvml
    constants named as further arguments. One NVML call per fact (per link): prefer a ``Field``."""

    function: str  # e.g. "nvmlDeviceGetFanSpeed"
    args: tuple[str, ...] = ()  # pynvml constant names, e.g. ("NVML_TEMPERATURE_GPU",)
    scale: float = 1.0

    def describe(self) -> str:
        return f"{self.function}({', '.join(self.args)})" if self.args else self.function


@dataclass(frozen=True, slots=True)
class Const:
    """The fake reader answers this value (SI units) until a test sets another."""

    value: float


@dataclass(frozen=True, slots=True)
class Grows:
    """The fake reader answers a counter growing at this rate of its clock (SI units per second)."""

    per_second: float


Nvml = Field | Call
Fake = Const | Grows


class Probe(Protocol):
    """What a reader needs of a fact row to read it (``exporter.facts.Fact`` is one)."""

    @property
    def name(self) -> str:
        """The fact's name: the ``call`` label of its read errors, its key in a capture's ``facts``."""
        ...

    @property
    def nvml(self) -> Nvml: ...

    @property
    def fake(self) -> Fake: ...

    @property
    def counter(self) -> bool:
        """A monotonic counter (the replay adds a loop's increase at each loop), else a gauge."""
        ...

    @property
    def per_link(self) -> bool:
        """One value per NVLink link; a GPU without NVLink has none (NotSupported)."""
        ...


FactValue = float | Mapping[int, float]
"""One fact's reading in SI units: one value, or one per NVLink link (link index -> value)."""
