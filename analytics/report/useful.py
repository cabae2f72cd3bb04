"""Which measure defines a useful GPU-hour, GPU by GPU, and how a row says which it used.

``[cost] useful = "sm_active"`` asks for SM-active hours, which only some GPUs measure (Hopper
GPM, DCGM profiling fields). Per GPU (``useful_fallback = "per_gpu"``, the default), a GPU with an
SM-active figure counts its SM-active hours and one without counts busy hours less the stalled
ones; a job counts what its GPU counts where the source has the job's SM-active time too, else
busy time. Every row then says which it used: ``sm_active``, ``busy``, or ``mixed`` with the share
of its sampled GPU-hours on each. ``useful_fallback = "busy"`` asks for one measure: where any GPU
(or any job on an SM-measured GPU) of the window lacks SM activity, every GPU counts busy time, and
the report says so.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from analytics.cost import CostModel
from domain.jobtable import JobTable
from domain.week import WeekData

SM, BUSY, MIXED = "sm_active", "busy", "mixed"


def useful_seconds(busy: float, sm: float | None, stalled: float | None, use_sm: bool) -> float:
    """SM-active seconds where that is the measure and measured (a stall's SMs are quiet by
    definition, so it adds almost nothing there); else busy seconds less the stalled ones."""
    if use_sm and sm is not None:
        return sm
    return max(0.0, busy - (stalled or 0.0))


def measure(sm_s: float, busy_s: float, sm_n: float = 0.0, busy_n: float = 0.0) -> tuple[str, float]:
    """A row's measure and its SM-active share, from the sampled seconds counted each way (or,
    where the row has no sampled time, from how many of its parts counted each way): 1.0 is all
    SM-active, 0.0 all busy (also a row with no parts at all: no SM activity was counted)."""
    total, parts = sm_s + busy_s, sm_n + busy_n
    share = sm_s / total if total > 0 else sm_n / parts if parts > 0 else 0.0
    share = min(1.0, max(0.0, share))
    return (SM if share >= 1.0 else BUSY if share <= 0.0 else MIXED), share


def combined(rows: Iterable[tuple[float | None, float]]) -> tuple[str, float]:
    """The measure of rows summed, from each row's (SM-active share, sampled GPU-hours); a row
    without a share (a report from before it) counts as busy."""
    sm = busy = sm_n = busy_n = 0.0
    for share, hours in rows:
        s = share or 0.0
        sm, busy, sm_n, busy_n = sm + s * hours, busy + (1 - s) * hours, sm_n + s, busy_n + 1 - s
    return measure(sm, busy, sm_n, busy_n)


def _percent(share: float) -> str:
    p = round(100 * share)
    return "< 1" if p == 0 and share > 0 else "> 99" if p == 100 and share < 1 else str(p)


def label(measure_name: str, sm_share: float | None) -> str:
    """``sm_active``, ``busy``, or ``mixed: 62 % sm_active, 38 % busy``; "" where not recorded."""
    if measure_name != MIXED or sm_share is None:
        return measure_name
    sm, busy = _percent(sm_share), _percent(1 - sm_share)
    return f"{MIXED}: {sm} % {SM}, {busy} % {BUSY}"


def sm_gpus(data: WeekData, cost: CostModel) -> tuple[frozenset[str], list[str]]:
    """The GPUs whose useful hours are SM-active ones, and the notes that say why the others are
    not (none where every GPU counts what ``cost.useful`` asks)."""
    if cost.useful != SM:
        return frozenset(), []
    gpus = list(data.gpus)
    measured = frozenset(g.uuid for g in gpus if g.sm_active_s is not None)
    lacking = len(gpus) - len(measured)
    table = JobTable.of(data.jobs)
    lacking_sm = np.isnan(table.numbers["sm_active_s"]).tolist()
    jobs = sum(1 for u, no_sm in zip(table.texts["uuid"], lacking_sm, strict=True) if no_sm and u in measured)
    why = []
    if lacking:
        why.append(f"{lacking} of {len(gpus)} GPUs have no SM-activity figure")
    if jobs:
        why.append(f"{jobs} job rows on GPUs with one have none from this source")
    if not why:
        return measured, []
    if cost.useful_fallback == BUSY:
        return frozenset(), [
            'useful = "sm_active" asked, busy time counted for every GPU ([cost] useful_fallback = "busy"): '
            + "; ".join(why)
        ]
    notes = []
    if lacking:
        notes.append(
            f"{why[0]}: their useful hours are busy time, so rows with both kinds of GPU are mixed "
            '(each row says its share); [cost] useful_fallback = "busy" counts busy time everywhere'
        )
    if jobs:
        notes.append(
            f"{jobs} job rows on GPUs measured by SM activity have no SM-activity figure from this source: "
            "their useful hours are busy time (capped at their GPU's SM-active hours), and what no job was "
            "charged on those GPUs is the GPU's SM-active hours less theirs"
        )
    return measured, notes
