"""Energy per step for ``gpuledger scaling``, from the GPUs' own energy counters (NVML, no torch).

A meter reads the counters of the GPUs a run uses in the background while the run lasts, and once
at its start and end. The two-run method takes the energy of each whole run and divides the
difference by the difference of the steps, as it does with the times (start-up cancels); the step
timer takes the energy between the end of the warm-up steps and the end of the loop, on rank 0's
clock, interpolated between the meter's reads. The counter is exact (on an H200 it agreed with its
power readings integrated to 0.35 % over 66 s); the interpolation between reads 0.2 s apart is
the only estimate. On CPU ranks, or GPUs without the counter (before Volta), there is no figure.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

EVERY = 0.2
"""Seconds between the meter's reads (an energy read costs ~4 ms on an H200)."""


class EnergyMeter:
    """Reads ``read()`` (joules, all GPUs of the run together) at enter, every ``every`` seconds
    and at exit, with the wall-clock time of each read (``clock``)."""

    def __init__(self, read: Callable[[], float], every: float = EVERY, clock: Callable[[], float] = time.time) -> None:
        self._read, self._every, self._clock = read, every, clock
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        t = self._clock()
        j = self._read()
        if not self.samples or (t >= self.samples[-1][0] and j >= self.samples[-1][1]):
            self.samples.append((t, j))  # a counter that went back (driver reload) ends the series

    def __enter__(self) -> EnergyMeter:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="scaling-energy", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def total(self) -> float | None:
        """Joules from the first read to the last; None with fewer than two."""
        return self.samples[-1][1] - self.samples[0][1] if len(self.samples) > 1 else None

    def at(self, t: float) -> float | None:
        """The counter at wall time ``t``, interpolated; None outside the reads."""
        s = self.samples
        if len(s) < 2 or not s[0][0] <= t <= s[-1][0]:
            return None
        k = bisect.bisect_left(s, (t, float("-inf")))
        if s[k][0] == t:
            return s[k][1]
        (t0, j0), (t1, j1) = s[k - 1], s[k]
        return j0 + (j1 - j0) * (t - t0) / (t1 - t0)

    def between(self, a: float, b: float) -> float | None:
        """Joules from wall time ``a`` to ``b``; None where either is outside the reads."""
        ja, jb = self.at(a), self.at(b)
        return None if ja is None or jb is None else jb - ja


def timer_window(rank: dict[str, object], warmup: int) -> tuple[float, float, int] | None:
    """(start, end, steps) of a step-timer file's steady steps on its wall clock: from the end of
    the warm-up to the end of the loop; None without the start time or without steady steps."""
    start, times = rank.get("started_at"), rank.get("step_seconds")
    if not isinstance(start, int | float) or not isinstance(times, list) or len(times) <= warmup:
        return None
    steps = [float(x) for x in times]
    return start + sum(steps[:warmup]), start + sum(steps), len(steps) - warmup


def visible_indices(devices: list[tuple[int, str]], visible: str | None) -> list[int]:
    """The NVML indices of the GPUs CUDA numbers 0, 1, ... (``devices``: NVML index and UUID of
    each GPU; ``visible``: CUDA_VISIBLE_DEVICES, indices or UUIDs). Without it, NVML's order: the
    PCI order, which CUDA's own matches on a node of one GPU model."""
    if visible is None:
        return [i for i, _ in devices]
    out = []
    for item in (v.strip() for v in visible.split(",")):
        if not item or item == "-1":
            break  # CUDA stops at the first entry it cannot use
        found = [i for i, uuid in devices if (item.isdigit() and int(item) == i) or uuid.startswith(item)]
        if not found:
            break
        out.append(found[0])
    return out


class GpuEnergy:
    """The energy counters of the GPUs a run's ranks use, read through the exporter's NVML reader."""

    def __init__(self, reader: Any, indices: list[int]) -> None:
        self._reader, self._indices = reader, indices

    def reader_of(self, n: int) -> Callable[[], float]:
        """A function reading the first ``n`` GPUs' counters together (joules)."""
        gpus = self._indices[:n]
        return lambda: sum(self._reader.energy_joules(i) for i in gpus)

    def close(self) -> None:
        self._reader.close()

    @staticmethod
    def open(visible: str | None) -> tuple[GpuEnergy | None, str]:
        """The GPUs' energy counters, or None and why not (NVML absent, a GPU without the counter)."""
        from exporter.readers import ReaderError
        from exporter.readers.nvml import NvmlReader

        reader = NvmlReader()
        try:
            reader.open()
            indices = visible_indices([(d.index, d.uuid) for d in reader.devices()], visible)
            for i in indices:
                reader.energy_joules(i)
        except ReaderError as e:
            reader.close()
            return None, f"no energy counter read ({e})"
        return GpuEnergy(reader, indices), ""
