"""Properties of the cost arithmetic (hypothesis): every figure is non-negative, fleet figures are
the sum of the hosts' figures, and a week costs what its parts cost (split at any hour)."""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.cost import CostModel, PriceRule, TariffWindow
from analytics.report.build import build
from analytics.report.model import CostRow
from tests.support.weeks import HOURS, HourlyGpu, hourly_gpu, hourly_week

ADDITIVE = (
    "available_gpu_hours",
    "sampled_gpu_hours",
    "busy_gpu_hours",
    "useful_gpu_hours",
    "energy_kwh",
    "energy_cost",
    "hardware_cost",
    "total_cost",
    "idle_cost",
)

rules = st.lists(
    st.one_of(
        st.builds(
            PriceRule,
            match_model=st.sampled_from([None, "H200"]),
            purchase_price=st.floats(1e3, 1e5),
            depreciation_years=st.floats(1, 8),
            yearly_operations=st.floats(0, 1e4),
            cloud_reference_per_gpu_hour=st.none() | st.floats(0.5, 10),
        ),
        st.builds(
            PriceRule,
            match_host=st.sampled_from(["a", "b*"]),
            kind=st.just("cloud"),
            price_per_gpu_hour=st.floats(0.1, 10),
            energy_included=st.booleans(),
        ),
    ),
    max_size=3,
)
tariff = st.lists(
    st.builds(TariffWindow, start_hour=st.integers(0, 11), end_hour=st.integers(12, 24), price_per_kwh=st.floats(0, 1)),
    max_size=2,
)
models = st.builds(
    CostModel,
    energy_price_per_kwh=st.floats(0, 1),
    pue=st.floats(1, 2.5),
    tariff=tariff,
    useful=st.sampled_from(["busy", "sm_active"]),
    rules=rules,
)


def _figures(row: CostRow) -> dict[str, float]:
    return {f: getattr(row, f) or 0.0 for f in ADDITIVE}


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "60")), deadline=None)
@given(st.lists(hourly_gpu, min_size=1, max_size=6), models)
def test_every_figure_is_non_negative(gpus: list[HourlyGpu], cost: CostModel) -> None:
    r = build(hourly_week(gpus), cost)
    for row in [r.fleet, *r.rows]:
        for name, value in _figures(row).items():
            assert value >= 0, (row.group, row.key, name)
        assert row.idle_cost <= row.total_cost + 1e-9
        assert row.cost_per_useful_gpu_hour is None or row.cost_per_useful_gpu_hour >= 0
        assert row.utilization is None or 0 <= row.utilization <= 1 + 1e-12


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "60")), deadline=None)
@given(st.lists(hourly_gpu, min_size=1, max_size=6), models)
def test_the_fleet_is_the_sum_of_its_hosts(gpus: list[HourlyGpu], cost: CostModel) -> None:
    whole = _figures(build(hourly_week(gpus), cost).fleet)
    parts = [_figures(build(hourly_week([g for g in gpus if g[0] == h]), cost).fleet) for h in {g[0] for g in gpus}]
    for name, value in whole.items():
        assert math.isclose(value, sum(p[name] for p in parts), rel_tol=1e-9, abs_tol=1e-6), name


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "60")), deadline=None)
@given(st.lists(hourly_gpu, min_size=1, max_size=4), models, st.integers(1, HOURS - 1))
def test_a_week_costs_what_its_parts_cost(gpus: list[HourlyGpu], cost: CostModel, split: int) -> None:
    whole = _figures(build(hourly_week(gpus), cost).fleet)
    a = _figures(build(hourly_week(gpus, 0, split), cost).fleet)
    b = _figures(build(hourly_week(gpus, split, HOURS), cost).fleet)
    for name, value in whole.items():
        assert math.isclose(value, a[name] + b[name], rel_tol=1e-9, abs_tol=1e-6), name
