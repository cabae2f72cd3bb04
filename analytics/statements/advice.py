"""The scaling advice: what a job on N GPUs would have cost on fewer, from the benchmarks'
measured scaling efficiency on this fleet (never a guess: no measurement, no advice).

A job's work W takes ``T(n) = W / (n × eff(n) × x1)`` on n GPUs (x1: one GPU's throughput), and
costs ``n × T(n)`` GPU-hours at the same price, so on m GPUs instead of N it costs
``cost(m) / cost(N) = eff(N) / eff(m)``: at 62 % on 8 and 76.5 % on 4, 0.62 / 0.765 = 0.81, about
19 % less. m is N/2 where measured, else the largest measured size under N (1 GPU is 100 %).
"""

from __future__ import annotations

from collections.abc import Mapping

from analytics.report.model import Report

WORTH_SAYING = 0.05  # a saving under 5 % is not advice


def efficiencies(report: Report) -> dict[int, float]:
    """World size -> measured scaling efficiency, from the report's multi-GPU rows (1 GPU: 1.0)."""
    out = {r.world_size: r.efficiency for r in report.multi_gpu if r.efficiency > 0}
    if out:
        out.setdefault(1, 1.0)
    return dict(sorted(out.items()))


def fewer(gpus: int, eff: Mapping[int, float]) -> tuple[int, float] | None:
    """(m, cost(m) / cost(gpus)) for the GPU count to suggest, or None without a measurement at
    ``gpus`` and under it."""
    if gpus < 2 or gpus not in eff:
        return None
    half = gpus // 2
    m = half if half in eff and gpus % 2 == 0 else max((n for n in eff if n < gpus), default=None)
    if m is None or eff[m] <= 0:
        return None
    return m, eff[gpus] / eff[m]


def scaling_advice(gpus: int, eff: Mapping[int, float], many: bool = False) -> str:
    """One sentence for a job (or, ``many``, a group's jobs) on ``gpus`` GPUs; "" when the
    benchmarks did not measure that size or fewer GPUs would save too little to say."""
    found = fewer(gpus, eff)
    if found is None:
        return ""
    m, ratio = found
    saving = 1 - ratio
    jobs = f"{gpus}-GPU jobs" if many else f"{gpus}-GPU job"
    verb = "they" if many else "it"
    ran = f"your {jobs} ran at a measured {100 * eff[gpus]:.0f} % efficiency"
    if saving < WORTH_SAYING:
        return f"{ran}; on {m} GPU{'s' if m > 1 else ''} {verb} would have cost about the same: {gpus} GPUs pay off"
    return f"{ran}; on {m} GPU{'s' if m > 1 else ''} {verb} would have cost about {100 * saving:.0f} % less"
