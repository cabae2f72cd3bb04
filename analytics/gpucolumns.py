"""A part's GPU rows as columns (``analytics.dayfiles``, ``analytics.dayparts``): a kept day's
GPUs read from its file, or the GPUs of days read from the store, ready to be added up with numpy.

At 10,000 GPUs a week's seven kept days hold 70,000 GPU rows, each with its day and 24 hours of
energy: parsed as JSON rows, made into ``GpuWeek`` objects and added up GPU by GPU they took about
3 s of the weekly report (docs/performance.md). As columns, each part is a few arrays: the texts
(lists of ``str``), the figures (float64, NaN where a source did not measure one: None in the row),
the days (n x days x 3: sampled, busy, energy) and the hours (the GPUs' hours one after the other,
with each GPU's count: -1 where it has none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields

import numpy as np
import numpy.typing as npt

from domain.frozen import construct
from domain.week import GpuDay, GpuWeek

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int32]

FIELDS = tuple(f.name for f in fields(GpuWeek))
TEXTS = ("uuid", "host", "model", "gpu", "cluster", "busy_measure", "energy_measure")
FIGURES = ("sampled_s", "busy_s")  # always measured
OPTIONAL = ("sm_active_s", "allocated_s", "allocated_idle_s", "energy_j", "stalled_s")  # None: NaN here
NUMBERS = (*FIGURES, *OPTIONAL)
assert set(FIELDS) == {*TEXTS, *NUMBERS, "daily", "energy_by_hour"}, "GpuColumns holds every GpuWeek field"


def none_of(v: float) -> float | None:
    """None for NaN (a figure not measured)."""
    return None if math.isnan(v) else v


class GpuColumns:
    """A part's GPU rows as columns (module docstring); never changed after it is made."""

    __slots__ = ("daily", "hours", "hours_n", "n", "numbers", "texts")

    def __init__(
        self,
        texts: Mapping[str, list[str]],
        numbers: Mapping[str, Floats],
        daily: Floats,
        hours: Floats,
        hours_n: Ints,
    ) -> None:
        n = len(texts.get("uuid", ()))
        if texts.keys() != set(TEXTS) or numbers.keys() != set(NUMBERS):
            raise ValueError("GPU columns need every field")
        if {*map(len, texts.values()), *(len(x) for x in numbers.values()), len(hours_n)} != {n}:
            raise ValueError("the GPU columns are not of one length")
        if daily.ndim != 3 or daily.shape[0] != n or daily.shape[2] != 3:
            raise ValueError(f"GPU days of shape {daily.shape}")
        if (n and int(hours_n.min()) < -1) or int(np.maximum(hours_n, 0).sum()) != len(hours):
            raise ValueError("the GPUs' hour counts do not add up to their hours")
        self.n = n
        self.texts = dict(texts)
        self.numbers = {k: np.asarray(v, dtype=np.float64) for k, v in numbers.items()}
        self.daily = daily
        self.hours = hours
        self.hours_n = hours_n

    @classmethod
    def of(cls, gpus: Sequence[GpuWeek], days: int) -> GpuColumns:
        """The columns of ``gpus``, rows of ``days`` days (a GPU with another count of days is a
        ValueError)."""
        if any(len(g.daily) != days for g in gpus):
            raise ValueError(f"GPU rows without {days} days")
        texts = {name: [getattr(g, name) for g in gpus] for name in TEXTS}
        numbers = {name: np.array([getattr(g, name) for g in gpus], dtype=np.float64) for name in NUMBERS}
        daily = np.array([[(d.sampled_s, d.busy_s, d.energy_j) for d in g.daily] for g in gpus], dtype=np.float64)
        hours = [g.energy_by_hour for g in gpus]
        return cls(
            texts,
            numbers,
            daily.reshape(len(gpus), days, 3),
            np.array([h for x in hours if x is not None for h in x], dtype=np.float64),
            np.array([-1 if x is None else len(x) for x in hours], dtype=np.int32),
        )

    def hour_rows(self) -> Floats | None:
        """The hours as one row per GPU where every GPU has the same count (the GPUs without
        hours: NaN rows); None where the counts differ."""
        counts = set(self.hours_n.tolist()) - {-1}
        if len(counts) > 1:
            return None
        k = counts.pop() if counts else 0
        out = np.full((self.n, k), np.nan)
        out[self.hours_n >= 0] = self.hours.reshape(-1, k) if k else np.zeros((0, 0))
        return out

    def rows(self) -> tuple[GpuWeek, ...]:
        """The ``GpuWeek`` rows."""
        ends = np.cumsum(np.maximum(self.hours_n, 0)).tolist()
        hours = self.hours.tolist()
        out = []
        for i in range(self.n):
            values: dict[str, object] = {name: self.texts[name][i] for name in TEXTS}
            for name in NUMBERS:
                v = float(self.numbers[name][i])
                values[name] = none_of(v) if name in OPTIONAL else v
            values["daily"] = tuple(GpuDay(s, b, none_of(e)) for s, b, e in self.daily[i].tolist())
            k = int(self.hours_n[i])
            values["energy_by_hour"] = None if k < 0 else tuple(hours[ends[i] - k : ends[i]])
            out.append(construct(GpuWeek, values))
        return tuple(out)
