"""The weekly report from the 5-minute rollups (deploy/prometheus/rules/gpuledger-rollups.yml), and from
the hourly ones (gpuledger-rollups-1h.yml) with the 5-minute ones at the days' edges, against the
report from the raw series, on the same backfilled week: the same figures (within 0.5 pp
utilisation, 1 % energy and cost, every grouping), conservation kept, and the report saying which
it read; the hourly path gives the 5-minute path's sums exactly. The rollups are backfilled as
docs/alerts.md says: ``promtool tsdb create-blocks-from rules`` against the running Prometheus (the
hourly file in a second pass), in VictoriaMetrics by ``vmalert -replay`` of the same files."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from analytics import synthetic_om
from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.daemon import Analytics
from analytics.daycache import DayCached
from analytics.report.build import build
from analytics.report.model import Report
from analytics.sources import rollups
from analytics.sources.base import GpuFigures, RecordSets
from analytics.sources.promapi import PromAPI
from analytics.sources.prometheus import DAILY, GPU_COUNTERS, HOURLY_NOTE, ROLLUP_NOTE, PrometheusSource
from analytics.sources.promql import SCHEDULER
from analytics.synthetic import Fleet
from domain.week import WeekData, Window, days, iso_week
from tests.support.conservation import assert_conserves
from tests.support.daycache import assert_same_week
from tests.support.fleet import WEEK, prometheus
from tests.support.prometheus import PrometheusServer
from tests.support.rollups import BUCKET, HOURLY_RULES, RULES, add_hourly, prometheus_with_rollups, replay
from tests.support.settings import analytics_settings
from tests.support.victoria import VictoriaMetricsServer

UTILISATION_PP = 0.005  # 0.5 percentage points
REL = 0.01  # energy and cost
FRACTIONS = ("utilization", "sm_activity", "coverage")
HOURS = ("sampled_gpu_hours", "busy_gpu_hours", "useful_gpu_hours", "allocated_gpu_hours", "allocated_idle_gpu_hours")
MONEY = ("energy_cost", "hardware_cost", "idle_cost", "total_cost")


class Rolled:
    """One Prometheus of the backfilled week: its 5-minute rollups first, the hourly ones added
    once a test asks (``hourly``), so the week and its 5-minute rollups are backfilled once."""

    def __init__(self, fleet: Fleet, folder: Path) -> None:
        self.folder = folder
        self.server = prometheus_with_rollups(fleet, iso_week(WEEK), folder)
        self.has_hourly = False

    def five_minute(self) -> PrometheusServer:
        assert not self.has_hourly, "the 5-minute tests come first in this module (pytest runs them in order)"
        return self.server

    def hourly(self) -> PrometheusServer:
        if not self.has_hourly:
            self.server = add_hourly(self.server, iso_week(WEEK), self.folder)
            self.has_hourly = True
        return self.server


@pytest.fixture(scope="module")
def rolled(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rolled]:
    r = Rolled(fleet, tmp_path_factory.mktemp("rollups"))
    yield r
    r.server.stop()


def week(url: str, rollups: bool) -> WeekData:
    source = PrometheusSource(PrometheusSettings(url=url), rollups=rollups)
    try:
        return source.week(iso_week(WEEK))
    finally:
        source.api.close()


def deviations(a: Report, b: Report) -> dict[str, tuple[float, tuple[str, str]]]:
    """The worst deviation of each figure over every row of every grouping: fractions in
    percentage points' units (0.005 = 0.5 pp); energy relative to the row's energy; hours and money
    relative to the row's available hours and total cost (a job's idle cost is a small difference of
    large ones: 1 % of itself is no measure)."""
    rows_a = {(r.group, r.key): r for r in a.rows} | {("fleet", ""): a.fleet}
    rows_b = {(r.group, r.key): r for r in b.rows} | {("fleet", ""): b.fleet}
    assert rows_a.keys() == rows_b.keys()
    assert {g for g, _ in rows_a} >= {"fleet", "host", "model", "gpu", "user", "job", "unallocated"}
    worst: dict[str, tuple[float, tuple[str, str]]] = {}
    for key, ra in rows_a.items():
        rb = rows_b[key]
        for f in (*FRACTIONS, *HOURS, *MONEY, "energy_kwh"):
            x, y = getattr(ra, f), getattr(rb, f)
            assert (x is None) == (y is None), (key, f)
            if x is None or x == y:
                continue
            scale = 1.0
            if f in HOURS:
                scale = rb.available_gpu_hours
            elif f in MONEY:
                scale = rb.total_cost
            elif f == "energy_kwh":
                scale = y
            d = abs(x - y) / scale if scale else abs(x - y)
            if d > worst.get(f, (0.0, key))[0]:
                worst[f] = (d, key)
    return worst


def assert_same_figures(url: str, fleet: Fleet, phased: bool, note: str = ROLLUP_NOTE) -> None:
    """``phased``: the rule groups ran at a phase of their own (promtool), not on the clock's 5
    minutes (vmalert); the report then reads the edges' minutes from the raw series. ``note``: the
    rollups it should say it read."""
    w = iso_week(WEEK)
    api = PromAPI(PrometheusSettings(url=url))
    try:
        gaps = [
            rollups.grid(api, w, f"gpuledger_{s}_sampled_seconds_total", hourly=False).gap(w.end)
            for s in ("gpu", "job_gpu")
        ]
    finally:
        api.close()
    assert all(0 < g < BUCKET for g in gaps) if phased else gaps == [0.0, 0.0], gaps
    raw, rolled = week(url, rollups=False), week(url, rollups=True)
    assert raw.problems == () and rolled.problems == ()
    assert note in rolled.approximations and not {ROLLUP_NOTE, HOURLY_NOTE} & set(raw.approximations)
    assert {ROLLUP_NOTE, HOURLY_NOTE} & set(rolled.approximations) == {note}
    # per GPU, the buckets telescope to the raw differences between their first and last stamps,
    # and the edges' minutes come from the raw series: the week is exact; a day is shifted by the
    # gap (under one bucket)
    by_uuid = {g.uuid: g for g in raw.gpus}
    assert by_uuid.keys() == {g.uuid for g in rolled.gpus} == set(fleet.truth.gpu)
    for g in rolled.gpus:
        r = by_uuid[g.uuid]
        assert (g.host, g.model, g.gpu) == (r.host, r.model, r.gpu)
        for f in ("sampled_s", "busy_s", "sm_active_s", "allocated_s", "allocated_idle_s", "energy_j", "stalled_s"):
            assert getattr(g, f) == pytest.approx(getattr(r, f), rel=1e-9), (g.uuid, f)
        for d, e in zip(g.daily, r.daily, strict=True):  # a day: under one bucket of 288
            assert d.sampled_s == pytest.approx(e.sampled_s, abs=BUCKET) and d.busy_s == pytest.approx(
                e.busy_s, abs=BUCKET
            )
    assert {(j.uuid, j.job) for j in rolled.jobs} == {(j.uuid, j.job) for j in raw.jobs}
    assert_same_records(url, rolled, raw)
    cost = CostModel()
    a, b = build(rolled, cost), build(raw, cost)
    assert note in a.approximations and note not in b.approximations
    worst = deviations(a, b)
    print({f: (round(d, 6), k) for f, (d, k) in worst.items()})  # shown with -s
    for f, (dev, key) in worst.items():
        assert dev <= (UTILISATION_PP if f in FRACTIONS else REL), (f, dev, key)
    assert_conserves(a)
    assert_conserves(b)


def assert_same_records(url: str, rolled: WeekData, raw: WeekData) -> None:
    """The jobs' Slurm records were read from their 5-minute records (the GPUs were read from the
    rollups, and every record has its rollup), and give every job row the account, partition and
    QOS the raw series give: the watcher's where it has one, else the job's claim."""

    def slurm(d: WeekData) -> set[tuple[str, str, str, str, str]]:
        return {(j.uuid, j.job.job_id, j.account, j.partition, j.qos) for j in d.jobs}

    assert slurm(rolled) == slurm(raw)
    assert {"acct-0", "acct-1", "acct-2", ""} <= {j.account for j in raw.jobs}
    assert {"normal", "high", ""} <= {j.qos for j in raw.jobs}  # "": only the claim named the job
    w = iso_week(WEEK)
    source = PrometheusSource(PrometheusSettings(url=url))
    try:
        assert source.records_rolled(w, source.gpus(w))
        # a rule file from before the record rules: the records are not there, raw series are read
        assert not rollups.records_cover(source.api, w, {SCHEDULER: "gpuledger:slurm_job_info:none"})
    finally:
        source.api.close()


def assert_hours_equal_five_minutes(url: str) -> None:
    """Every counter per GPU and day, and per job over the window, from the hourly buckets with the
    5-minute ones at the edges equals the 5-minute buckets' sum: the same buckets, added otherwise."""
    w = iso_week(WEEK)
    api = PromAPI(PrometheusSettings(url=url))
    try:
        g = rollups.grid(api, w, GPU_COUNTERS["sampled"])
        assert g.hour is not None
        # a bucket's stamp found over two hours (two range queries) or over the week (three)
        name = rollups.hourly_rollup(GPU_COUNTERS["sampled"])
        near = rollups.last_stamp(api, name, w.end + rollups.LAG)
        assert near is not None and round(near % rollups.HOUR, 3) == g.hour
        assert rollups.last_stamp(api, name, w.end + rollups.LAG, w.seconds) == near
        # the spans' edges fall inside hourly buckets, so every part of the expression is used
        assert any(g.end(d.end) < d.end for d in days(w))
        five = rollups.rollup_totals(api, w, GPU_COUNTERS, "gpuledger_gpu_info", replace(g, hour=None))
        hourly = rollups.rollup_totals(api, w, GPU_COUNTERS, "gpuledger_gpu_info", g, DAILY)
        assert set(hourly.window) == set(GPU_COUNTERS) - set(DAILY)
        compared = 0
        for kind in GPU_COUNTERS:
            assert hourly.uuids(kind) == five.uuids(kind), kind
            for uuid in five.uuids(kind):
                assert hourly.total(kind, uuid) == pytest.approx(five.total(kind, uuid), rel=1e-12, abs=1e-9)
                compared += 1
        for kind in DAILY:
            for d5, dh in zip(five.days, hourly.days, strict=True):
                assert set(dh.growth[kind]) == set(d5.growth[kind]), (kind, d5.day)
                for uuid, v in d5.growth[kind].items():
                    assert dh.growth[kind][uuid] == pytest.approx(v, rel=1e-12, abs=1e-9), (kind, d5.day, uuid)
        assert compared > 20  # GPUs x counters that have data
        jobs = rollups.grid(api, w, "gpuledger_job_gpu_sampled_seconds_total")
        assert jobs.hour is not None
        name = "gpuledger_job_gpu_busy_seconds_total"
        by = "uuid, job_id, user, pod, namespace, container"
        a, b = (
            {tuple(s.labels.values()): s.value for s in api.query(f"sum by ({by}) ({q})", w.end)}
            for q in (replace(jobs, hour=None).span(name, w.start, w.end), jobs.span(name, w.start, w.end))
        )
        assert a.keys() == b.keys() and len(a) > 10
        for k, v in a.items():
            assert b[k] == pytest.approx(v, rel=1e-12, abs=1e-9), k
    finally:
        api.close()


