"""The arithmetic of ``gpuledger scaling``, pure: the ``{steps}`` placeholder, the steady step
time of two runs or of per-step times, speedup, efficiency, cost, the verdict and the fits."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from exporter.benchmarks.results import bus_factor as bus_factor  # the ring all-reduce's 2(n - 1)/n

PLACEHOLDER = "{steps}"
SECONDS_PER_HOUR = 3600.0

Scaling = Literal["weak", "strong"]


def has_placeholder(args: Sequence[str]) -> bool:
    return any(PLACEHOLDER in a for a in args)


def substitute(args: Sequence[str], steps: int) -> list[str]:
    """``args`` with every ``{steps}`` (also inside a word: ``--iters={steps}``) replaced."""
    return [a.replace(PLACEHOLDER, str(steps)) for a in args]


def parse_counts(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]: positive, distinct, in order. ValueError names what is wrong."""
    try:
        counts = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise ValueError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not counts:
        raise ValueError("no numbers given")
    if any(c < 1 for c in counts):
        raise ValueError(f"every number must be at least 1 (got {text})")
    if len(set(counts)) != len(counts):
        raise ValueError(f"a number is repeated ({text})")
    return sorted(counts)


def steady_from_two_runs(steps1: int, seconds1: float, steps2: int, seconds2: float) -> float:
    """The time of one more step: what start-up, warm-up and teardown add cancels out."""
    if steps2 == steps1:
        raise ValueError("the two runs need different step counts")
    return (seconds2 - seconds1) / (steps2 - steps1)


