"""Monthly budgets ([budgets] rules): each budget's month-to-date spent, its limit and a month-end
forecast, from one report over the calendar month so far (in ``[analytics] timezone``).

Spent is the budget's row of that report: its total cost (``currency``) or its charged GPU-hours
(``gpu_hours``, the row's sampled GPU-hours, which add up to the fleet's as cost does); a key with
no row (no job of it this month) has spent 0. The forecast is linear: spent divided by the share of
the month's hours charged so far, counted from the month's first data (the report's charged start:
the month's start, or the history's first data when that is later) up to now, so
``forecast = spent x (month end - charged start) / (now - charged start)``; with data from the
month's start that is spent / the elapsed share of the month. A month without GPU data yet gives
no figures (no report of zeros)."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

from analytics.config import BudgetRule, FullSettings
from analytics.report.build import build
from analytics.report.model import Report
from analytics.sources import Source
from domain.week import Window

GPU_HOURS = "gpu_hours"  # the unit label of a GPU-hour budget; a money budget's is the currency code


@dataclass(frozen=True)
class BudgetFigure:
    group: str
    key: str
    unit: str  # the currency code, or gpu_hours
    limit: float
    spent: float | None  # None: no month report (no GPU data yet this month)
    forecast: float | None


def month_so_far(now: float, timezone: str) -> tuple[Window, float]:
    """The calendar month ``now`` falls in, from its start up to ``now``'s minute (the window the
    month's report covers), and the month's end."""
    tz = zoneinfo.ZoneInfo(timezone)
    d = dt.datetime.fromtimestamp(now, tz)
    start = dt.datetime(d.year, d.month, 1, tzinfo=tz)
    end = dt.datetime(d.year + d.month // 12, d.month % 12 + 1, 1, tzinfo=tz)
    return Window(start.timestamp(), now // 60 * 60, f"{d.year:04d}-{d.month:02d}", timezone), end.timestamp()


def month_report(source: Source, s: FullSettings, now: float) -> tuple[Report, float] | None:
    """The report of the month so far, grouped only by the budgets' groupings, and the month's end;
    None when the month has not reached its first minute. The source's errors reach the caller."""
    window, month_end = month_so_far(now, s.analytics.timezone)
    if window.end <= window.start:
        return None
    groups = list(dict.fromkeys(r.group for r in s.budgets.rules))
    with source.session():
        data = source.week(window)
    return build(data, s.cost, min_coverage=s.analytics.min_coverage, now=now, group_by=groups), month_end


def spent(report: Report, rule: BudgetRule) -> float:
    """The budget's month-to-date spent in its unit: 0 where the key has no row."""
    for row in report.rows:
        if row.group == rule.group and row.key == rule.key:
            return row.total_cost if rule.currency is not None else row.sampled_gpu_hours
    return 0.0


def forecast(spent_so_far: float, charged_start: float, charged_end: float, month_end: float) -> float:
    """Linear month-end forecast: the rate over the charged hours, carried to the month's end."""
    charged = charged_end - charged_start
    if charged <= 0:
        return spent_so_far
    return spent_so_far * (month_end - charged_start) / charged


def figures(s: FullSettings, got: tuple[Report, float] | None) -> list[BudgetFigure]:
    """Every budget's figures; spent and forecast None without a month report with GPU data."""
    out: list[BudgetFigure] = []
    report, month_end = got if got is not None else (None, 0.0)
    has_data = report is not None and bool(report.fleet.gpus)
    for rule in s.budgets.rules:
        unit = s.cost.currency if rule.currency is not None else GPU_HOURS
        limit = rule.currency if rule.currency is not None else rule.gpu_hours
        assert limit is not None  # the config checks that one is set
        if report is None or not has_data:
            out.append(BudgetFigure(rule.group, rule.key, unit, limit, None, None))
            continue
        got_spent = spent(report, rule)
        start = report.charged_start if report.charged_start is not None else report.start
        end = report.charged_end if report.charged_end is not None else report.end
        ahead = forecast(got_spent, start, end, month_end)
        out.append(BudgetFigure(rule.group, rule.key, unit, limit, got_spent, ahead))
    return out
