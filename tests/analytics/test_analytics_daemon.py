"""The analytics daemon in-process: its schedule, its /metrics against the reports it wrote, the
reports it serves (and the paths it refuses), and a failing source reported, not fatal."""

from __future__ import annotations

import datetime as dt
import http.client
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics import synthetic
from analytics.config import FullSettings
from analytics.daemon import Analytics
from analytics.report import from_json
from daemonkit.crontab import cron_trigger, weekdays
from domain.week import Window, last_full_week
from exporter.history import HistoryWriter
from tests.support.clock import ANCHOR, clock_now
from tests.support.http import free_port, http_get
from tests.support.metrics import one, parse_metrics
from tests.support.settings import H200_COST, analytics_settings
from tests.support.wait import wait_until

TZ = "America/New_York"
HISTORY_DAYS = 15  # the last full week (in TZ, DST included) starts less than 15 days before any now


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-GPU fleet from before the start of last week (in TZ) up to now, built at a fixed anchor
    and shifted: the same jobs whatever the hour."""
    tmp = tmp_path_factory.mktemp("daemon")
    now = clock_now() // 60 * 60
    window = Window(now - HISTORY_DAYS * 86400, now, "test", TZ)
    assert window.start < last_full_week(now, TZ).start
    fleet = synthetic.generate(window, hosts=2, gpus_per_host=2, seed=3, anchor=ANCHOR)
    synthetic.write_history(fleet, tmp / "history.db")
    return tmp


@pytest.fixture
def daemon(folder: Path) -> Iterator[Analytics]:
    a = Analytics(analytics_settings(folder, analytics={"timezone": TZ}, cost=H200_COST), clock=clock_now)
    a.start()
    yield a
    a.stop()


def test_catch_up_writes_last_week_and_metrics_match_it(daemon: Analytics, folder: Path) -> None:
    assert wait_until(lambda: {"week", "rolling_7d"} <= daemon.reports().keys(), 60)
    label = last_full_week(clock_now(), TZ).label
    written = from_json((folder / "reports" / f"gpuledger-{label}.json").read_text())
    assert written.complete and written.timezone == TZ and written.currency == "EUR"
    m = parse_metrics(http_get(daemon.url + "/metrics")[2].decode())
    fleet = {"group": "fleet", "key": "fleet"}
    assert one(m, "gpuledger_report_cost", window="week", kind="total", **fleet) == pytest.approx(
        written.fleet.total_cost
    )
    assert one(m, "gpuledger_report_utilization_ratio", window="week", **fleet) == pytest.approx(
        written.fleet.utilization
    )
    for host in written.group("host"):
        assert one(
            m, "gpuledger_report_cost_per_useful_gpu_hour", window="week", group="host", key=host.key
        ) == pytest.approx(host.cost_per_useful_gpu_hour)
    assert one(m, "gpuledger_report_complete", window="rolling_7d") == 1
    assert (
        one(m, "gpuledger_report_info", window="week", week=label, source="embedded", useful="busy", currency="EUR")
        == 1
    )
    assert one(m, "gpuledger_price_energy_kwh", currency="EUR") == 0.2
    assert one(m, "gpuledger_price_pue") == 1.4
    assert one(
        m, "gpuledger_price_gpu_hour", host="gpu-node-01", model="NVIDIA H200", kind="owned", currency="EUR"
    ) == pytest.approx(30000 / (5 * 8760))
    assert one(m, "gpuledger_analytics_runs_total", task="weekly", result="ok") == 1
    assert not any(labels for labels in m["gpuledger_report_cost"] if ("group", "gpu") in labels)  # per-GPU: files
    assert http_get(daemon.url + "/healthz")[0] == 200


def test_weekly_job_runs_monday_0005_in_the_configured_zone(daemon: Analytics) -> None:
    job = daemon.scheduler.get_job("weekly")
    assert job is not None
    nxt = job.next_run_time
    assert nxt.tzinfo is not None and str(nxt.tzinfo) == TZ
    assert (nxt.weekday(), nxt.hour, nxt.minute) == (0, 0, 5)
    assert dt.timedelta(0) < nxt - dt.datetime.now(zoneinfo.ZoneInfo(TZ)) <= dt.timedelta(days=7)
    refresh = daemon.scheduler.get_job("refresh")
    assert refresh is not None and refresh.trigger.interval == dt.timedelta(hours=1)  # rolling 7 days, hourly


def _raw_get(url: str, path: str) -> int:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("GET", path)  # sent as written: no client-side normalisation of ".."
    status = c.getresponse().status
    c.close()
    return status


def test_reports_are_served_and_nothing_else(daemon: Analytics, folder: Path) -> None:
    assert wait_until(lambda: "week" in daemon.reports(), 60)
    label = daemon.reports()["week"].week
    code, headers, body = http_get(f"{daemon.url}/reports/gpuledger-{label}.html")
    assert code == 200 and headers["Content-Type"].startswith("text/html") and b"<svg" in body
    assert http_get(f"{daemon.url}/reports/gpuledger-{label}-csv/costs.csv")[0] == 200
    (folder / "reports" / ".secret.json").write_text("{}")
    for path in (
        "/reports/../history.db",
        "/reports/%2e%2e/history.db",
        "/reports/.secret.json",
        "/reports//etc/passwd",
        "/reports/",
        "/reports/a/b/c.json",
        "/reports/x.db",
    ):
        assert _raw_get(daemon.url, path) == 404, path
    assert f"gpuledger-{label}.html" in http_get(daemon.url + "/")[2].decode()


def test_a_failing_source_is_counted_and_the_rest_keeps_serving(folder: Path, tmp_path: Path) -> None:
    s = analytics_settings(
        folder, analytics={"timezone": TZ, "source": "prometheus", "reports_dir": tmp_path / "r"}, cost=H200_COST
    )
    dead = s.prometheus.model_copy(update={"url": f"http://127.0.0.1:{free_port()}", "retries": 0})  # nothing listens
    s = s.model_copy(update={"prometheus": dead})
    a = Analytics(s)
    a.start()
    try:
        assert wait_until(lambda: a.run_state()[0].get(("refresh", "error"), 0) >= 1, 30)
        assert wait_until(lambda: a.run_state()[0].get(("weekly", "error"), 0) >= 1, 30)
        code, _, body = http_get(a.url + "/metrics")
        health = http_get(a.url + "/healthz")
    finally:
        a.stop()
    m = parse_metrics(body.decode())
    assert code == 200 and one(m, "gpuledger_analytics_runs_total", task="refresh", result="error") >= 1
    assert health[0] == 503 and b'"refresh_errors": 1' in health[2]
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_an_empty_history_is_no_data_not_an_error_and_the_refresh_retries_in_a_minute(tmp_path: Path) -> None:
    """A fresh install: the exporter has created the history but written no minute yet."""
    HistoryWriter(tmp_path / "history.db", hostname="gpu-node-01").stop()
    a = Analytics(analytics_settings(tmp_path, analytics={"timezone": TZ}, cost=H200_COST), clock=clock_now)
    a.start()
    try:
        assert wait_until(lambda: {("refresh", "no_data"), ("weekly", "no_data")} <= a.run_state()[0].keys(), 30)
        job = a.scheduler.get_job("refresh")
        assert job is not None and job.trigger.interval == dt.timedelta(hours=1)
        # the next try is a minute after the empty one, not the next hourly period
        assert job.next_run_time - dt.datetime.now(zoneinfo.ZoneInfo(TZ)) <= dt.timedelta(seconds=60)
        health = http_get(a.url + "/healthz")
        m = parse_metrics(http_get(a.url + "/metrics")[2].decode())
    finally:
        a.stop()
    assert health[0] == 200 and b'"refresh_errors": 0' in health[2]
    assert not any(result == "error" for _, result in a.run_state()[0])
    assert one(m, "gpuledger_analytics_runs_total", task="weekly", result="no_data") == 1
    assert not a.reports() and not (tmp_path / "reports").exists()


def test_a_restart_serves_the_last_report_on_disk(daemon: Analytics, folder: Path) -> None:
    assert wait_until(lambda: "week" in daemon.reports(), 60)
    s = analytics_settings(folder, analytics={"timezone": TZ, "listen": f"127.0.0.1:{free_port()}"}, cost=H200_COST)
    again = Analytics(s, clock=clock_now)
    again.load_latest()
    try:
        assert again.reports()["week"].week == daemon.reports()["week"].week
    finally:
        again.server.server_close()


@pytest.mark.parametrize(
    ("field", "days", "first"),
    [
        ("1", "mon", "mon"),
        ("0", "sun", "sun"),
        ("7", "sun", "sun"),
        ("1-5", "mon,tue,wed,thu,fri", "mon"),
        ("*/2", "sun,tue,thu,sat", "tue"),
        ("5-7", "fri,sat,sun", "fri"),
        ("mon-fri", "mon-fri", "mon"),
        ("*", "*", "mon"),
        ("0,6", "sun,sat", "sat"),
        ("2/2", "tue,thu,sat", "tue"),
    ],
)
def test_crontab_weekdays_count_from_sunday(field: str, days: str, first: str) -> None:
    """APScheduler numbers weekdays from Monday; crontab (and our docs) from Sunday."""
    assert weekdays(field) == days
    monday = dt.datetime(2026, 11, 30, tzinfo=zoneinfo.ZoneInfo("UTC"))  # fires from Monday 00:00 on
    fires = cron_trigger(f"0 3 * * {field}").get_next_fire_time(None, monday)
    assert fires is not None and fires.strftime("%a").lower() == first


@pytest.mark.parametrize("bad", ["8", "5-2", "*/0", "x"])
def test_crontab_weekdays_refuse_nonsense(bad: str) -> None:
    with pytest.raises(ValueError):
        cron_trigger(f"0 3 * * {bad}")


@pytest.mark.parametrize(
    ("extra", "tasks"),
    [
        ({}, {"refresh", "weekly"}),
        (
            {
                "statements": {"enabled": True},
                "focus": {"enabled": True},
                "budgets": {"rules": [{"group": "user", "key": "alice", "currency": 100}]},
            },
            {"refresh", "weekly", "statements", "focus", "budgets"},
        ),
    ],
)
def test_every_task_has_its_run_counters_at_zero_before_its_first_run(
    tmp_path: Path, extra: dict[str, Any], tasks: set[str]
) -> None:
    """Before anything ran (the scheduler not started): each task the configuration runs has its
    three counters at 0, so rate() and an alert on errors have a series from the first scrape."""
    HistoryWriter(tmp_path / "history.db", hostname="gpu-node-01").stop()
    base = analytics_settings(tmp_path, analytics={"timezone": TZ}, cost=H200_COST)
    a = Analytics(FullSettings(analytics=base.analytics, cost=base.cost, **extra), clock=clock_now)
    a.server.server_close()  # never served: only the exposition is asked
    m = parse_metrics(a.site.render(None, False)[0].decode())
    runs = m["gpuledger_analytics_runs_total"]
    assert {dict(k)["task"] for k in runs} == tasks
    assert {dict(k)["result"] for k in runs} == {"ok", "no_data", "error"}
    assert len(runs) == 3 * len(tasks) and not any(runs.values())
    a._count("refresh", "error")  # a run adds to its own series and leaves the zeros
    m = parse_metrics(a.site.render(None, False)[0].decode())
    assert one(m, "gpuledger_analytics_runs_total", task="refresh", result="error") == 1
    assert one(m, "gpuledger_analytics_runs_total", task="refresh", result="ok") == 0


def test_without_json_in_formats_the_weekly_report_is_written_once_and_served_after_a_restart(
    folder: Path, tmp_path: Path
) -> None:
    """``formats = ["html"]``: the daemon still keeps its JSON record, so a restart serves last
    week's figures and does not write the report again."""
    s = analytics_settings(
        folder, analytics={"timezone": TZ, "reports_dir": tmp_path / "r", "formats": ["html"]}, cost=H200_COST
    )
    a = Analytics(s, clock=clock_now)
    a.server.server_close()
    label = last_full_week(clock_now(), TZ).label
    assert a._missing_last_week()
    written = a.weekly()
    assert sorted(p.name for p in written) == [f"gpuledger-{label}.html", f"gpuledger-{label}.json"]
    again = Analytics(s, clock=clock_now)
    again.server.server_close()
    assert not again._missing_last_week()  # the catch-up would not run
    again.load_latest()
    assert again.reports()["week"].fleet.total_cost == pytest.approx(a.reports()["week"].fleet.total_cost)