@pytest.mark.integration
def test_without_rollups_the_report_reads_raw_series(fleet: Fleet, tmp_path: Path) -> None:
    server = prometheus(fleet, tmp_path)
    try:
        data = week(server.url, rollups=True)
    finally:
        server.stop()
    assert data.problems == () and ROLLUP_NOTE not in data.approximations


@pytest.mark.integration
def test_the_report_from_rollups_equals_the_report_from_raw_series(rolled: Rolled, fleet: Fleet) -> None:
    assert_same_figures(rolled.five_minute().url, fleet, phased=True)


@pytest.mark.integration
def test_the_report_from_hourly_rollups_equals_the_report_from_raw_series(rolled: Rolled, fleet: Fleet) -> None:
    url = rolled.hourly().url
    assert_hours_equal_five_minutes(url)
    assert_same_figures(url, fleet, phased=True, note=HOURLY_NOTE)


@pytest.mark.integration
def test_a_week_of_kept_days_is_the_week_read_at_once(rolled: Rolled, tmp_path: Path) -> None:
    """From the hourly rollups, and from the raw series (the day cache keeps each day as it was read)."""
    url = rolled.hourly().url
    assert_kept_days_give_the_same_week(url, tmp_path / "rolled")
    assert_kept_days_give_the_same_week(url, tmp_path / "raw", rollups=False)


