"""What the benchmarks hand the history: one record per benchmark and round (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark of one round: result ok, failed, timeout, skipped_busy or skipped_no_gpu;
    data is the result as JSON or the error text."""

    finished: float  # wall clock, epoch seconds
    bench: str
    result: str
    duration: float | None
    backend: str
    world_size: int
    data: str | None
