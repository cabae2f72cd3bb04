"""A sampler over the fake reader, stepped by hand."""

from __future__ import annotations

from exporter.readers.fake import FakeReader
from exporter.sampling import slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions


def make_sampler(reader: FakeReader, **kw: object) -> Sampler:
    """A sampler whose slow lane reads everything on every slow_tick()."""
    opts = dict(interval=1.0, hostname="testhost", cadence=slowlane.Cadence(energy=0, health=0, pcie=1e-6))
    opts.update(kw)
    return Sampler(reader, SamplerOptions(**opts))  # type: ignore[arg-type]


def step(sampler: Sampler, reader: FakeReader, seconds: float = 1.0, ticks: int = 1) -> None:
    for _ in range(ticks):
        reader.advance(seconds)
        sampler.tick()
        sampler.slow_tick()
    sampler.tick()  # publish what the slow lane folded in (zero-length interval: no accrual)