def assert_kept_days_give_the_same_week(url: str, folder: Path, *, rollups: bool = True) -> None:
    """The week from its days kept in files (analytics.daycache: each day read alone, with its
    jobs) is the week read at once; with the hours of the tariff, and the Slurm records read as the
    days were (from the record rollups where the days came from the rollups)."""
    w = iso_week(WEEK)

    def source() -> PrometheusSource:
        return PrometheusSource(PrometheusSettings(url=url), rollups=rollups, hourly_energy=True)

    at_once = source()
    try:
        expected = at_once.week(w)
    finally:
        at_once.close()
    inner = source()
    asked: list[object] = []  # the carry of each read of a window's Slurm record label sets
    read_sets = inner.record_sets

    def counted(w: Window, g: GpuFigures) -> RecordSets:
        asked.append(g.carry)
        return read_sets(w, g)

    setattr(inner, "record_sets", counted)  # noqa: B010
    kept = DayCached(inner, folder, url, settle=3600.0, clock=lambda: w.end + 3600.0)
    try:
        assert kept.keep_days(w) == 7
        assert [inner.carry_state(c) for c in asked] == ["hourly" if rollups else ""] * 7  # each day's, kept
        got = kept.week(w)
        assert kept.hits == 7
        assert len(asked) == 7  # the kept days' records are in their files: none read from the store
        kept.week(w, jobs=False)
        assert len(asked) == 7
        carry = kept.gpus(w).carry
        # a day's records damaged in its file: named, the file deleted, that day's read from the store
        day = sorted(folder.glob("*.json"))[2]
        head, jobs, _ = day.read_text().splitlines()
        day.write_text(f'{head}\n{jobs}\n{{"cluster_label": 5}}\n')
        again = kept.week(w)
        assert not day.exists() and len(asked) == 8
    finally:
        kept.close()
    assert_same_week(again, expected, day=BUCKET)
    assert source().carry_state(getattr(carry, "inner", None)) == ("hourly" if rollups else "")
    assert_same_week(got, expected, day=BUCKET)
    if rollups:
        assert_same_records(url, got, expected)


