"""The analytics daemon's daily FOCUS export ([focus]): at its cron, with the daemon's own clock,
yesterday's files, one folder per grouping, the same rows as ``gpuledger report --focus`` for that
day with the calendar month as billing period; an unwritable folder is one error line, counted, and
the daemon carries on; the FinOps validator passes on a scheduled file; bad [focus] settings exit 2
naming the field."""

from __future__ import annotations

import csv
import datetime as dt
import io
import logging
from pathlib import Path

import pytest

from analytics.cli import full_settings
from analytics.config import FullSettings
from analytics.daemon import Analytics
from analytics.focus_files import daily_missing, daily_path, yesterday
from analytics.report.focus import COLUMNS, file_name
from exporter.config import load as exporter_load
from gpuledger.cli import main
from tests.support.fleet import WEEK
from tests.support.focus_validator import validate
from tests.support.settings import H200_COST, analytics_settings
from tests.support.wait import wait_until

DAY = "2026-11-18"  # a Wednesday of the fleet's week (2026-W47)
NOW = dt.datetime(2026, 11, 19, 0, 15, tzinfo=dt.UTC).timestamp()  # the daemon's clock: the cron's minute
BILLING = ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")  # the calendar month of the day


def _config(hist: Path, tmp: Path, focus: str = 'enabled = true\ndir = "{tmp}/focus"') -> Path:
    cfg = tmp / "gpuledger.toml"
    cfg.write_text(f"""[analytics]
source = "embedded"
history = "{hist}"
reports_dir = "{tmp}/reports"
listen = "127.0.0.1:0"

[cost]
currency = "EUR"
energy_price_per_kwh = 0.2
pue = 1.4
rules = [{{match_model = "H200", purchase_price = 30000, depreciation_years = 5}}]

[focus]
{focus.format(tmp=tmp)}
""")
    return cfg


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _daemon(s: FullSettings, now: float = NOW) -> Analytics:
    a = Analytics(s, clock=lambda: now)
    a.start(catch_up=False)
    return a


def test_the_daily_job_writes_yesterdays_files(hist: Path, tmp_path: Path) -> None:
    s = analytics_settings(
        tmp_path, analytics={"history": hist}, cost=H200_COST, focus={"enabled": True, "dir": tmp_path / "focus"}
    )
    a = _daemon(s)
    try:
        job = a.scheduler.get_job("focus")
        assert job is not None
        fake_now = dt.datetime(2026, 11, 18, 9, 0, tzinfo=dt.UTC)  # a fake clock, not the wall's
        fire = job.trigger.get_next_fire_time(None, fake_now)
        assert (fire.year, fire.month, fire.day, fire.hour, fire.minute) == (2026, 11, 19, 0, 15)
        assert daily_missing(s, NOW)
        files = a.focus()
    finally:
        a.stop()
    groupings = {"host", "model", "gpu", "job", "user", "partition"}  # those with rows (the fleet: Slurm jobs)
    assert set(files) == {daily_path(s.focus.dir, file_name(g), DAY) for g in groupings}
    assert {p.relative_to(s.focus.dir).as_posix() for p in files} >= {f"user/user-{DAY}.csv", f"gpu/gpu-{DAY}.csv"}
    assert not daily_missing(s, NOW) and a.run_state()[0][("focus", "ok")] == 1
    assert not [p for p in s.focus.dir.rglob("*") if p.name.startswith(".")]  # no temporary file left
    fleet_cost = None
    for path in files:
        rows = _rows(path)
        assert rows and list(rows[0]) == list(COLUMNS), path
        assert {r["ChargePeriodStart"] for r in rows} == {f"{DAY}T00:00:00Z"}, path
        assert {r["ChargePeriodEnd"] for r in rows} == {"2026-11-19T00:00:00Z"}, path
        assert {(r["BillingPeriodStart"], r["BillingPeriodEnd"]) for r in rows} == {BILLING}, path
        cost = sum(float(r["BilledCost"]) for r in rows)  # every grouping's file sums to the fleet
        fleet_cost = fleet_cost or cost
        assert cost == pytest.approx(fleet_cost, rel=1e-9) and cost > 0, path


