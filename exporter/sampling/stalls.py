"""Stalled time: busy time that is not work.

``utilization.gpu`` only says a kernel was resident. A rank spinning in a hung NCCL collective,
or any spin-wait, reads 100 % while a few SMs spin and neither tensor cores nor DRAM move. A
round is *stalled* when utilisation is at least ``util_above`` while GPM SM activity is under
``sm_below`` (an NCCL collective spins on at most its channels' blocks: 32 of an H200's 132 SMs
is 24 %), tensor activity under ``tensor_below`` and DRAM bandwidth under ``dram_below``.

A stall counts only once the condition has held without a break for ``min_seconds``; then the
whole run counts, from its start. What counts is the round's busy seconds (busy × interval), so
``busy - stalled`` is exactly the busy time that was not stalled. Each holding job is counted
its share of it. Only where GPM is read: without it nothing is counted (the counters stay None).
The rule and the run's state live here; ``fastlane.fold_stall`` applies them to a GPU's round.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from exporter.readers import GpmActivity

GPU = "gpu"
"""The key of the GPU's own amount among the jobs' in a run."""


@dataclass(frozen=True, slots=True)
class StallRule:
    util_above: float = 0.90
    sm_below: float = 0.25
    tensor_below: float = 0.05
    dram_below: float = 0.05
    min_seconds: float = 300.0

    def holds(self, busy: float, gpm: GpmActivity) -> bool:
        """Whether one round looks stalled: busy, yet SMs, tensor cores and DRAM all near still."""
        return (
            busy >= self.util_above
            and gpm.sm < self.sm_below
            and gpm.tensor < self.tensor_below
            and gpm.dram < self.dram_below
        )


class StallSettings(Protocol):
    """The settings that say the rule (``[exporter] stalled_*``)."""

    stalled_util_above: float
    stalled_sm_below: float
    stalled_tensor_below: float
    stalled_dram_below: float
    stalled_min_seconds: float


def rule_of(s: StallSettings) -> StallRule:
    """The rule as the settings say it: one rule for the exporter's counters and for every source."""
    return StallRule(
        s.stalled_util_above, s.stalled_sm_below, s.stalled_tensor_below, s.stalled_dram_below, s.stalled_min_seconds
    )


@dataclass(slots=True)
class StallRun:
    """The current run of stalled rounds: how long it has lasted, and what it has accrued while
    shorter than the minimum (counted all at once when it qualifies, dropped when it breaks)."""

    seconds: float = 0.0
    pending: dict[Hashable, float] = field(default_factory=dict)

    def reset(self) -> None:
        self.seconds = 0.0
        self.pending.clear()


def step(
    run: StallRun, *, stalled: bool, dt: float, amounts: Mapping[Hashable, float], min_seconds: float
) -> dict[Hashable, float]:
    """Advance ``run`` by one round of ``dt`` seconds; what to count now, by key. A round that is
    not stalled breaks the run (its pending amounts are dropped); a run that reaches
    ``min_seconds`` counts its pending amounts plus this round's, and each stalled round after."""
    if not stalled:
        run.reset()
        return {}
    run.seconds += dt
    for k, v in amounts.items():
        run.pending[k] = run.pending.get(k, 0.0) + v
    if run.seconds < min_seconds:
        return {}
    out, run.pending = run.pending, {}
    return out