def warmup_dropped(times: Sequence[float], warmup: int) -> list[float]:
    """``times`` without the first ``warmup`` steps, keeping at least half of them."""
    drop = min(warmup, len(times) // 2)
    return list(times[drop:])


def _window(no_sync: object) -> tuple[int, int] | None:
    if isinstance(no_sync, list) and len(no_sync) == 2 and all(isinstance(x, int) and x >= 0 for x in no_sync):
        return no_sync[0], no_sync[1]
    return None


def split_no_sync(times: Sequence[float], no_sync: object) -> tuple[list[float], list[float]] | None:
    """A rank's steady steps with the all-reduce and without it (the step timer's ``no_sync`` window,
    [first step, steps]), or None where it ran none or too few steps around it. Synced: the steps
    after the window but the first (it all-reduces what the window accumulated); unsynced: the
    window's steps but the first (it starts behind a synced step)."""
    w = _window(no_sync)
    if w is None:
        return None
    first, count = w
    synced, unsynced = list(times[first + count + 1 :]), list(times[first + 1 : first + count])
    return (synced, unsynced) if len(synced) >= 2 and unsynced else None


def steady_start(no_sync: object, warmup: int) -> int:
    """The first steady synced step: after the no_sync window and the step after it, else the warm-up."""
    w = _window(no_sync)
    return w[0] + w[1] + 1 if w is not None else warmup


def slowest_median(per_rank: Sequence[Sequence[float]], warmup: int) -> float:
    """Each rank's median step time after the warm-up; the slowest rank's (the others wait for it)."""
    medians = [statistics.median(warmup_dropped(t, warmup)) for t in per_rank if t]
    if not medians:
        raise ValueError("no step times")
    return max(medians)


def speedup(scaling: Scaling, n: int, t1: float, tn: float) -> float:
    """weak (the same per-rank batch): throughput(N) / throughput(1) = N·t1/tN; strong (a fixed
    global batch split over N): t1/tN."""
    return (n * t1 / tn) if scaling == "weak" else (t1 / tn)


def efficiency(n: int, s: float) -> float:
    return s / n


def cost_per_steps(price_per_gpu_hour: float, n: int, step_seconds: float, steps: float = 1000) -> float:
    """What ``steps`` steps cost: the price of N GPUs for that long."""
    return price_per_gpu_hour * n * step_seconds * steps / SECONDS_PER_HOUR


def break_even_hour(price_per_gpu_hour: float, n: int, s: float) -> float | None:
    """What an hour saved must be worth for N GPUs to pay, against one: the extra money over the
    hours saved, ``price × (N − s) / (s − 1)``. None when N GPUs are not faster; 0 when they are
    also not dearer (s ≥ N)."""
    if s <= 1.0:
        return None
    return max(0.0, price_per_gpu_hour * (n - s) / (s - 1.0))


def relative_unit_cost(n: int, s: float) -> float:
    """Cost per unit of work at N GPUs over that at one: N GPUs for 1/s of the time = N/s = 1/efficiency."""
    return n / s


@dataclass(frozen=True)
class Fit:
    law: str  # "Amdahl" (strong) or "Gustafson" (weak)
    serial_fraction: float
    next_n: int
    predicted_speedup: float

    @property
    def predicted_efficiency(self) -> float:
        return self.predicted_speedup / self.next_n


def amdahl_fraction(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares serial fraction f of t(N)/t(1) = f + (1 − f)/N over (N, speedup) with N > 1,
    clipped to [0, 1]; None without such a point."""
    pts = [(1.0 / n, 1.0 / s) for n, s in points if n > 1 and s > 0]
    den = sum((1 - x) ** 2 for x, _ in pts)
    if not pts or den == 0:
        return None
    f = sum((y - x) * (1 - x) for x, y in pts) / den
    return min(1.0, max(0.0, f))


def amdahl_speedup(f: float, n: int) -> float:
    return 1.0 / (f + (1.0 - f) / n)


def gustafson_fraction(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares serial fraction f of the scaled speedup s(N) = N − f·(N − 1), clipped to [0, 1]."""
    pts = [(n - 1.0, n - s) for n, s in points if n > 1]
    den = sum(x * x for x, _ in pts)
    if not pts or den == 0:
        return None
    return min(1.0, max(0.0, sum(x * y for x, y in pts) / den))


def gustafson_speedup(f: float, n: int) -> float:
    return n - f * (n - 1)


def fit(scaling: Scaling, points: Sequence[tuple[int, float]]) -> Fit | None:
    """The efficiency trend and a prediction for the next doubling of the largest N measured."""
    if not points:
        return None
    next_n = 2 * max(n for n, _ in points)
    if scaling == "strong":
        f = amdahl_fraction(points)
        return None if f is None else Fit("Amdahl", f, next_n, amdahl_speedup(f, next_n))
    f = gustafson_fraction(points)
    return None if f is None else Fit("Gustafson", f, next_n, gustafson_speedup(f, next_n))


@dataclass(frozen=True)
class CommPrediction:
    """Weak scaling's communication model: a step at ``n`` is the compute of one rank's batch plus
    the all-reduce of the gradients that the steps do not hide, ``grad_bytes x 2(n − 1)/n / busbw``."""

    n: int
    predicted_speedup: float
    busbw: float  # bytes per second
    source: str  # where the bus bandwidth came from
    nodes: int = 1

    @property
    def predicted_efficiency(self) -> float:
        return self.predicted_speedup / self.n


def comm_speedup(n: int, t1: float, compute: float, grad_bytes: float, busbw: float) -> float:
    """Weak scaling: N ranks do N one-rank batches in ``compute`` plus the exposed all-reduce."""
    return n * t1 / (compute + grad_bytes * bus_factor(n) / busbw)


def exposed_busbw(n: int, grad_bytes: float, exposed_seconds: float) -> float | None:
    """The bus bandwidth the exposed all-reduce at ``n`` amounts to; None where nothing was exposed."""
    return grad_bytes * bus_factor(n) / exposed_seconds if n > 1 and exposed_seconds > 0 else None


def _percent(x: float) -> str:
    return f"{x * 100:.0f} %"


def verdict(
    n: int,
    s: float,
    unit: str,
    price_per_gpu_hour: float,
    currency: str,
    per: str,
    unit_cost_ratio: float | None = None,
) -> str:
    """One sentence for N against one: how much faster, the efficiency, how much more (or less) each
    unit of work costs, and what an hour saved must be worth for it to pay.

    ``unit``: "GPUs" or "ranks"; ``per``: "per sample" or "per unit of work"; ``unit_cost_ratio``:
    the measured cost per sample at N over that at one (default N/s)."""
    ratio = relative_unit_cost(n, s) if unit_cost_ratio is None else unit_cost_ratio
    eff = efficiency(n, s)
    head = f"{n} {unit}: {s:.2f}x {'faster' if s >= 1 else 'as fast (slower)'} ({_percent(eff)} efficiency)"
    if abs(ratio - 1) < 0.005:
        money = f"the same {per}"
    elif ratio > 1:
        money = f"{_percent(ratio - 1)} more {per}"
    else:
        money = f"{_percent(1 - ratio)} less {per}"
    hour = break_even_hour(price_per_gpu_hour, n, s)
    if hour is None:
        tail = "never pays: slower and dearer"
    elif hour == 0:
        tail = "pays outright: faster and no dearer"
    else:
        tail = f"pays if an hour saved is worth more than {hour:,.2f} {currency}"
    return f"{head}, {money}: {tail}"
