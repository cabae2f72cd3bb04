"""A node's scrapes from its physical model: when Prometheus scraped it, what each device-instance
read, and the device's power and energy counter.

- scrape times: ``offset + k x interval`` on the epoch's grid (as Prometheus spreads targets),
  in ms; scrapes in a gap, and the two after an exporter change (restart or upgrade), are lost;
- power: idle plus each instance's activity weighted by its share (its slices under MIG); the
  reported reading differs from the interval's true mean power by up to +-2 %;
- energy (mJ, integer, monotonic): grows each interval by the *true* mean power x interval, so
  apportioning it by the reported power is close but not exact; a reset (driver reload) restarts
  it from 0. It grows through lost scrapes too: the device kept drawing power.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from analytics.synthetic_dcgm.activity import Blips, Load, combine, load
from analytics.synthetic_dcgm.model import DRAM, GR, SM, TENSOR, UTIL, Gpu, Instance, Node, Scrape, Span

MODELS = {  # model -> (idle W, board power W)
    "NVIDIA H100 80GB HBM3": (60.0, 700.0),
    "NVIDIA A10": (18.0, 150.0),
}
NOISE = 0.02  # reported power vs the interval's true mean


def scrape_times(node: Node, start: float, end: float, interval: float) -> Iterator[float]:
    """Every time Prometheus scraped (or tried to scrape) the node in [start, end)."""
    k = math.ceil((start - node.offset) / interval)
    while (t := round(node.offset + k * interval, 3)) < end:
        yield t
        k += 1


def lost(node: Node, t: float, interval: float) -> bool:
    """A scrape that failed: in a gap, or one of the two after an exporter change."""
    if any(a <= t < b for a, b in node.gaps):
        return True
    return any(e.since <= t < e.since + 2 * interval for e in node.exporters[1:])


def _holding(spans: tuple[Span, ...], t: float) -> list[Span]:
    return [s for s in spans if s.start <= t < s.end]


def _ratio(v: float) -> float:
    return round(min(1.0, max(0.0, v)), 6)  # dcgm-exporter prints doubles with %f


def simulate(node: Node, start: float, end: float, interval: float, rnd: random.Random) -> dict[str, list[Scrape]]:
    """uuid -> its device-instances' scrapes, in time order (instances by GI id at a time)."""
    out: dict[str, list[Scrape]] = {g.uuid: [] for g in node.gpus}
    energy = {g.uuid: rnd.uniform(1e9, 5e10) for g in node.gpus}  # mJ since the driver loaded
    resets = {(uuid, t) for uuid, t in node.resets}
    blips = Blips({})
    previous: float | None = None
    for t in scrape_times(node, start, end, interval):
        step = interval if previous is None else t - previous
        previous = t
        failed = lost(node, t, interval)
        exporter = node.exporter(t)
        for g in node.gpus:
            for uuid, at in resets:
                if uuid == g.uuid and t - step < at <= t:
                    energy[uuid] = 0.0
            idle, board = MODELS[g.model]
            rows: list[tuple[Instance, list[Span], Load]] = []
            watts = 0.0
            for inst in g.instances(t):
                spans = _holding(node.holders.get((g.uuid, inst.gi), ()), t)
                loads = [load(s.kind, rnd, blips.step((inst, s.holder), s.kind, rnd)) for s in spans]
                total = combine(loads)
                watts += inst.share * total.watts * board / 700
                rows.append((inst, spans, total))
            true_power = idle + rnd.uniform(-2.0, 2.0) + watts
            energy[g.uuid] += true_power * step * 1000
            if failed:
                continue
            reported = round(true_power * (1 + rnd.uniform(-NOISE, NOISE)), 3)
            for inst, spans, x in rows:
                fields = node.fields_of(g, inst)
                out[g.uuid].append(
                    Scrape(
                        t=t,
                        instance=inst,
                        holders=tuple(s.holder for s in spans),
                        exporter=exporter,
                        util=x.util if UTIL in fields else None,
                        gr=_ratio(x.gr) if GR in fields else None,
                        sm=_ratio(x.sm) if SM in fields else None,
                        tensor=_ratio(x.tensor) if TENSOR in fields else None,
                        dram=_ratio(x.dram) if DRAM in fields else None,
                        power=reported,
                        energy_mj=math.floor(energy[g.uuid]),
                    )
                )
    return out


def gpu_of(node: Node, uuid: str) -> Gpu:
    return next(g for g in node.gpus if g.uuid == uuid)
