"""The report builder's judgements: benchmark drift, week-over-week deltas, unpriced GPUs, cloud
prices, the time-of-day tariff, and users and jobs charged for what they held."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytics.cost import CostModel, PriceRule, TariffWindow
from analytics.report.build import build
from analytics.report.model import BenchRow
from domain.jobs import JobKey
from domain.week import BenchRun, BenchWeek, FailureWeek, JobWeek, QueueWeek, Runs, WeekData, iso_week
from tests.support.weeks import gpu_week

WEEK = iso_week("2026-W48")
HOUR = 3600.0


GPU = gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=50.0)  # held 100 h, half busy


def test_benchmark_drops_over_ten_percent_are_flagged() -> None:
    now = BenchWeek(busbw={2: 80e9, 8: 150e9}, speedup={8: 6.9}, efficiency={8: 6.9 / 8})
    before = BenchWeek(busbw={2: 84e9, 8: 170e9}, speedup={8: 7.0}, efficiency={8: 7.0 / 8})
    r = build(
        WeekData(WEEK, "t", (GPU,), bench=now),
        CostModel(),
        previous=WeekData(WEEK.previous(), "t", (GPU,), bench=before),
    )
    rows = {(b.metric, b.world_size): b for b in r.benchmarks}
    big = rows[("allreduce_busbw_bytes_per_second", 8)]
    assert big.change == pytest.approx(150 / 170 - 1) and big.dropped  # -11.8 %
    small = rows[("allreduce_busbw_bytes_per_second", 2)]
    assert small.change == pytest.approx(80 / 84 - 1) and not small.dropped  # -4.8 %
    assert not rows[("train_speedup", 8)].dropped


DAY = 86400.0


def _nightly(values: list[float]) -> BenchWeek:
    """One all-reduce run a night at 04:05, Monday first."""
    runs = {8: tuple(BenchRun(WEEK.start + d * DAY + 4 * 3600 + 300, v) for d, v in enumerate(values))}
    return BenchWeek.of_runs(runs, {}, {}, {}, "")


def _busbw(now: BenchWeek) -> BenchRow:
    before = BenchWeek(busbw={8: 170e9})  # last week's median
    r = build(
        WeekData(WEEK, "t", (GPU,), bench=now),
        CostModel(),
        previous=WeekData(WEEK.previous(), "t", (GPU,), bench=before),
    )
    (row,) = [b for b in r.benchmarks if b.metric == "allreduce_busbw_bytes_per_second"]
    return row


def test_a_mid_week_drop_is_flagged_though_the_last_run_is_fine() -> None:
    row = _busbw(_nightly([171e9, 169e9, 140e9, 170e9, 172e9, 168e9, 171e9]))  # Wednesday dropped
    assert row.runs == 7 and row.value == pytest.approx(170e9)  # the median: the figure barely moves
    assert row.change == pytest.approx(0.0) and row.dropped
    assert row.worst == pytest.approx(140e9) and row.worst_change == pytest.approx(140 / 170 - 1)
    assert row.worst_date == "2026-11-25" and row.worst_at == WEEK.start + 2 * DAY + 4 * 3600 + 300


def test_runs_all_within_ten_percent_are_not_flagged() -> None:
    row = _busbw(_nightly([171e9, 160e9, 155e9, 170e9, 175e9, 168e9, 154e9]))  # worst -9.4 %
    assert row.runs == 7 and row.value == pytest.approx(168e9) and not row.dropped
    assert row.worst == pytest.approx(154e9) and row.worst_date == "2026-11-29"


def test_the_night_is_named_in_the_report_time_zone() -> None:
    tz = iso_week("2026-W48", "America/Los_Angeles")
    runs: Runs = {8: (BenchRun(tz.start + DAY + 20 * 3600, 100e9), BenchRun(tz.start + 3 * DAY + 3600, 170e9))}
    r = build(
        WeekData(tz, "t", (GPU,), bench=BenchWeek.of_runs(runs, {}, {}, {}, "")),
        CostModel(),
        previous=WeekData(tz.previous(), "t", (GPU,), bench=BenchWeek(busbw={8: 170e9})),
    )
    (row,) = r.benchmarks
    assert row.dropped and row.worst_date == "2026-11-24"  # Tuesday 20:00 Pacific, already Wednesday in UTC
    assert row.value == pytest.approx(135e9)  # the median of two runs


def test_week_over_week_deltas() -> None:
    queue = (QueueWeek("gpu", "exact", 10, 60.0, 30.0, 600.0, 900.0, False, 1.0),)
    r = build(
        WeekData(
            WEEK, "t", (gpu_week(busy_h=84, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=50.0),), queue=queue
        ),
        CostModel(),
        previous=WeekData(
            WEEK.previous(),
            "t",
            (gpu_week(busy_h=42, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=50.0),),
            queue=queue,
        ),
    )
    d = {x.figure: x for x in r.deltas}
    assert d["utilisation"].value == pytest.approx(0.5) and d["utilisation"].change == pytest.approx(1.0)
    assert d["idle cost"].change is not None and d["idle cost"].change < 0  # more useful hours, less idle
    assert d["worst queue-wait p95 (s)"].change == 0.0
    first = build(WeekData(WEEK, "t", (GPU,)), CostModel())
    assert all(x.previous is None and x.change is None for x in first.deltas)


def test_a_gpu_no_rule_prices_makes_the_report_incomplete() -> None:
    cost = CostModel(rules=[PriceRule(match_model="A100", purchase_price=10000)])
    r = build(WeekData(WEEK, "t", (GPU, replace(GPU, uuid="GPU-b", model="NVIDIA A100 80GB"))), cost)
    assert not r.complete and r.incomplete_reasons == ["no price for NVIDIA H200 on n1"]
    assert [(p.model, p.gpus) for p in r.prices] == [("NVIDIA A100 80GB", 1)] and not r.example_prices


def test_cloud_prices_per_node_hour_with_energy_included() -> None:
    cost = CostModel(
        rules=[PriceRule(match_host="cloud-*", kind="cloud", price_per_node_hour=32.0, energy_included=True)]
    )
    r = build(WeekData(WEEK, "t", (replace(GPU, host="cloud-7"),)), cost)
    assert r.fleet.hardware_cost == pytest.approx(168 * 32.0 / 8) and r.fleet.energy_cost == 0.0
    assert r.fleet.idle_cost == pytest.approx((168 - 84) * 4.0)
    assert r.rent_vs_buy == []  # rent vs buy is for owned GPUs


def test_a_tariff_charges_each_hour_its_price() -> None:
    # 1 kWh in every hour; weekdays 08-20 cost 0.40, the rest 0.10 (2026-W48 in UTC)
    hours = tuple([3.6e6] * 168)
    day = TariffWindow(start_hour=8, end_hour=20, weekdays=[0, 1, 2, 3, 4], price_per_kwh=0.40)
    cost = CostModel(energy_price_per_kwh=0.10, pue=1.0, tariff=[day])
    r = build(
        WeekData(
            WEEK, "t", (gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=168, by_hour=hours),)
        ),
        cost,
    )
    assert r.fleet.energy_cost == pytest.approx(5 * 12 * 0.40 + (168 - 60) * 0.10)


def test_a_tariff_without_hourly_energy_prices_at_its_mean_and_says_so() -> None:
    """dcgm-exporter's series (or hourly energy not asked for) give a week's energy but not its
    hours: the tariff still replaces the flat price, at its mean over the charged hours, with a
    note; the flat price it replaces never applies."""
    day = TariffWindow(start_hour=8, end_hour=20, weekdays=[0, 1, 2, 3, 4], price_per_kwh=0.40)
    cost = CostModel(energy_price_per_kwh=0.10, pue=1.0, tariff=[day])
    r = build(
        WeekData(
            WEEK,
            "t",
            (
                gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=168),
                gpu_week("GPU-b", busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=100),
            ),
        ),
        cost,
        now=WEEK.end,
    )
    mean = (5 * 12 * 0.40 + (168 - 60) * 0.10) / 168
    assert r.fleet.energy_cost == pytest.approx(268 * mean)
    note = "energy cost of 2 GPUs at the tariff's mean over the charged hours"
    assert any(note in a for a in r.approximations), r.approximations
    hourly = build(
        WeekData(
            WEEK,
            "t",
            (
                gpu_week(
                    busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=168, by_hour=tuple([3.6e6] * 168)
                ),
            ),
        ),
        cost,
        now=WEEK.end,
    )
    assert not any("tariff" in a for a in hourly.approximations)  # hour by hour: exact, no note
    flat = build(
        WeekData(WEEK, "t", (gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=168),)),
        CostModel(energy_price_per_kwh=0.1, pue=1.0),
    )
    assert flat.fleet.energy_cost == pytest.approx(16.8) and not any("tariff" in a for a in flat.approximations)
    # a window charged only in part (a fresh install, 24 h from Monday 00:00): the mean of those hours
    first_day = build(
        WeekData(
            WEEK,
            "t",
            (gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=24),),
            history_start=WEEK.start,
        ),
        cost,
        now=WEEK.start + 24 * HOUR,
    )
    assert first_day.fleet.energy_cost == pytest.approx(24 * (12 * 0.40 + 12 * 0.10) / 24)


def test_users_and_jobs_pay_for_the_hours_they_held() -> None:
    rule = PriceRule(purchase_price=8760 * 4, depreciation_years=4)  # 1.00 per hour
    g = gpu_week(busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=100)
    jobs = (
        JobWeek("GPU-a", "n1", JobKey("42", "alice"), 10 * HOUR, 6 * HOUR, 20 * 3.6e6),
        JobWeek("GPU-a", "n1", JobKey("43", "bob"), 5 * HOUR, 5 * HOUR, 10 * 3.6e6),
    )
    r = build(WeekData(WEEK, "t", (g,), jobs=jobs), CostModel(pue=1.0, energy_price_per_kwh=0.5, rules=[rule]))
    alice = next(x for x in r.group("user") if x.key == "alice")
    assert alice.hardware_cost == pytest.approx(10.0) and alice.energy_cost == pytest.approx(20 * 0.5)
    assert alice.idle_cost == pytest.approx(4.0)  # held 10 h, busy 6 h
    assert [x.key for x in r.group("job")] == ["42", "43"]
    assert sum(x.total_cost for x in r.group("user")) < r.fleet.total_cost  # the rest of the week nobody held it


def test_the_worst_idle_holder_leads_the_idle_table_whatever_its_total_cost() -> None:
    """25 busy jobs cost more than the idle holder, so it is not among the top 20 jobs by total
    cost, but it holds the most idle hours: first in the held-but-idle table, with its partition."""
    rule = PriceRule(purchase_price=8760 * 4, depreciation_years=4)  # 1.00 per hour
    gpus = tuple(
        gpu_week(f"GPU-{i}", busy_h=84.0, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=100) for i in range(27)
    )
    busy = tuple(
        JobWeek(f"GPU-{i}", "n1", JobKey(f"b{i}", "bob"), 10 * HOUR, 9.5 * HOUR, 10 * 3.6e6, partition="gpu")
        for i in range(25)
    )
    idle = (
        JobWeek("GPU-25", "n1", JobKey("idle", "carol"), 3.2 * HOUR, 0.0, 0.0, None, 3.2 * HOUR, "debug"),
        JobWeek("GPU-26", "n1", JobKey("idle", "carol"), 3.2 * HOUR, 0.0, 0.0, None, 3.2 * HOUR, "debug"),
    )
    r = build(WeekData(WEEK, "t", gpus, jobs=busy + idle), CostModel(pue=1.0, energy_price_per_kwh=0.5, rules=[rule]))
    top20 = sorted(r.group("job"), key=lambda row: -row.total_cost)[:20]
    assert "idle" not in {row.key for row in top20}
    first = r.idle_holders[0]
    assert (first.user, first.job, first.partition, first.gpus) == ("carol", "idle", "debug", 2)
    assert first.idle_gpu_hours == pytest.approx(6.4) and first.idle_cost == pytest.approx(6.4)
    assert len(r.idle_holders) == 20 and all(x.idle_cost == pytest.approx(0.5) for x in r.idle_holders[1:])
    job = next(x for x in r.group("job") if x.key == "idle")
    assert job.gpus == 2 and job.allocated_idle_gpu_hours == pytest.approx(6.4)
    assert next(x for x in r.group("user") if x.key == "bob").gpus == 25


def test_a_boot_fail_job_counts_as_failed() -> None:
    finished = {"COMPLETED": 5, "FAILED": 1, "BOOT_FAIL": 1, "DEADLINE": 1, "TIMEOUT": 2, "PREEMPTED": 1}
    r = build(WeekData(WEEK, "t", (GPU,), failures=(FailureWeek("gpu", finished, 0, 3.5),)), CostModel())
    (row,) = r.failures
    assert (row.completed, row.failed, row.timeout, row.cancelled, row.other) == (5, 3, 2, 0, 1)
    assert row.failed_gpu_hours == 3.5


def test_what_the_jobs_take_whole_leaves_an_exact_zero_not_float_residue() -> None:
    """A GPU its job held all week: the unallocated row's hours and money are 0.0, not 3e-13."""
    rule = PriceRule(purchase_price=8760 * 4 * 0.3, depreciation_years=4)
    g = gpu_week(busy_h=168 * 0.7, allocated_h=100.0, allocated_idle_h=10.0, energy_kwh=93.1)
    j = JobWeek(g.uuid, g.host, JobKey("7", "ada"), 168 * HOUR, g.busy_s, g.energy_j or 0.0)
    r = build(WeekData(WEEK, "t", (g,), (j,)), CostModel(rules=[rule], pue=1.1), now=WEEK.end)
    (rest,) = r.group("unallocated")
    assert (rest.sampled_gpu_hours, rest.busy_gpu_hours, rest.hardware_cost, rest.energy_cost) == (0.0, 0.0, 0.0, 0.0)
