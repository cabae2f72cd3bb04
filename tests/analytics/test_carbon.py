"""Emissions: energy × PUE × grid intensity (g CO2e/kWh), static per site or host glob or by the
hour; None where no intensity is set or the energy is not measured; jobs share a GPU's emissions
by their energy, the unallocated row has the rest, and the figures add up across GPUs and across
the hours of the week (hypothesis)."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric
from pydantic import ValidationError

from analytics.cost import CarbonRule, CarbonWindow, CostModel
from analytics.metrics import ReportCollector
from analytics.report import text
from analytics.report.build import build
from analytics.report.model import UNALLOCATED, CostRow, Report
from domain.week import GpuWeek, JobWeek, WeekData, iso_week
from tests.support.conservation import assert_conserves
from tests.support.paths import REPO
from tests.support.weeks import HOURS, KWH, HourlyGpu, gpu_week, hourly_gpu, hourly_week, job_week

WEEK = iso_week("2026-W48", "Europe/Berlin")  # Monday 2026-11-23 00:00 local
AFTER = WEEK.end + 3600  # the report is made after the week: every hour is charged


def _report(gpus: tuple[GpuWeek, ...], cost: CostModel, jobs: tuple[JobWeek, ...] = ()) -> Report:
    return build(WeekData(WEEK, "t", gpus, jobs), cost, now=AFTER)


def _rows(r: Report) -> list[CostRow]:
    return [r.fleet, *r.rows]


def _one(r: Report, group: str, key: str) -> CostRow:
    (row,) = [x for x in r.group(group) if x.key == key]
    return row


# --- none is never zero -----------------------------------------------------------------------------
def test_no_intensity_configured_is_none_in_every_row_and_no_series() -> None:
    r = _report(
        (gpu_week(energy_kwh=70.0),), CostModel(), (job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=30.0),)
    )
    assert r.fleet.energy_kwh == pytest.approx(70.0)
    assert all(row.co2e_kg is None for row in _rows(r))
    assert dict(text.headline(r))["Emissions (energy × PUE × grid intensity)"] == text.DASH
    assert not _samples(r, CostModel(), "gpuledger_report_co2e_kg")


def test_a_gpu_without_energy_has_none_and_the_fleet_the_known_part() -> None:
    cost = CostModel(pue=1.5, grid_intensity_g_per_kwh=400)
    r = _report((gpu_week("GPU-a", "n1", energy_kwh=None), gpu_week("GPU-b", "n2", energy_kwh=10.0)), cost)
    assert _one(r, "host", "n1").co2e_kg is None
    assert _one(r, "host", "n2").co2e_kg == pytest.approx(10 * 1.5 * 400 / 1000)  # 6 kg
    assert r.fleet.co2e_kg == pytest.approx(6.0)
    assert_conserves(r)


def test_zero_energy_measured_is_zero_emissions() -> None:
    r = _report((gpu_week(energy_kwh=0.0),), CostModel(grid_intensity_g_per_kwh=400))
    assert r.fleet.co2e_kg == 0.0


# --- static, per site and per host glob -------------------------------------------------------------
def test_static_intensity_is_energy_times_pue_times_intensity() -> None:
    r = _report((gpu_week(energy_kwh=70.0),), CostModel(pue=1.35, grid_intensity_g_per_kwh=380))
    assert r.fleet.co2e_kg == pytest.approx(70 * 1.35 * 380 / 1000)  # 35.91 kg
    assert _one(r, "gpu", "n1/0 GPU-a").co2e_kg == pytest.approx(35.91)


def test_host_globs_override_the_site_first_match_wins() -> None:
    cost = CostModel(
        pue=1.2,
        grid_intensity_g_per_kwh=400,
        carbon_rules=[
            CarbonRule(match_host="nordic-*", grid_intensity_g_per_kwh=30),
            CarbonRule(match_host="nordic-9", grid_intensity_g_per_kwh=999),  # never reached
        ],
    )
    gpus = (gpu_week("GPU-a", "nordic-9", energy_kwh=100.0), gpu_week("GPU-b", "coal-1", energy_kwh=100.0))
    r = _report(gpus, cost)
    assert _one(r, "host", "nordic-9").co2e_kg == pytest.approx(100 * 1.2 * 30 / 1000)
    assert _one(r, "host", "coal-1").co2e_kg == pytest.approx(100 * 1.2 * 400 / 1000)
    assert r.fleet.co2e_kg == pytest.approx(3.6 + 48.0)


def test_a_host_rule_alone_leaves_other_hosts_unknown() -> None:
    cost = CostModel(carbon_rules=[CarbonRule(match_host="eu-*", grid_intensity_g_per_kwh=100)])
    r = _report((gpu_week("GPU-a", "eu-1", energy_kwh=10.0), gpu_week("GPU-b", "us-1", energy_kwh=10.0)), cost)
    assert _one(r, "host", "us-1").co2e_kg is None
    assert r.fleet.co2e_kg == pytest.approx(10 * 1.3 * 100 / 1000)


# --- by the hour --------------------------------------------------------------------------------------
SOLAR = [CarbonWindow(start_hour=10, end_hour=16, grid_intensity_g_per_kwh=100)]  # every day, local time


def test_hourly_windows_apply_hour_by_hour_from_hourly_energy() -> None:
    # 1 kWh in each hour 00-09 and 16-23 of every day, 3 kWh in each solar hour 10-15
    by_hour = tuple((3.0 if 10 <= h % 24 < 16 else 1.0) * KWH for h in range(168))
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500, carbon_windows=SOLAR)
    r = _report((gpu_week(energy_kwh=sum(by_hour) / KWH, by_hour=by_hour),), cost)
    want = 7 * (6 * 3 * 100 + 18 * 1 * 500) / 1000  # 7 days x (1.8 kg + 9 kg)
    assert r.fleet.co2e_kg == pytest.approx(want)  # 75.6 kg
    mean_kg = sum(by_hour) / KWH * (6 * 100 + 18 * 500) / 24 / 1000
    assert r.fleet.co2e_kg != pytest.approx(mean_kg)  # not the week's mean intensity
    assert not any("grid intensity" in a for a in r.approximations)


def test_hourly_windows_without_hourly_energy_use_the_weeks_mean_and_say_so() -> None:
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500, carbon_windows=SOLAR)
    r = _report((gpu_week(energy_kwh=168.0, by_hour=None),), cost)
    assert r.fleet.co2e_kg == pytest.approx(168 * (6 * 100 + 18 * 500) / 24 / 1000)  # 67.2 kg
    assert any("hourly carbon intensity's mean" in a and "emissions of 1 GPUs" in a for a in r.approximations), (
        r.approximations
    )


def test_windows_are_in_the_reports_time_zone_and_weekdays_count() -> None:
    # weekends only: Saturday and Sunday are days 5 and 6 of the ISO week
    weekend = [CarbonWindow(start_hour=0, end_hour=24, weekdays=[5, 6], grid_intensity_g_per_kwh=0)]
    by_hour = tuple(KWH for _ in range(168))
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=1000, carbon_windows=weekend)
    r = _report((gpu_week(energy_kwh=168.0, by_hour=by_hour),), cost)
    assert r.fleet.co2e_kg == pytest.approx(5 * 24 * 1.0)  # the weekdays' 120 kWh at 1 kg/kWh


def test_the_sources_read_hourly_energy_when_an_intensity_varies() -> None:
    assert not CostModel(grid_intensity_g_per_kwh=300).hourly_energy
    assert CostModel(grid_intensity_g_per_kwh=300, carbon_windows=SOLAR).hourly_energy
    rule = CarbonRule(match_host="x*", grid_intensity_g_per_kwh=1, carbon_windows=SOLAR)
    assert CostModel(carbon_rules=[rule]).hourly_energy


# --- configuration ------------------------------------------------------------------------------------
def test_windows_without_a_fallback_must_cover_the_week() -> None:
    with pytest.raises(ValidationError, match="126 hours of the week uncovered"):
        CostModel(carbon_windows=SOLAR)  # 7 days x 18 hours outside 10-16
    with pytest.raises(ValidationError, match="needs grid_intensity_g_per_kwh or carbon_windows"):
        CarbonRule(match_host="a*")
    with pytest.raises(ValidationError, match="end_hour must be after start_hour"):
        CarbonWindow(start_hour=22, end_hour=6, grid_intensity_g_per_kwh=1)
    with pytest.raises(ValidationError):
        CostModel(grid_intensity_g_per_kwh=-1)
    day_and_night = [
        CarbonWindow(start_hour=0, end_hour=12, grid_intensity_g_per_kwh=200),
        CarbonWindow(start_hour=12, end_hour=24, grid_intensity_g_per_kwh=600),
    ]
    c = CostModel(pue=1.0, carbon_windows=day_and_night)  # every hour covered: no fallback needed
    r = _report((gpu_week(energy_kwh=168.0, by_hour=tuple(KWH for _ in range(168))),), c)
    assert r.fleet.co2e_kg == pytest.approx(168 * 400 / 1000)


# --- chargeback -----------------------------------------------------------------------------------------
def test_jobs_share_the_gpus_emissions_by_energy_and_the_rest_is_unallocated() -> None:
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500)
    jobs = (
        job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=30.0),
        job_week("2", "bob", held_h=84.0, busy_h=42.0, energy_kwh=10.0),
    )
    r = _report((gpu_week(energy_kwh=70.0),), cost, jobs)
    assert r.fleet.co2e_kg == pytest.approx(35.0)
    assert _one(r, "job", "1").co2e_kg == pytest.approx(15.0)
    assert _one(r, "user", "bob").co2e_kg == pytest.approx(5.0)
    assert r.group(UNALLOCATED)[0].co2e_kg == pytest.approx(15.0)
    assert_conserves(r)


def test_jobs_share_hourly_emissions_at_the_gpus_own_mix() -> None:
    by_hour = tuple((3.0 if 10 <= h % 24 < 16 else 1.0) * KWH for h in range(168))
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500, carbon_windows=SOLAR)
    gpu_kwh = sum(by_hour) / KWH
    r = _report(
        (gpu_week(energy_kwh=gpu_kwh, by_hour=by_hour),),
        cost,
        (job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=gpu_kwh / 4),),
    )
    assert r.fleet.co2e_kg is not None
    assert _one(r, "job", "1").co2e_kg == pytest.approx(r.fleet.co2e_kg / 4)
    assert_conserves(r)


def test_jobs_whose_energy_overshoots_the_gpu_are_scaled_to_it() -> None:
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=1000)
    jobs = (
        job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=60.0),
        job_week("2", "bob", held_h=84.0, busy_h=42.0, energy_kwh=60.0),
    )  # 120 kWh read against the GPU's 80
    r = _report((gpu_week(energy_kwh=80.0),), cost, jobs)
    assert _one(r, "job", "1").co2e_kg == pytest.approx(40.0)
    assert r.group(UNALLOCATED)[0].co2e_kg == pytest.approx(0.0, abs=1e-9)
    assert_conserves(r)


def test_conservation_notices_a_missing_share() -> None:
    """The check itself can fail: a report whose unallocated row lost its emissions does not conserve."""
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500)
    r = _report((gpu_week(energy_kwh=70.0),), cost, (job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=30.0),))
    broken = [x if x.group != UNALLOCATED else dataclasses.replace(x, co2e_kg=0.0) for x in r.rows]
    with pytest.raises(AssertionError, match="co2e_kg"):
        assert_conserves(dataclasses.replace(r, rows=broken))


# --- text and metrics -----------------------------------------------------------------------------------
def test_every_cost_table_has_kg_co2e_beside_kwh_and_a_headline() -> None:
    cost = CostModel(pue=1.35, grid_intensity_g_per_kwh=380)
    r = _report((gpu_week(energy_kwh=70.0),), cost, (job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=30.0),))
    assert dict(text.headline(r))["Emissions (energy × PUE × grid intensity)"] == "35.9 kg CO2e"
    cost_tables = [t for t in text.tables(r) if "Energy kWh" in t.headers and t.slug != "daily"]
    assert {t.slug for t in cost_tables} >= {"hosts", "models", "users", "jobs", "gpus"}
    for t in cost_tables:
        i = t.headers.index("Energy kWh")
        assert t.headers[i + 1] == "kg CO2e", t.slug
        assert all(row[i + 1] != "" for row in t.rows)
    users = next(t for t in cost_tables if t.slug == "users")
    col = users.headers.index("kg CO2e")
    assert [row[col] for row in users.rows] == ["15.4", "20.5"]  # ann 30 kWh, the unallocated 40 kWh


def _samples(r: Report, cost: CostModel, name: str) -> dict[tuple[str, ...], float]:
    metrics: list[Metric] = list(ReportCollector(lambda: {"week": r}, cost, "UTC", clock=lambda: WEEK.start).collect())
    (m,) = [x for x in metrics if x.name == name]
    return {tuple(s.labels.values()): s.value for s in m.samples}


def test_the_co2e_gauge_has_one_series_per_row_beside_energy() -> None:
    cost = CostModel(pue=1.0, grid_intensity_g_per_kwh=500)
    r = _report((gpu_week(energy_kwh=70.0),), cost, (job_week("1", "ann", held_h=84.0, busy_h=42.0, energy_kwh=30.0),))
    got = _samples(r, cost, "gpuledger_report_co2e_kg")
    assert got[("week", "fleet", "fleet")] == pytest.approx(35.0)
    assert got[("week", "user", "ann")] == pytest.approx(15.0)
    assert got[("week", UNALLOCATED, UNALLOCATED)] == pytest.approx(20.0)
    energy = _samples(r, cost, "gpuledger_report_energy_kwh")
    assert got.keys() == energy.keys()


# --- properties (hypothesis) ----------------------------------------------------------------------------
window = st.builds(
    CarbonWindow,
    start_hour=st.integers(0, 11),
    end_hour=st.integers(12, 24),
    grid_intensity_g_per_kwh=st.floats(0, 900),
    weekdays=st.lists(st.integers(0, 6), min_size=1, max_size=7, unique=True),
)
carbon_models = st.builds(
    CostModel,
    pue=st.floats(1, 2.5),
    grid_intensity_g_per_kwh=st.floats(0, 900),
    carbon_windows=st.lists(window, max_size=2),
    carbon_rules=st.lists(
        st.builds(
            CarbonRule,
            match_host=st.sampled_from(["a", "b*"]),
            grid_intensity_g_per_kwh=st.floats(0, 900),
            carbon_windows=st.lists(window, max_size=2),
        ),
        max_size=2,
    ),
)
Gpus = list[HourlyGpu]


def _co2e(gpus: Gpus, cost: CostModel, first: int = 0, last: int = HOURS) -> float:
    kg = build(hourly_week(gpus, first, last), cost).fleet.co2e_kg
    assert kg is not None and kg >= 0
    return kg


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "60")), deadline=None)
@given(st.lists(hourly_gpu, min_size=1, max_size=6), carbon_models)
def test_emissions_add_up_across_gpus(gpus: Gpus, cost: CostModel) -> None:
    whole = _co2e(gpus, cost)
    assert math.isclose(whole, sum(_co2e([g], cost) for g in gpus), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "60")), deadline=None)
@given(st.lists(hourly_gpu, min_size=1, max_size=4), carbon_models, st.integers(1, HOURS - 1))
def test_emissions_of_a_week_are_those_of_its_parts(gpus: Gpus, cost: CostModel, split: int) -> None:
    whole = _co2e(gpus, cost)
    parts = _co2e(gpus, cost, 0, split) + _co2e(gpus, cost, split, HOURS)
    assert math.isclose(whole, parts, rel_tol=1e-9, abs_tol=1e-9)


# --- docs/cost-model.md -------------------------------------------------------------------------------
def _doc_rows(doc: str) -> dict[str, str]:
    return {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in doc.splitlines()
        if line.startswith("| ") and line.count("|") == 4
    }


def test_the_carbon_worked_examples_are_what_the_code_computes() -> None:
    doc = (REPO / "docs" / "cost-model.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```toml\n")[1:]]
    static = CostModel(**tomllib.loads(blocks[0])["cost"])
    (hourly_toml,) = [b for b in blocks if "carbon_windows" in b]
    hourly = CostModel(**tomllib.loads(hourly_toml)["cost"])
    rows = _doc_rows(doc)
    kwh = 70.0
    local_hours = range(168)  # 2026-W48 in Europe/Berlin: no clock change, hour h is h % 24 local

    def kg(cost: CostModel, by_hour: tuple[float, ...] | None) -> float:
        g = gpu_week("GPU-x", "node-a", busy_h=100.8, sm_active_h=67.2, energy_kwh=kwh, by_hour=by_hour)
        co2e = build(WeekData(WEEK, "embedded", (g,)), cost, now=AFTER).fleet.co2e_kg
        assert co2e is not None
        return co2e

    def spread(hours: list[int]) -> tuple[float, ...]:
        return tuple(kwh * KWH / len(hours) if h in hours else 0.0 for h in local_hours)

    solar = [h for h in local_hours if 10 <= h % 24 < 16]
    even = spread(list(local_hours))
    solar_part = tuple(j if h in solar else 0.0 for h, j in zip(local_hours, even, strict=True))
    other_part = tuple(j - s for j, s in zip(even, solar_part, strict=True))
    shown = {  # with an hourly table the hourly energy is what counts: each part alone
        "emissions": f"{kg(static, None):.2f} kg CO2e",
        "solar hours' emissions": f"{kg(hourly, solar_part):.2f} kg CO2e",
        "other hours' emissions": f"{kg(hourly, other_part):.2f} kg CO2e",
        "emissions, hour by hour": f"{kg(hourly, even):.2f} kg CO2e",
    }
    for step, value in shown.items():
        assert rows.get(step) == value, (step, rows.get(step), value)
    assert f"= {kg(hourly, spread(solar)):.2f} kg CO2e" in doc  # the same energy in the solar hours