def test_rows_equal_the_report_command_for_that_day(
    hist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(hist, tmp_path)
    assert main(["report", "--config", str(cfg), "--week", WEEK, "--format", "json", "--focus"]) == 0
    capsys.readouterr()
    cli = tmp_path / "reports" / f"gpuledger-{WEEK}-focus"
    s = full_settings(str(cfg))
    a = _daemon(s)
    try:
        files = a.focus()
    finally:
        a.stop()
    billing = {"BillingPeriodStart", "BillingPeriodEnd"}  # the command's: its week; the daily file's: the month
    compared, with_day = 0, 0
    for path in sorted(cli.iterdir()):
        day = [r for r in _rows(path) if r["ChargePeriodStart"].startswith(DAY)]
        daily = daily_path(s.focus.dir, path.name, DAY)
        assert bool(day) == daily.exists(), path.name
        if not day:
            continue
        with_day += 1
        mine = _rows(daily)
        assert [{k: v for k, v in r.items() if k not in billing} for r in mine] == [
            {k: v for k, v in r.items() if k not in billing} for r in day
        ], path.name
        compared += len(mine)
    assert len(files) == with_day  # no file of the command's missing, none more
    assert compared > 20


def test_an_unwritable_dir_is_one_error_line_and_the_daemon_carries_on(
    hist: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")
    s = analytics_settings(
        tmp_path, analytics={"history": hist}, cost=H200_COST, focus={"enabled": True, "dir": tmp_path / "focus"}
    )
    s.focus.dir = blocker / "focus"
    a = _daemon(s)
    try:
        with caplog.at_level(logging.INFO, logger="gpuledger.analytics"):
            assert a.focus() == []
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].exc_info is None, errors
        line = errors[0].getMessage()
        assert line.startswith(f"FOCUS export: cannot write in {s.focus.dir}: Not a directory"), line
        assert "\n" not in line
        runs = a.run_state()[0]  # (the start's refresh runs beside it, in the scheduler)
        assert runs[("focus", "error")] == 1 and ("focus", "ok") not in runs
        assert a.scheduler.running and a.scheduler.get_job("focus") is not None  # still scheduled
        blocker.unlink()  # the next run, the folder fixed, writes the day
        assert a.focus() and a.run_state()[0][("focus", "ok")] == 1
        assert a.refresh() is not None  # the other jobs carry on
    finally:
        a.stop()


def test_the_validator_passes_on_a_scheduled_file(hist: Path, tmp_path: Path) -> None:
    s = analytics_settings(
        tmp_path, analytics={"history": hist}, cost=H200_COST, focus={"enabled": True, "dir": tmp_path / "focus"}
    )
    a = _daemon(s)
    try:
        files = a.focus()
    finally:
        a.stop()
    chosen = [p for p in files if p.parent.name in ("gpu", "user")]
    assert len(chosen) == 2
    results = validate(chosen)
    for path in chosen:
        failed = {k: v for k, v in results[str(path)].items() if v != "passed"}
        assert len(results[str(path)]) > 100 and not failed, (path, failed)


def test_a_start_writes_yesterday_when_missing_and_disabled_is_no_job(hist: Path, tmp_path: Path) -> None:
    s = analytics_settings(
        tmp_path, analytics={"history": hist}, cost=H200_COST, focus={"enabled": True, "dir": tmp_path / "focus"}
    )
    a = Analytics(s, clock=lambda: NOW)
    try:
        a.start(catch_up=True)  # the daemon was down at 00:15: the start writes the day
        assert wait_until(lambda: a.run_state()[0].get(("focus", "ok")) == 1, 120)
        assert not daily_missing(s, NOW)
    finally:
        a.stop()
    off = Analytics(full_settings(str(_config(hist, tmp_path, focus="enabled = false"))), clock=lambda: NOW)
    try:
        off.start(catch_up=True)
        assert off.scheduler.get_job("focus") is None and off.scheduler.get_job("focus-catch-up") is None
    finally:
        off.stop()


def test_a_day_without_data_writes_nothing(hist: Path, tmp_path: Path) -> None:
    s = analytics_settings(
        tmp_path, analytics={"history": hist}, cost=H200_COST, focus={"enabled": True, "dir": tmp_path / "focus"}
    )
    a = _daemon(s, dt.datetime(2026, 12, 2, 0, 15, tzinfo=dt.UTC).timestamp())  # after the history's week
    try:
        assert a.focus() == []
    finally:
        a.stop()
    runs = a.run_state()[0]
    assert runs[("focus", "no_data")] == 1 and ("focus", "ok") not in runs and not s.focus.dir.exists()


def test_yesterday_is_the_local_day() -> None:
    w = yesterday(dt.datetime(2026, 10, 26, 0, 30, tzinfo=dt.UTC).timestamp(), "Europe/Berlin")
    assert w.label == "2026-10-25" and w.hours == 25  # the day the clocks went back
    assert yesterday(dt.datetime(2027, 1, 1, 0, 15, tzinfo=dt.UTC).timestamp(), "UTC").label == "2026-12-31"


@pytest.mark.parametrize(
    ("focus", "field"),
    [
        ('enabled = true\ncron = "61 * * * *"', "focus.cron"),
        ("enabled = true\ndirectory = 'x'", "focus.directory"),
        ('enabled = "sometimes"', "focus.enabled"),
    ],
)
def test_bad_focus_settings_exit_2_naming_the_field(
    hist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], focus: str, field: str
) -> None:
    cfg = _config(hist, tmp_path, focus)
    assert main(["analytics", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err


def test_the_exporter_accepts_a_focus_section(hist: Path, tmp_path: Path) -> None:
    assert exporter_load(_config(hist, tmp_path)).focus == {"enabled": True, "dir": f"{tmp_path}/focus"}
