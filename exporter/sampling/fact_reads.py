"""The fact table through the lanes: a lane reads its due facts of one GPU in one reader call
(``read``, outside the sampler lock) and folds them in (``fold``, under it).

A fact NVML does not support on a GPU is remembered in ``TrackedGpu.unsupported`` and never asked
again (one log line per GPU); other failures are counted in ``reader_errors_total{call=<fact>}``
and the last value stays. A gauge is kept as read; a counter grows by its increase between two
readings (the first is its baseline; one that went backwards restarts from the new value), so it
reads as "since the exporter started" and the history's minutes add up to it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.facts import Fact
from exporter.readers import FactValue, NotSupported, Reader, ReaderError
from exporter.sampling.gpu_state import ErrorBook, TrackedGpu

log = logging.getLogger(__name__)

Increase = tuple[FactValue, float]
"""A counter's increase between its last two readings, and the reader seconds between them."""


@dataclass(frozen=True, slots=True)
class FactReading:
    t: float  # reader time, just after the read
    facts: tuple[Fact, ...]  # the facts asked
    values: Mapping[str, FactValue]  # those that answered


def read(reader: Reader, gpu: TrackedGpu, facts: Sequence[Fact], errors: ErrorBook) -> FactReading | None:
    """Read ``facts`` of one GPU (those it is not known to lack); None when none is left to ask.
    Raises GpuLost / ReaderUnavailable."""
    asked = tuple(f for f in facts if f.name not in gpu.unsupported)
    if not asked:
        return None
    got = reader.read_facts(gpu.info.index, asked)
    t = reader.now()
    values: dict[str, FactValue] = {}
    lacking: dict[str, list[str]] = {}  # why -> the facts
    for f in asked:
        v = got.get(f.name)
        if isinstance(v, NotSupported):
            gpu.unsupported.add(f.name)
            lacking.setdefault(str(v.args[0]), []).append(f.name)
        elif isinstance(v, ReaderError):
            v.call = v.call or f.name
            errors.count(v)
        elif v is not None:
            values[f.name] = v
    if lacking:
        why = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in lacking.items())
        log.info("gpu %d: not supported here, not asking again: %s", gpu.info.index, why)
    return FactReading(t, asked, values)


def fold(gpu: TrackedGpu, r: FactReading) -> dict[str, Increase]:
    """Fold a reading into ``gpu`` (caller holds the sampler lock); each counter's increase since
    its previous reading, where there was one."""
    increases: dict[str, Increase] = {}
    for f in r.facts:
        v = r.values.get(f.name)
        if v is None:
            continue
        if not f.counter:
            gpu.fact_gauges[f.name] = v
            continue
        prev = gpu.fact_raw.get(f.name)
        gpu.fact_raw[f.name] = (r.t, v)
        inc = _increase(None if prev is None else prev[1], v)
        gpu.counters.facts[f.name] = _add(gpu.counters.facts.get(f.name), inc)
        if prev is not None and r.t > prev[0]:
            increases[f.name] = (inc, r.t - prev[0])
    return increases


def _increase(prev: FactValue | None, now: FactValue) -> FactValue:
    if isinstance(now, Mapping):
        before = prev if isinstance(prev, Mapping) else {}
        return {k: _step(before.get(k), v) for k, v in now.items()}
    return _step(prev if isinstance(prev, float | int) else None, now)


def _step(prev: float | None, now: float) -> float:
    """0 for a baseline, and for a counter that went backwards (it restarts from ``now``)."""
    return 0.0 if prev is None or now < prev else now - prev


def _add(total: FactValue | None, inc: FactValue) -> FactValue:
    """A new value (a per-link total is replaced, never changed in place: snapshots share it)."""
    if isinstance(inc, Mapping):
        t = total if isinstance(total, Mapping) else {}
        return {k: t.get(k, 0.0) + inc.get(k, 0.0) for k in sorted({*t, *inc})}
    return (total if isinstance(total, float | int) else 0.0) + inc
