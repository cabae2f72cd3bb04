"""A fresh install shows sane figures from its first minute: the rolling report is charged for the
minutes the history has (not a week), cost per useful GPU-hour is n/a rather than absurd, and last
week (no data yet) is ``no_data``, not an error. A Prometheus-compatible store finds where its
series begin inside a window (``history_start``) and the report is charged only from there."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from analytics.config import FullSettings, PrometheusSettings
from analytics.cost import CostModel
from analytics.daemon import Analytics
from analytics.report.build import build
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.prometheus import PrometheusSource
from analytics.sources.promql import history_start
from domain.week import Window, iso_week
from exporter import history
from exporter.history import HistoryWriter
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, MinuteRow
from tests.support.metrics import one, parse_metrics
from tests.support.prometheus import PrometheusServer
from tests.support.settings import analytics_settings
from tests.support.victoria import VictoriaMetricsServer
from tests.support.wait import wait_until

HOST = "node-a"
MODEL = "NVIDIA H200"
GPUS = (
    DeviceInfo(0, "GPU-aaaaaaaa-0000-4000-8000-000000000000", MODEL, "00000000:19:00.0"),
    DeviceInfo(1, "GPU-aaaaaaaa-0000-4000-8000-000000000001", MODEL, "00000000:3B:00.0"),
)
FIRST = iso_week("2026-W48").start + 2 * 86400 + 10 * 3600  # Wednesday 2026-11-25 10:00 UTC: the first minute
MINUTES = 3


class Clock:
    """The daemon's and the writer's "now", moved only by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[tuple[Analytics, HistoryWriter, Clock]]:
    """``gpuledger up``'s two halves on a new history file, as it starts them: the writer first."""
    clock = Clock(FIRST + 20)
    writer = HistoryWriter(tmp_path / "history.db", hostname=HOST, clock=clock)
    writer.start()
    a = Analytics(analytics_settings(tmp_path, analytics={"timezone": "UTC"}), clock=clock)
    yield a, writer, clock
    a.server.server_close()
    writer.stop()


def _minutes(n: int) -> list[MinuteRow]:
    base = dict.fromkeys(ROLLUP_FIELDS, 0.0) | {"sampled_seconds": 60.0, "busy_seconds": 30.0}
    return [MinuteRow(int(FIRST) + 60 * k, d, base | {"energy_joules": 60.0 * 400}) for k in range(n) for d in GPUS]


def test_a_fresh_install_is_charged_its_minutes_and_last_week_is_no_data(
    fresh: tuple[Analytics, HistoryWriter, Clock],
) -> None:
    a, writer, clock = fresh
    assert a.refresh() is None  # nothing written yet: the first minute is not over
    assert a.run_state()[0] == {("refresh", "no_data"): 1}
    assert a.site.health()[0] and "rolling_7d" not in a.reports()  # no report of zeros

    rows = _minutes(MINUTES)
    writer.submit(rows)  # as the exporter does at each minute's end
    assert wait_until(lambda: writer.stats().rows_written == len(rows), 30)
    clock.now = FIRST + 60 * MINUTES + 20  # the rolling window ends at the current minute: 10:03
    r = a.refresh()
    assert r is not None
    rule = a.s.cost.rule_for(MODEL, HOST)
    assert rule is not None
    elapsed_h = MINUTES / 60
    assert r.fleet.hardware_cost == pytest.approx(len(GPUS) * rule.hourly() * elapsed_h, rel=1e-9)
    assert r.fleet.hardware_cost < 1e-3 * len(GPUS) * rule.hourly() * 168  # not a week's
    assert r.fleet.available_gpu_hours == pytest.approx(len(GPUS) * elapsed_h) and r.coverage == 1.0
    assert r.fleet.cost_per_useful_gpu_hour is None  # 3 useful GPU-minutes: under cost.min_useful_gpu_hours
    assert r.history_start == FIRST and r.charged_start == FIRST and r.charged_end == FIRST + 60 * MINUTES
    assert "history starts 2026-11-25 10:00: the hours before it are not charged" in r.notes
    assert r.generated_at == clock.now  # the daemon's clock, not the wall clock

    assert a.weekly() == []  # last week (2026-W47) has no data on this install
    assert not (a.reports_dir.exists() and list(a.reports_dir.iterdir()))
    runs, last_ok = a.run_state()
    assert runs == {("refresh", "no_data"): 1, ("refresh", "ok"): 1, ("weekly", "no_data"): 1}
    assert last_ok == {"refresh": clock.now, "weekly": clock.now}
    ok, health = a.site.health()
    assert ok and health["status"] == "ok" and health["refresh_errors"] == 0

    m = parse_metrics(a.site.render(None, False)[0].decode())
    assert one(m, "gpuledger_analytics_runs_total", task="weekly", result="no_data") == 1
    # every task's counters exist from the start: the errors at 0, not absent
    exposed = m["gpuledger_analytics_runs_total"]
    assert {dict(k)["task"] for k in exposed} == {"refresh", "weekly"}
    assert all(n == 0 for k, n in exposed.items() if ("result", "error") in k) and len(exposed) == 6
    fleet = {"group": "fleet", "key": "fleet"}
    assert one(m, "gpuledger_report_cost", window="rolling_7d", kind="hardware", **fleet) == pytest.approx(
        r.fleet.hardware_cost
    )
    assert not any(("window", "week") in labels for labels in m["gpuledger_report_cost"])


