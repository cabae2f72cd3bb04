"""A week read from kept days (analytics.daycache) against the week read at once."""

from __future__ import annotations

import math

import pytest

from analytics.cost import CostModel
from analytics.report.build import build
from domain.week import WeekData
from tests.support.conservation import assert_conserves

GPU_FIGURES = ("sampled_s", "busy_s", "sm_active_s", "allocated_s", "allocated_idle_s", "energy_j", "stalled_s")
JOB_FIGURES = ("sampled_s", "busy_s", "energy_j", "charged_s", "stalled_s", "nvlink_bytes", "pcie_bytes")


def assert_same_week(a: WeekData, b: WeekData, day: float = 1e-6) -> None:
    """Every GPU's and job row's figures, days and hours, and the report built from them. ``day``:
    the seconds a day's figures may differ by (the rollups read at once shift a day by up to 5
    minutes; read day by day, each day's edges are exact)."""
    assert a.problems == b.problems == ()
    assert set(a.approximations) == set(b.approximations)
    gb = {g.uuid: g for g in b.gpus}
    assert [g.uuid for g in a.gpus] == sorted(gb)
    for g in a.gpus:
        h = gb[g.uuid]
        assert (g.host, g.model, g.gpu, g.cluster, g.busy_measure, g.energy_measure) == (
            h.host,
            h.model,
            h.gpu,
            h.cluster,
            h.busy_measure,
            h.energy_measure,
        )
        for f in GPU_FIGURES:
            x, y = getattr(g, f), getattr(h, f)
            assert (x is None) == (y is None) and (x is None or x == pytest.approx(y, rel=1e-9, abs=1e-6)), (g.uuid, f)
        assert len(g.daily) == len(h.daily)
        for d, e in zip(g.daily, h.daily, strict=True):
            assert d.sampled_s == pytest.approx(e.sampled_s, abs=day) and d.busy_s == pytest.approx(e.busy_s, abs=day)
        assert (g.energy_by_hour is None) == (h.energy_by_hour is None)
        if g.energy_by_hour is not None and h.energy_by_hour is not None:
            assert len(g.energy_by_hour) == len(h.energy_by_hour)
            assert math.fsum(g.energy_by_hour) == pytest.approx(math.fsum(h.energy_by_hour), rel=1e-9)
    jb = {(j.uuid, j.job): j for j in b.jobs}
    assert len(jb) == len(b.jobs) and {(j.uuid, j.job) for j in a.jobs} == jb.keys()
    for j in a.jobs:
        k = jb[j.uuid, j.job]
        assert (j.host, j.cluster, j.account, j.partition, j.qos, j.job.user, j.labels) == (
            k.host,
            k.cluster,
            k.account,
            k.partition,
            k.qos,
            k.job.user,
            k.labels,
        )
        for f in JOB_FIGURES:
            x, y = getattr(j, f), getattr(k, f)
            assert (x is None) == (y is None) and (x is None or x == pytest.approx(y, rel=1e-9, abs=1e-6)), (j.job, f)
    cost = CostModel()
    ra, rb = build(a, cost), build(b, cost)
    assert ra.fleet.total_cost == pytest.approx(rb.fleet.total_cost, rel=1e-9)
    assert ra.fleet.utilization == pytest.approx(rb.fleet.utilization, abs=1e-9)
    assert {(r.group, r.key) for r in ra.rows} == {(r.group, r.key) for r in rb.rows}
    assert_conserves(ra)
