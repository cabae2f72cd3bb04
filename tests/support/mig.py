"""A sampler over fake GPUs in MIG mode (the H100 80GB's profiles, ``exporter.readers.fake.H100_MIG``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exporter.readers import GpmActivity, Process
from exporter.readers.fake import FakeReader
from exporter.sampling.sampler import Sampler
from exporter.snapshot import Snapshot
from tests.support.sampling import make_sampler, step

BUSY = GpmActivity(sm=0.75, tensor=0.5, dram=0.25, sm_occupancy=0.5)
LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb")  # 6 of the 7 compute slices: 1/7 unallocated


def mig_reader(n: int = 2, mig: Mapping[int, Sequence[str]] | None = None) -> FakeReader:
    """``n`` fake GPUs, GPU 0 in MIG mode with ``LAYOUT`` (or ``mig``), its 1g instance busy with process 42."""
    r = FakeReader(n, mig=mig if mig is not None else {0: LAYOUT})
    one_g = (r.gpus[0].mig or [])[-1]
    one_g.processes, one_g.memory_used_bytes, one_g.gpm = [Process(42, 1 << 30)], 1 << 30, BUSY
    return r


def mig_state(seconds: int = 8) -> tuple[FakeReader, Sampler, Snapshot]:
    """``mig_reader()`` sampled for ``seconds`` one-second rounds after the baseline."""
    r = mig_reader()
    s = make_sampler(r)
    s._wall = lambda: 1_796_000_000.0
    s.tick()
    step(s, r, 1.0, ticks=seconds)
    return r, s, s.snapshot
