"""Budgets ([budgets] rules): the month-to-date spent from the month's report, the linear month-end
forecast on a fake clock (mid-month, the first day, the last day, a history starting mid-month), a
key without jobs at 0, no figures before the month's first data, the config's checks, and the
daemon's gpuledger_budget_* gauges after a refresh."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analytics import budgets
from analytics.config import FullSettings
from analytics.daemon import Analytics
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, Window
from tests.support.metrics import one, parse_metrics
from tests.support.settings import analytics_settings
from tests.support.sources import StubSource

H = 3600.0
NOV = dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()  # November 2026: 30 days, 720 hours
RATE = 2.0  # EUR per GPU-hour, energy included: cost = 2 x hours exactly


def _at(day: int, hour: int = 0) -> float:
    return dt.datetime(2026, 11, day, hour, tzinfo=dt.UTC).timestamp()


BUDGETS = {
    "rules": [
        {"group": "account", "key": "physics", "gpu_hours": 500},
        {"group": "account", "key": "physics", "currency": 1000},
        {"group": "account", "key": "chem", "currency": 300},  # no jobs this month
    ]
}
CLOUD_COST = {"currency": "EUR", "rules": [{"kind": "cloud", "price_per_gpu_hour": RATE, "energy_included": True}]}


class _Source(StubSource):
    """One GPU held all the time by one job of account physics, from ``first`` (the history's start)."""

    def __init__(self, first: float | None = None, gpus: bool = True) -> None:
        self.first = first
        self.has_gpus = gpus
        self.windows: list[Window] = []

    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        self.windows.append(window)
        start = max(window.start, self.first or window.start)
        held = max(0.0, window.end - start)
        if not self.has_gpus or held <= 0:
            return WeekData(window, "t", (), history_start=self.first)
        gpu = GpuWeek("GPU-0", "n1", "NVIDIA H200", "0", held, held, None, held, 0.0, None)
        job = JobWeek("GPU-0", "n1", JobKey("7", "alice", "", ""), held, held, 0.0, charged_s=held, account="physics")
        return WeekData(window, "t", (gpu,), (job,) if jobs else (), history_start=self.first)


def _figures(now: float, source: _Source | None = None) -> dict[tuple[str, str], budgets.BudgetFigure]:
    s = analytics_settings(cost=CLOUD_COST, budgets=BUDGETS)
    got = budgets.month_report(source or _Source(), s, now)
    return {(f.key, f.unit): f for f in budgets.figures(s, got)}


@pytest.mark.parametrize(
    ("now", "elapsed_h"),
    [(_at(16), 360.0), (_at(1, 6), 6.0), (_at(30, 18), 714.0), (_at(1) + 60, 1 / 60)],
    ids=["mid-month", "first-day", "last-day", "first-minute"],
)
def test_spent_and_forecast_over_the_elapsed_share_of_the_month(now: float, elapsed_h: float) -> None:
    f = _figures(now)
    hours, money = f[("physics", "gpu_hours")], f[("physics", "EUR")]
    assert hours.spent == pytest.approx(elapsed_h)
    assert money.spent == pytest.approx(RATE * elapsed_h)
    # one GPU all month long: whatever the day, the forecast is the month's 720 hours
    assert hours.forecast == pytest.approx(720.0)
    assert money.forecast == pytest.approx(RATE * 720.0)
    assert (hours.limit, money.limit) == (500.0, 1000.0)


def test_the_month_report_covers_the_month_so_far_to_the_minute() -> None:
    source = _Source()
    _figures(_at(16, 9) + 59.5, source)
    (w,) = source.windows
    assert (w.start, w.end, w.label) == (NOV, _at(16, 9), "2026-11")


def test_a_key_without_jobs_has_spent_zero() -> None:
    chem = _figures(_at(16))[("chem", "EUR")]
    assert (chem.spent, chem.forecast, chem.limit) == (0.0, 0.0, 300.0)


def test_a_history_starting_mid_month_forecasts_from_its_first_data() -> None:
    # data from the 11th; on the 16th: 120 h spent at 1 GPU-hour/hour, 360 h left in the month; the
    # 10 days before the history are not known, so neither spent nor forecast counts them
    f = _figures(_at(16), _Source(first=_at(11)))[("physics", "gpu_hours")]
    assert f.spent == pytest.approx(120.0)
    assert f.forecast == pytest.approx(120.0 + 360.0)


def test_no_figures_before_the_months_first_data() -> None:
    f = _figures(_at(16), _Source(gpus=False))
    assert all(x.spent is None and x.forecast is None for x in f.values())
    s = analytics_settings(cost=CLOUD_COST, budgets=BUDGETS)
    assert budgets.month_report(_Source(), s, NOV + 30) is None  # not yet a minute of the month
    assert [x.limit for x in budgets.figures(s, None)] == [500.0, 1000.0, 300.0]


def test_month_so_far_crosses_the_year_and_follows_the_time_zone() -> None:
    dec31 = dt.datetime(2026, 12, 31, 12, tzinfo=dt.UTC).timestamp()
    w, end = budgets.month_so_far(dec31, "UTC")
    assert (w.label, end) == ("2026-12", dt.datetime(2027, 1, 1, tzinfo=dt.UTC).timestamp())
    # 2026-12-01 03:00 UTC is still November in New York
    w, end = budgets.month_so_far(dt.datetime(2026, 12, 1, 3, tzinfo=dt.UTC).timestamp(), "America/New_York")
    assert w.label == "2026-11"
    assert end == dt.datetime(2026, 12, 1, 5, tzinfo=dt.UTC).timestamp()  # midnight EST


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"group": "account", "key": "a"}, "one of currency or gpu_hours"),
        ({"group": "account", "key": "a", "currency": 1, "gpu_hours": 1}, "one of currency or gpu_hours"),
        ({"group": "team", "key": "a", "currency": 1}, "unknown grouping"),
        ({"group": "account", "key": "a", "currency": -1}, "greater than 0"),
        ({"group": "account", "key": "", "currency": 1}, "at least 1 character"),
        ({"group": "label:label_team", "key": "ml", "currency": 1}, "pod_labels"),
    ],
)
def test_the_config_refuses_bad_budgets(rule: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FullSettings(budgets={"rules": [rule]})


def test_the_config_refuses_a_budget_given_twice() -> None:
    rule = {"group": "user", "key": "alice", "gpu_hours": 10}
    with pytest.raises(ValueError, match="twice"):
        FullSettings(budgets={"rules": [rule, rule]})
    ok = FullSettings(
        analytics={"pod_labels": ["label_team"]},
        budgets={"rules": [{"group": "label:label_team", "key": "ml", "currency": 5}]},
    )
    assert ok.budgets.rules[0].group == "label:label_team"


def test_the_daemon_exports_the_budget_gauges_at_each_refresh(tmp_path: Path) -> None:
    clock = [_at(16)]
    a = Analytics(
        analytics_settings(analytics={"reports_dir": tmp_path / "reports"}, cost=CLOUD_COST, budgets=BUDGETS),
        source=_Source(),
        clock=lambda: clock[0],
    )
    try:
        before = parse_metrics(a.site.render(None, False)[0].decode())
        assert one(before, "gpuledger_budget_limit", group="account", key="physics", unit="gpu_hours") == 500.0
        assert not before.get("gpuledger_budget_spent")  # no month report yet: no spent, no forecast
        assert a.refresh() is not None
        m = parse_metrics(a.site.render(None, False)[0].decode())
        labels = {"group": "account", "key": "physics", "unit": "EUR"}
        assert one(m, "gpuledger_budget_spent", **labels) == pytest.approx(RATE * 360)
        assert one(m, "gpuledger_budget_forecast", **labels) == pytest.approx(RATE * 720)
        assert one(m, "gpuledger_budget_limit", **labels) == 1000.0
        assert one(m, "gpuledger_budget_spent", group="account", key="chem", unit="EUR") == 0.0
        assert one(m, "gpuledger_analytics_runs_total", task="budgets", result="ok") == 1.0
        clock[0] = _at(23)  # a week later: the next refresh moves spent on
        a.refresh()
        m = parse_metrics(a.site.render(None, False)[0].decode())
        assert one(m, "gpuledger_budget_spent", **labels) == pytest.approx(RATE * 528)
    finally:
        a.server.server_close()
