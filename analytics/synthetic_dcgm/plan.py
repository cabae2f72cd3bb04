"""Timelines of holders on a device-instance: holders come and go with idle gaps between, inside
periods when the device can be held (not across a driver upgrade or a MIG reconfiguration, when
the node is drained)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from analytics.synthetic_dcgm.model import Activity, Holder, Span

KINDS: tuple[Activity, ...] = ("train", "train", "train", "train", "stalled", "held-idle", "serve", "serve")
STALL_MIN = 3600.0  # a stalled holder stalls an hour or more


def timeline(
    rnd: random.Random,
    periods: Sequence[tuple[float, float]],
    holder: Callable[[Activity, float], Holder],
    *,
    kinds: Sequence[Activity] = KINDS,
    idle: tuple[float, float] = (600, 3 * 3600),
    length: tuple[float, float] = (1800, 9 * 3600),
    first_idle: bool = True,
) -> list[Span]:
    """Spans of holders in each [from, to) period: an idle gap, a holder, an idle gap, ...
    ``holder(kind, length)`` makes each holder."""
    out: list[Span] = []
    for a, b in periods:
        t = a + (rnd.uniform(*idle) if first_idle else 0.0)
        while t < b:
            kind = rnd.choice(kinds)
            n = rnd.uniform(*length)
            if kind == "stalled":
                n = max(n, STALL_MIN + rnd.uniform(0, 3600))
                if t + n > b:
                    kind = "train"
            n = min(n, b - t)
            out.append(Span(t, t + n, holder(kind, n), kind))
            t += n + rnd.uniform(*idle)
    return out


def split(start: float, end: float, *cuts: tuple[float, float]) -> list[tuple[float, float]]:
    """[start, end) less each [from, to) cut, in order."""
    out, t = [], start
    for a, b in sorted(cuts):
        if a > t:
            out.append((t, a))
        t = max(t, b)
    if t < end:
        out.append((t, end))
    return out
