"""The clock tests anchor data to, and a monotonic clock that moves only when told."""

from __future__ import annotations

import os
import time

# Synthetic data is built at this fixed epoch (Saturday 2026-11-21 00:00 UTC) and shifted to where a
# test needs it, so what falls in any window is the same whatever the hour the suite runs at.
ANCHOR = 1_795_219_200.0


def clock_now() -> float:
    """The "now" that tests anchor windows and shifted data to: ``GPULEDGER_TEST_NOW`` (epoch
    seconds) when set, so scripts/test-any-hour can run the time-dependent tests at many hours of a
    week, else the wall clock. Only for what runs in-process or takes a clock: a real Prometheus
    or a daemon in a child process reads the wall clock whatever this says."""
    fake = os.environ.get("GPULEDGER_TEST_NOW")
    return float(fake) if fake else time.time()


class FakeMonotonic:
    """``time`` for modules under test whose ``time.monotonic()`` must move only when the test
    says (backoffs, grace periods, staleness): no dependency on how fast the machine runs."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)
