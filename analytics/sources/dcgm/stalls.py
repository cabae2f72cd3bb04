"""Stalled time from dcgm-exporter's series, by the exporter's own rule (``[exporter] stalled_*``,
``exporter.sampling.stalls``): a scrape looks stalled when the device is busy while its SMs,
tensor cores and DRAM are near still; a run of such scrapes counts only once it has lasted
``min_seconds``, and then all of it. A missed scrape breaks a run (what happened in it is not
known). Only where ``SM_ACTIVE``, ``PIPE_TENSOR_ACTIVE`` and ``DRAM_ACTIVE`` are exported.

The stalled scrapes come from range queries at the scrape interval that return only the scrapes
that look stalled (few, in a working fleet), over the window plus ``min_seconds`` on each side so a
run crossing its edges is judged whole; only the scrapes inside the window count. Each holder
listed at a counted scrape is counted 1/k of it, as its other figures are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from analytics.sources.dcgm.labels import Device, device_of
from analytics.sources.promapi import RangeSeries
from domain.jobs import JobKey
from domain.week import Window
from exporter.sampling.stalls import StallRun, step

MAX_STEPS = 10_000  # points per series of one range query (Prometheus refuses more than 11,000)
SPANS_PER_CHUNK = 8  # scrape-level queries around stalled blocks, per MAX_STEPS scrapes


def chunks(w: Window, interval: float, lead: float, now: float) -> list[tuple[float, float]]:
    """[start, end] of each range query: the window and ``lead`` on each side (up to ``now``), on a
    grid of the scrape interval through the window's start, so each step stands for the scrape
    in ``(t - interval, t]`` and a step inside the window for a scrape inside it."""
    k = math.ceil(lead / interval)
    start = w.start - k * interval
    end = min(w.end + k * interval, max(w.end, now))
    out = []
    while start <= end:
        last = min(end, start + (MAX_STEPS - 1) * interval)
        out.append((start, last))
        start = last + interval
    return out


def block(interval: float, min_seconds: float) -> float | None:
    """The coarse search's step: any run of ``min_seconds`` holds a whole block of it (half the
    run, in whole scrape intervals); None where the rule is too short to search coarsely."""
    n = math.floor(min_seconds / 2 / interval)
    return n * interval if n >= 2 else None


def candidates(
    blocks: Sequence[RangeSeries], size: float, interval: float, grid: Sequence[tuple[float, float]], lead: float
) -> list[tuple[float, float, dict[str, set[str]]]]:
    """Where to look scrape by scrape: around each stalled block (a run through it reaches at most
    ``lead`` past it; every block of a longer run is found), the spans joined where they touch,
    within the spans of ``grid`` (the scrape-level queries' limits), at most ``SPANS_PER_CHUNK`` of
    them in each (the closest joined first); each with its GPUs, by the label naming them."""
    found: list[tuple[float, float, str, str]] = []  # (from, to, label, uuid)
    for s in blocks:
        label = "UUID" if "UUID" in s.labels else "uuid"
        for t, _ in s.points:
            found.append((t - size - lead - interval, t + lead + interval, label, s.labels.get(label, "")))
    out = []
    for start, end in grid:
        spans: list[list[Any]] = []  # [from, to, {label: uuids}], in time order, apart
        for a, b, label, u in sorted(x for x in found if x[0] <= end and x[1] >= start):
            if spans and a <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], b)
            else:
                spans.append([a, b, {}])
            spans[-1][2].setdefault(label, set()).add(u)
        while len(spans) > SPANS_PER_CHUNK:
            k = min(range(len(spans) - 1), key=lambda k: spans[k + 1][0] - spans[k][1])
            later = spans.pop(k + 1)
            spans[k][1] = later[1]
            for label, uuids in later[2].items():
                spans[k][2].setdefault(label, set()).update(uuids)
        for a, b, uuids in spans:  # on the grid: each step stands for one scrape
            a = max(start, start + math.floor((a - start) / interval) * interval)
            b = min(end, start + math.ceil((b - start) / interval) * interval)
            out.append((a, b, uuids))
    return out


def counted(points: Iterable[tuple[float, float]], interval: float, min_seconds: float) -> list[tuple[float, float]]:
    """The (time, busy fraction) of the stalled scrapes that count: those of runs of consecutive
    scrapes lasting ``min_seconds`` (the exporter's ``stalls.step``, fed one scrape at a time)."""
    out: list[tuple[float, float]] = []
    run = StallRun()
    before: float | None = None
    for t, v in sorted(points):
        if before is not None and t - before > 1.5 * interval:
            step(run, stalled=False, dt=interval, amounts={}, min_seconds=min_seconds)
        got = step(run, stalled=True, dt=interval, amounts={t: v}, min_seconds=min_seconds)
        out.extend((cast(float, x), y) for x, y in got.items())
        before = t
    return out


def apply(
    stalled: Sequence[RangeSeries],
    copies: Sequence[RangeSeries],
    w: Window,
    interval: float,
    min_seconds: float,
    holder_of: Callable[[Mapping[str, str]], JobKey | None],
    add: Callable[[Device, float, Mapping[JobKey, float]], None],
) -> None:
    """Counts each device's stalled busy seconds inside ``w`` and its holders' 1/k shares."""
    listed: dict[tuple[Device, float], list[JobKey | None]] = defaultdict(list)
    for s in copies:
        dev, who = device_of(s.labels), holder_of(s.labels)
        for t, _ in s.points:
            listed[dev, t].append(who)
    points: dict[Device, list[tuple[float, float]]] = defaultdict(list)
    for s in stalled:
        points[device_of(s.labels)].extend(s.points)
    for dev, ps in sorted(points.items()):
        seconds = 0.0
        holders: dict[JobKey, float] = defaultdict(float)
        for t, v in counted(ps, interval, min_seconds):
            if not w.start < t <= w.end:
                continue
            seconds += v * interval
            at = listed.get((dev, t), [])
            for h in at:
                if h is not None:
                    holders[h] += v * interval / len(at)
        if seconds:
            add(dev, seconds, holders)