# --- where a store's series begin ---------------------------------------------------------

DAY = 86400.0
D = iso_week("2026-W47").start  # Monday 2026-11-16 00:00 UTC
T0 = D + 10 * 3600 + 7  # the series begin again at 10:00:07, scraped every 15 s
LABELS = f'instance="{HOST}:10044",job="gpuledger",gpu="0",uuid="{GPUS[0].uuid}"'
INFO = f'{LABELS},model="{MODEL}",hostname="{HOST}"'
# (start, end, scrape interval): an old run, a shorter one, then a gap of 7.5 days and a fresh start
SEGMENTS = ((D - 10 * DAY, D - 9 * DAY, 60.0), (D - 8 * DAY, D - 7.5 * DAY, 60.0), (T0, D + DAY + 3600, 15.0))
COUNTERS = (
    ("gpuledger_gpu_sampled_seconds_total", 1.0),
    ("gpuledger_gpu_busy_seconds_total", 0.5),
    ("gpuledger_gpu_energy_joules_total", 400.0),
)


def _samples() -> Iterator[tuple[str, float, float]]:
    """(series, value, time): each series' samples contiguous and ascending, counters from 0 at
    each start (an exporter restart)."""
    for name, per_second in COUNTERS:
        for start, end, step in SEGMENTS:
            for k in range(round((end - start) / step)):
                yield f"{name}{{{LABELS}}}", k * step * per_second, start + k * step
    for start, end, step in SEGMENTS:
        for k in range(round((end - start) / step)):
            yield f"gpuledger_gpu_info{{{INFO}}}", 1.0, start + k * step


def _prometheus(tmp: Path) -> PrometheusServer:
    om = tmp / "fresh.om"
    om.write_text("".join(f"{s} {v:g} {t:.0f}\n" for s, v, t in _samples()) + "# EOF\n")
    return PrometheusServer.backfilled(tmp, om)


def _victoria(tmp: Path) -> VictoriaMetricsServer:
    server = VictoriaMetricsServer(tmp)
    try:
        server.import_lines(f"{s} {v:g} {t * 1000:.0f}" for s, v, t in _samples())
    except BaseException:
        server.stop()
        raise
    return server


@pytest.mark.integration
@pytest.mark.parametrize("store", [_prometheus, _victoria], ids=["prometheus", "victoria-metrics"])
def test_a_store_whose_series_begin_mid_window_is_charged_from_the_first_sample(
    store: Callable[[Path], PrometheusServer | VictoriaMetricsServer], tmp_path: Path
) -> None:
    server = store(tmp_path)
    source = PrometheusSource(PrometheusSettings(url=server.url))
    try:
        mid = Window(D, D + DAY, "mid", "UTC")
        data = source.week(mid)
        assert data.history_start == T0 and not data.problems  # to the second, not the minute
        assert history_start(source.api, Window(D - 8.5 * DAY, D - 7.5 * DAY, "gap")) is None  # data 1.5 d before
        assert history_start(source.api, Window(D + DAY / 2, D + DAY, "after")) is None  # data at its start
        assert history_start(source.api, Window(D - 5 * DAY, D - 4 * DAY, "empty")) is None
        assert source.week(Window(D - 6 * DAY, D + DAY, "week")).history_start is None  # began before
        # a window that ends at the first sample: the store's range holds its end, so the GPU's
        # info is there, but nothing was measured in the window: no data, not a day of idle cost
        closing = source.week(Window(T0 - DAY, T0, "closing"))
        assert closing.gpus == () and closing.jobs == () and closing.history_start is None
        assert len(source.week(Window(T0 - DAY, T0 + 15, "one scrape")).gpus) == 1  # one scrape in: measured
    finally:
        source.api.close()
        server.stop()
    settings = FullSettings()
    rule = settings.cost.rule_for(MODEL, HOST)
    assert rule is not None
    r = build(data, settings.cost, now=mid.end)
    charged_h = (mid.end - T0) / 3600
    assert r.fleet.hardware_cost == pytest.approx(rule.hourly() * charged_h, rel=1e-9)  # not 24 h
    assert r.charged_start == T0 and r.history_start == T0
    assert "history starts 2026-11-16 10:00: the hours before it are not charged" in r.notes
    assert r.coverage == pytest.approx(1.0, abs=0.01)  # the hours before the first sample are not gaps


def test_an_exporter_started_mid_minute_is_charged_from_its_first_sample(tmp_path: Path) -> None:
    """The first minute row of a fresh history holds 50 s: the exporter started 10 s into it.
    The history starts then; those 10 s are not a gap (coverage stays 100 %)."""
    db = history.connect(tmp_path / "h.db")
    first = _minutes(3)
    partial = {"sampled_seconds": 50.0, "busy_seconds": 25.0}
    late = [dataclasses.replace(m, values={**m.values, **partial}) for m in first[: len(GPUS)]]
    history.insert_minutes(db, late + first[len(GPUS) :], HOST)
    db.commit()
    db.close()
    source = EmbeddedSource(tmp_path / "h.db")
    window = Window(FIRST - 3600, FIRST + 180, "rolling")
    data = source.week(window)
    assert data.history_start == FIRST + 10
    r = build(data, CostModel(), now=FIRST + 180)
    assert r.charged_start == FIRST + 10 and r.coverage == pytest.approx(1.0) and r.complete