@pytest.mark.integration
def test_the_daemon_keeps_the_settled_days_after_a_refresh_and_its_weekly_report_reads_them(
    rolled: Rolled, tmp_path: Path
) -> None:
    """Three hours after the week: the rolling refresh reads the store, then keeps the six whole
    days of its 7 days that have settled (two hours), and with budgets the month's days before
    them too; Monday's report of the week takes its days from their files and reads only its
    first day, and gives the week read at once."""
    w = iso_week(WEEK)
    url = rolled.hourly().url
    s = analytics_settings(analytics={"source": "prometheus", "reports_dir": tmp_path / "r"}, prometheus={"url": url})
    a = Analytics(s, clock=lambda: w.end + 3 * 3600.0)
    a.server.server_close()  # not served: the tasks are called here
    budgeted = analytics_settings(
        analytics={"source": "prometheus", "reports_dir": tmp_path / "b"},
        prometheus={"url": url},
        budgets={"rules": [{"group": "user", "key": "alice", "currency": 1}]},
    )
    b = Analytics(budgeted, clock=lambda: w.end + 3 * 3600.0)
    b.server.server_close()
    try:
        assert b.refresh() is not None and b.budget_figures()
        month_start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()
        assert len(list((tmp_path / "b" / ".days").glob("*.json"))) == round((w.end - month_start) / 86400)
    finally:
        b.source.close()
    try:
        assert a.refresh() is not None
        assert len(list((tmp_path / "r" / ".days").glob("*.json"))) == 6
        assert a.run_state()[0][("days", "ok")] == 1 and "days" in a.tasks()
        assert isinstance(a.source, DayCached) and a.source.hits == 0
        assert a.weekly(w)
        assert a.source.hits == 6
        assert a.refresh() is not None and a.run_state()[0][("days", "no_data")] == 1  # nothing new to keep
    finally:
        a.source.close()
    from_days = a.reports()["week"]
    at_once = PrometheusSource(s.prometheus)
    try:
        expected = build(at_once.week(w), s.cost, previous=None, now=w.end + 3 * 3600.0)
    finally:
        at_once.close()
    worst = deviations(from_days, expected)
    assert all(dev <= 1e-9 for dev, _ in worst.values()), worst


@pytest.mark.integration
def test_vmalert_evaluating_the_same_rules_gives_the_same_report(fleet: Fleet, tmp_path: Path) -> None:
    """VictoriaMetrics holding the raw week, vmalert replaying the rule files over it (its backfill)
    and writing the rollups back, the 5-minute file then the hourly one: the report from each level
    equals the report from the raw series."""
    om = tmp_path / "fleet.om"
    synthetic_om.write(fleet, om, records=True)
    server = VictoriaMetricsServer(tmp_path)
    try:
        with om.open() as f:  # name{labels} value seconds -> ... milliseconds
            server.import_lines(
                f"{series} {value} {float(t) * 1000:.0f}"
                for series, value, t in (line.rstrip("\n").rsplit(" ", 2) for line in f if line[:1] not in ("#", "\n"))
            )
        replay(server, RULES, iso_week(WEEK))
        assert_same_figures(server.url, fleet, phased=False)
        replay(server, HOURLY_RULES, iso_week(WEEK))
        assert_hours_equal_five_minutes(server.url)
        assert_same_figures(server.url, fleet, phased=False, note=HOURLY_NOTE)
        assert_kept_days_give_the_same_week(server.url, tmp_path / "days")
    finally:
        server.stop()
