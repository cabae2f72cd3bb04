"""Chargeback conserves cost: jobs sharing a GPU pay together at most what the GPU costs, what no
job paid is the unallocated row, and users + unallocated = jobs + unallocated = hosts = fleet in
every cost column, whatever the holders and however their figures overlap (hypothesis)."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.model import UNALLOCATED, Report
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, iso_week
from tests.support.conservation import COST_COLUMNS, assert_conserves
from tests.support.weeks import gpu_week, job_week

WEEK = iso_week("2026-W48")
H = 3600.0
WEEK_S = 168 * H
AFTER = WEEK.end + 3600  # the report is made after the week: every hour is charged


def _report(gpus: tuple[GpuWeek, ...], jobs: tuple[JobWeek, ...], cost: CostModel | None = None) -> Report:
    return build(WeekData(WEEK, "t", gpus, jobs), cost or CostModel(), now=AFTER)


def _row(r: Report, group: str, key: str) -> float:
    (row,) = [x for x in r.group(group) if x.key == key]
    return row.hardware_cost


def test_two_jobs_sharing_a_gpu_all_week_pay_its_cost_once() -> None:
    gpu = gpu_week(busy_h=120, allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0)
    # each held the GPU all week; the exporter's shares charged each half of every round
    r = _report(
        (gpu,),
        (
            job_week("1", "ann", held_h=168, busy_h=60, charged_h=84),
            job_week("2", "bob", held_h=168, busy_h=60, charged_h=84),
        ),
    )
    assert _row(r, "user", "ann") == pytest.approx(r.fleet.hardware_cost / 2)
    assert _row(r, "user", "bob") == pytest.approx(r.fleet.hardware_cost / 2)
    (rest,) = r.group(UNALLOCATED)
    assert rest.hardware_cost == pytest.approx(0.0, abs=1e-9)
    users = {x.key: x for x in r.group("user")}
    assert users["ann"].allocated_gpu_hours == pytest.approx(168)  # held: the whole week, shared or not
    assert users["ann"].available_gpu_hours == pytest.approx(84)  # charged: its share
    assert_conserves(r)


def test_without_shares_overlapping_held_time_is_scaled_to_the_gpu() -> None:
    """An older exporter (no charged counter): both held it all week; together they pay the GPU once."""
    r = _report(
        (gpu_week(allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),),
        (job_week("1", "ann", held_h=168, busy_h=50), job_week("2", "bob", held_h=168, busy_h=50)),
    )
    hw = sum(x.hardware_cost for x in r.group("job"))
    assert hw == pytest.approx(r.fleet.hardware_cost)  # was twice the GPU's cost
    assert _row(r, "job", "1") == pytest.approx(_row(r, "job", "2"))
    assert_conserves(r)


def test_what_no_job_held_is_the_unallocated_row() -> None:
    r = _report(
        (gpu_week(busy_h=30, allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),),
        (job_week("1", "ann", held_h=42, busy_h=30, charged_h=42),),
    )  # a quarter of the week
    (rest,) = r.group(UNALLOCATED)
    assert rest.available_gpu_hours == pytest.approx(126)
    assert rest.hardware_cost == pytest.approx(r.fleet.hardware_cost * 0.75)
    assert rest.busy_gpu_hours == pytest.approx(0.0, abs=1e-9)
    assert rest.idle_cost == pytest.approx(r.fleet.idle_cost - _idle(r, "1"))
    assert_conserves(r)


def _idle(r: Report, job: str) -> float:
    (row,) = [x for x in r.group("job") if x.key == job]
    return row.idle_cost


def test_a_gpu_without_jobs_is_all_unallocated() -> None:
    r = _report(
        (
            gpu_week("GPU-a", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),
            gpu_week("GPU-b", "n2", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),
        ),
        (job_week("1", "ann", held_h=168, busy_h=100, charged_h=168, energy_kwh=80),),
    )
    (rest,) = r.group(UNALLOCATED)
    assert rest.gpus == 1 and rest.total_cost == pytest.approx(r.fleet.total_cost / 2, rel=1e-9)
    assert_conserves(r)


def test_stalled_time_is_not_useful() -> None:
    gpu = gpu_week(busy_h=100, stalled_h=20, allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0)
    jobs = (job_week("hung", "ann", held_h=168, busy_h=100, charged_h=168, stalled_h=20),)
    r = _report((gpu,), jobs)
    assert r.fleet.stalled_gpu_hours == pytest.approx(20)
    assert r.fleet.useful_gpu_hours == pytest.approx(80)  # busy less stalled
    rate = r.prices[0].per_gpu_hour
    assert r.fleet.idle_cost == pytest.approx(rate * (168 - 80))  # the stalled hours cost as idle ones
    (row,) = r.stalled_jobs
    assert (row.job, row.user, row.gpus) == ("hung", "ann", 1)
    assert row.stalled_gpu_hours == pytest.approx(20) and row.stalled_cost == pytest.approx(rate * 20)
    assert_conserves(r)


def test_no_stalled_figure_without_a_measure() -> None:
    r = _report(
        (gpu_week(busy_h=100, allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),),
        (job_week("1", "ann", held_h=168, busy_h=100, charged_h=168),),
    )
    assert r.fleet.stalled_gpu_hours is None and r.stalled_jobs == []
    assert r.fleet.useful_gpu_hours == pytest.approx(100)


# --- properties -------------------------------------------------------------------------------

fraction = st.floats(0, 1)
holder = st.tuples(
    st.sampled_from(["ann", "bob", "cy", ""]),  # "" -> (unknown)
    fraction,  # held share of the week
    fraction,  # busy share of held
    st.one_of(st.none(), fraction),  # charged share of held (None: the source has no shares)
    fraction,  # energy share of the GPU's
    st.one_of(st.none(), fraction),  # stalled share of busy
    st.one_of(st.none(), fraction),  # SM-active share of held
)
gpu_case = st.tuples(
    fraction,  # busy share of the week
    st.one_of(st.none(), fraction),  # stalled share of busy
    st.one_of(st.none(), fraction),  # SM-active share of the week
    st.lists(holder, max_size=5),
)


@settings(max_examples=int(os.environ.get("GPULEDGER_HYPOTHESIS_EXAMPLES", "150")), deadline=None)
@given(st.lists(gpu_case, min_size=1, max_size=4), st.sampled_from(["busy", "sm_active"]))
def test_every_grouping_adds_up_to_the_fleet(cases: list[tuple], useful: str) -> None:  # type: ignore[type-arg]
    gpus, jobs = [], []
    for n, (busy, g_stalled, g_sm, holders) in enumerate(cases):
        uuid = f"GPU-{n}"
        energy = 100 * 3.6e6
        gpus.append(
            GpuWeek(
                uuid,
                f"n{n % 2}",
                "NVIDIA H200",
                str(n),
                WEEK_S,
                busy * WEEK_S,
                None if g_sm is None else g_sm * WEEK_S,
                WEEK_S,
                0.0,
                energy,
                stalled_s=None if g_stalled is None else g_stalled * busy * WEEK_S,
            )
        )
        for k, (user, held, jbusy, charged, e, stalled, sm) in enumerate(holders):
            held_s = held * WEEK_S
            jobs.append(
                JobWeek(
                    uuid,
                    f"n{n % 2}",
                    JobKey(f"{n}.{k}", user),
                    held_s,
                    jbusy * held_s,
                    e * energy,  # the holders' energies may add up past the GPU's: the builder caps them
                    sm_active_s=None if sm is None else sm * held_s,
                    charged_s=None if charged is None else charged * held_s,
                    stalled_s=None if stalled is None else stalled * jbusy * held_s,
                )
            )
    r = _report(tuple(gpus), tuple(jobs), CostModel(useful=useful))
    assert_conserves(r)
    for gpu in r.group("gpu"):  # every GPU's jobs pay at most what it costs, column by column
        uuid = gpu.key.rsplit(" ", 1)[1]
        mine = [j for j in jobs if j.uuid == uuid]
        alone = _report(tuple(g for g in gpus if g.uuid == uuid), tuple(mine), CostModel(useful=useful))
        for column in COST_COLUMNS:
            paid = sum(getattr(x, column) for x in alone.group("job"))
            assert paid <= getattr(gpu, column) + 1e-6, column
    for row in r.rows:
        for column in COST_COLUMNS:
            assert math.isfinite(getattr(row, column)) and getattr(row, column) >= -1e-6, (row.group, column)


def test_jobs_on_a_gpu_without_figures_are_left_out_and_named() -> None:
    """Per-job series on a GPU whose own series are missing: their hours are not the fleet's."""
    r = _report(
        (gpu_week(allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0),),
        (
            job_week("1", "ann", held_h=168, busy_h=100, charged_h=168),
            job_week("ghost", "bob", held_h=50, busy_h=10, uuid="GPU-z"),
        ),
    )
    assert {x.key for x in r.group("job")} == {"1"}
    assert any("1 job rows on 1 GPUs without GPU figures" in a and "GPU-z" in a for a in r.approximations)
    assert_conserves(r)
