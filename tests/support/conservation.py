"""The conservation rule, checked on any report: every grouping adds up to the fleet."""

from __future__ import annotations

import pytest

from analytics.report.model import UNALLOCATED, CostRow, Report

COST_COLUMNS = ("hardware_cost", "energy_cost", "idle_cost", "total_cost")
NONE_ABLE = ("co2e_kg",)  # None: not known (no grid intensity, no energy); a known figure conserves too


def total(rows: list[CostRow], column: str) -> float:
    return float(sum(getattr(r, column) or 0.0 for r in rows))


def assert_conserves(report: Report, groups: tuple[str, ...] = ("user", "job"), abs_: float = 1e-6) -> None:
    """Hosts = models = GPUs = fleet; each of ``groups`` + unallocated = fleet (pass
    "namespace" too where every job has one), in every cost column and in the charged
    GPU-hours; the unallocated row is never negative."""
    fleet = report.fleet
    (rest,) = report.group(UNALLOCATED)
    for column in (*COST_COLUMNS, "available_gpu_hours", "busy_gpu_hours", "useful_gpu_hours"):
        want = getattr(fleet, column)
        for group in ("host", "model", "gpu"):
            assert total(report.group(group), column) == pytest.approx(want, rel=1e-9, abs=abs_), (group, column)
        assert getattr(rest, column) >= -abs_, column
        for group in groups:
            got = total(report.group(group), column) + getattr(rest, column)
            assert got == pytest.approx(want, rel=1e-9, abs=abs_), (group, column)
    for column in NONE_ABLE:  # a known fleet figure is the sum of its parts; unknown stays unknown
        want = getattr(fleet, column)
        if want is None:
            for group in ("host", "model", "gpu", *groups):
                assert all(getattr(r, column) is None for r in report.group(group)), (group, column)
            assert getattr(rest, column) is None, column
            continue
        for group in ("host", "model", "gpu"):
            assert total(report.group(group), column) == pytest.approx(want, rel=1e-9, abs=abs_), (group, column)
        assert (getattr(rest, column) or 0.0) >= -abs_, column
        for group in groups:
            got = total(report.group(group), column) + (getattr(rest, column) or 0.0)
            assert got == pytest.approx(want, rel=1e-9, abs=abs_), (group, column)
