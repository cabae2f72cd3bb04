"""Cost rows added up: a table's tail summed into one row, and a table cut to its top rows.

Shared by the report's pages (``analytics.report.text``: the ``(N more)`` row) and the analytics'
``/metrics`` (``analytics.metrics``: each grouping's ``(other)`` row)."""

from __future__ import annotations

import heapq
from operator import attrgetter

from analytics.report.model import UNALLOCATED, CostRow
from analytics.report.useful import combined

COLUMNS = (
    *("gpus", "available_gpu_hours", "sampled_gpu_hours", "busy_gpu_hours", "sm_active_gpu_hours"),
    *("useful_gpu_hours", "allocated_gpu_hours", "allocated_idle_gpu_hours", "energy_kwh", "energy_cost"),
    *("hardware_cost", "total_cost", "idle_cost", "stalled_gpu_hours", "co2e_kg", "busy_measure", "energy_measure"),
)  # the columns ``summed`` reads


def summed(rows: list[CostRow], key: str, min_useful_h: float = 0.0) -> CostRow:
    """One row adding ``rows`` up (of their group): hours, energy and money summed, the ratios
    recomputed from the sums (GPUs summed: a GPU two of the rows share counts twice); no cost per
    useful GPU-hour under ``min_useful_h`` useful hours, as any row."""

    # column by column, in C: the tail of a 100,000-job table
    columns = dict(zip(COLUMNS, zip(*map(attrgetter(*COLUMNS), rows), strict=True), strict=True))

    def add(name: str) -> float:
        return float(sum(filter(None, columns[name])))  # None and 0 left out: the same sum

    def known(name: str) -> float | None:
        col = columns[name]
        return None if col.count(None) == len(col) else add(name)

    def same(name: str) -> str:
        values = set(columns[name])
        return values.pop() if len(values) == 1 else "mixed"

    sampled, busy, useful, total = (
        add("sampled_gpu_hours"),
        add("busy_gpu_hours"),
        add("useful_gpu_hours"),
        add("total_cost"),
    )
    sm, available = known("sm_active_gpu_hours"), add("available_gpu_hours")
    measure, sm_share = combined((x.useful_sm_share, x.sampled_gpu_hours) for x in rows)
    return CostRow(
        group=rows[0].group,
        key=key,
        gpus=int(add("gpus")),
        available_gpu_hours=available,
        sampled_gpu_hours=sampled,
        busy_gpu_hours=busy,
        sm_active_gpu_hours=sm,
        useful_gpu_hours=useful,
        utilization=busy / sampled if sampled > 0 else None,
        sm_activity=None if sm is None or sampled <= 0 else sm / sampled,
        allocated_gpu_hours=known("allocated_gpu_hours"),
        allocated_idle_gpu_hours=known("allocated_idle_gpu_hours"),
        energy_kwh=known("energy_kwh"),
        energy_cost=add("energy_cost"),
        hardware_cost=add("hardware_cost"),
        total_cost=total,
        cost_per_useful_gpu_hour=total / useful if useful > 0 and useful >= min_useful_h else None,
        idle_cost=add("idle_cost"),
        coverage=sampled / available if available > 0 else 0.0,
        stalled_gpu_hours=known("stalled_gpu_hours"),
        co2e_kg=known("co2e_kg"),
        useful_measure=measure,
        useful_sm_share=sm_share,
        busy_measure=same("busy_measure"),
        energy_measure=same("energy_measure"),
    )


def top(rows: list[CostRow], n: int, more: str = "({} more)", min_useful_h: float = 0.0) -> list[CostRow]:
    """The ``n`` dearest rows (by total cost, ties by key), then the rest added up into one row keyed
    ``more`` (formatted with their count), then the unallocated row where the table has it; the
    rows as they are when there are no more than ``n``. Every column adds up as the whole table's."""
    ranked = [x for x in rows if x.group != UNALLOCATED]
    tail = [x for x in rows if x.group == UNALLOCATED]
    if len(ranked) <= n:
        return rows
    # the n dearest without sorting the rest (a 100,000-job table): as sorted(...)[:n] would give them
    best = heapq.nsmallest(n, range(len(ranked)), key=lambda i: (-ranked[i].total_cost, ranked[i].key))
    chosen = set(best)
    rest = [x for i, x in enumerate(ranked) if i not in chosen]
    return [*(ranked[i] for i in best), summed(rest, more.format(f"{len(rest):,}"), min_useful_h), *tail]
