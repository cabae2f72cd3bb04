"""What a device-instance does at a scrape, from what holds it: utilisation, profiling ratios and
the power it draws above idle.

Kinds (what a holder does): ``train`` (busy, real work; now and then a few scrapes of a short
stall, a data-loader wait, shorter than any stall rule's minimum), ``stalled`` (utilisation >= 95 %
while SM < 0.15, tensor < 0.02 and DRAM < 0.03: a hang or a copy loop, an hour or more),
``held-idle`` (held, all activity 0), ``serve`` (bursty inference); nothing holding it: idle, all 0.
Several holders of one device (time-slicing, two jobs listed on one GPU) add up, capped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from analytics.synthetic_dcgm.model import Activity

BLIP_CHANCE = 0.01  # per scrape of a training holder: a short stall begins
BLIP_SCRAPES = (1, 5)  # its length: at most 5 scrapes (150 s at 30 s), under the rule's 300 s


@dataclass(frozen=True, slots=True)
class Load:
    """One scrape of a device-instance: ratios relative to it, and watts above idle at full GPU."""

    util: int  # %
    gr: float
    sm: float
    tensor: float
    dram: float
    watts: float

    @staticmethod
    def idle() -> Load:
        return Load(0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _stall(rnd: random.Random) -> Load:
    u = rnd.randint(95, 100)
    return Load(u, rnd.uniform(0.95, 1.0), rnd.uniform(0.02, 0.15), rnd.uniform(0.0, 0.02), rnd.uniform(0.0, 0.03), 120)


def load(kind: Activity, rnd: random.Random, blip: bool = False) -> Load:
    """One holder's load (``blip``: a training holder's short stall)."""
    if kind == "held-idle":
        return Load(0, 0.0, 0.0, 0.0, 0.0, rnd.uniform(25, 35))
    if kind == "stalled" or (kind == "train" and blip):
        return _stall(rnd)
    if kind == "train":
        u = rnd.randint(86, 100)
        gr = u / 100 * rnd.uniform(0.92, 1.0)
        return Load(
            u,
            gr,
            rnd.uniform(0.45, 0.8),
            rnd.uniform(0.2, 0.6),
            rnd.uniform(0.2, 0.5),
            320 + 3 * (u - 86) + rnd.uniform(-20, 20),
        )
    u = rnd.randint(8, 70)  # serving
    sm = u / 100 * rnd.uniform(0.3, 0.6)
    return Load(u, u / 100 * rnd.uniform(0.85, 1.0), sm, sm * 0.5, rnd.uniform(0.05, 0.2), 60 + 3 * u)


def combine(loads: list[Load]) -> Load:
    """Several holders on one device-instance: their activity adds up, capped at the device's."""
    if not loads:
        return Load.idle()
    if len(loads) == 1:
        return loads[0]
    return Load(
        min(100, sum(x.util for x in loads)),
        min(1.0, sum(x.gr for x in loads)),
        min(1.0, sum(x.sm for x in loads)),
        min(1.0, sum(x.tensor for x in loads)),
        min(1.0, sum(x.dram for x in loads)),
        min(640.0, sum(x.watts for x in loads)),
    )


@dataclass
class Blips:
    """Per device-instance and holder: scrapes left in a training holder's short stall."""

    left: dict[tuple[object, object], int]

    def step(self, key: tuple[object, object], kind: Activity, rnd: random.Random) -> bool:
        if kind != "train":
            return False
        n = self.left.get(key, 0)
        if n == 0 and rnd.random() < BLIP_CHANCE:
            n = rnd.randint(*BLIP_SCRAPES)
        self.left[key] = max(0, n - 1)
        return n > 0
