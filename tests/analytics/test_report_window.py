"""Only what happened: a window is charged for the hours that have elapsed since its first data,
says when it is in progress or starts before the history, and leaves cost per useful GPU-hour
n/a below a minimum of useful hours."""

from __future__ import annotations

from analytics.cost import EXAMPLE_RULE, CostModel
from analytics.report.build import build
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from domain.week import WeekData, iso_week
from tests.support.weeks import gpu_week

WEEK = iso_week("2026-W48")
HOUR = 3600.0
RATE = EXAMPLE_RULE.hourly()


def test_a_history_of_one_minute_is_charged_one_minute_not_a_week() -> None:
    first = WEEK.end - 60
    data = WeekData(WEEK, "embedded", (gpu_week(sampled_h=60 / HOUR, busy_h=30 / HOUR),), history_start=first)
    r = build(data, CostModel(), now=WEEK.end + 3600)
    assert abs(r.fleet.hardware_cost - RATE / 60) < 1e-9  # a week would be 168 x RATE
    assert abs(r.fleet.available_gpu_hours - 1 / 60) < 1e-9 and r.coverage == 1.0 and r.complete
    assert r.history_start == first and r.charged_start == first and r.charged_end == WEEK.end
    assert "history starts 2026-11-29 23:59: the hours before it are not charged" in r.notes
    assert r.fleet.cost_per_useful_gpu_hour is None  # half a minute useful: under 1 h
    assert not r.in_progress


def test_a_half_elapsed_week_is_charged_half_and_says_in_progress() -> None:
    now = WEEK.start + WEEK.seconds / 2
    data = WeekData(WEEK, "embedded", (gpu_week(sampled_h=84, busy_h=42),), history_start=WEEK.start - 86400)
    r = build(data, CostModel(), now=now)
    full = build(data, CostModel(), now=WEEK.end)
    assert abs(r.fleet.hardware_cost - 84 * RATE) < 1e-9 and abs(full.fleet.hardware_cost - 168 * RATE) < 1e-9
    assert r.coverage == 1.0 and r.complete and full.coverage == 0.5 and not full.complete
    assert r.in_progress and r.elapsed == 0.5 and r.history_start is None and not full.in_progress
    assert "in progress, 50 % elapsed: only the hours up to now are charged" in r.notes
    assert r.fleet.cost_per_useful_gpu_hour is not None
    assert abs(r.fleet.cost_per_useful_gpu_hour - 84 * RATE / 42) < 1e-9
    md = to_markdown(r)
    assert "in progress, 50 % elapsed" in md and "could not be read" not in md
    back = from_json(to_json(r))
    assert back.in_progress and back.elapsed == 0.5 and back.charged_end == now


def test_missing_data_inside_the_elapsed_hours_still_lowers_coverage() -> None:
    now = WEEK.start + WEEK.seconds / 2
    r = build(WeekData(WEEK, "embedded", (gpu_week(sampled_h=42, busy_h=21),)), CostModel(), now=now)
    assert r.coverage == 0.5 and not r.complete and r.in_progress


def test_cost_per_useful_gpu_hour_is_na_below_the_minimum_of_useful_hours() -> None:
    data = WeekData(WEEK, "embedded", (gpu_week(sampled_h=168, busy_h=0.5),))
    assert build(data, CostModel(), now=WEEK.end).fleet.cost_per_useful_gpu_hour is None
    low = build(data, CostModel(min_useful_gpu_hours=0.25), now=WEEK.end).fleet.cost_per_useful_gpu_hour
    assert low is not None and low > 0
    assert build(data, CostModel(), now=WEEK.end).group("gpu")[0].cost_per_useful_gpu_hour is None
