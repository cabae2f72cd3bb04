"""Every source against the truth of a synthetic fleet: the embedded history, a real Prometheus
backfilled with gpuledger's series, and one with dcgm-exporter's. Tolerances are stated per figure
(docs/analytics.md repeats them)."""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.cost import CostModel, TariffWindow
from analytics.report.build import build
from analytics.sources import SourceUnavailable
from analytics.sources.dcgm import DcgmSource
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.promapi import PromAPI
from analytics.sources.prometheus import PrometheusSource
from analytics.synthetic import Fleet
from domain.week import BenchWeek, WeekData, Window, iso_week
from exporter.slurm.watcher import WAIT_BUCKETS
from tests.support.conservation import assert_conserves
from tests.support.fleet import WEEK, history, prometheus, truth_quantile
from tests.support.prometheus import PrometheusServer

EXACT = 1e-9  # counters summed exactly (float rounding only)
STEP = 60.0  # the synthetic fleet's scrape interval


@pytest.fixture(scope="module")
def embedded(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> WeekData:
    return EmbeddedSource(history(fleet, tmp_path_factory.mktemp("hist"))).week(iso_week(WEEK))


@pytest.fixture(scope="module")
def prom(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    server = prometheus(fleet, tmp_path_factory.mktemp("prom"))
    yield server
    server.stop()


def week_of(source: PrometheusSource | DcgmSource, w: Window) -> WeekData:
    """The source's week, its HTTP client closed after."""
    try:
        return source.week(w)
    finally:
        source.api.close()


@pytest.fixture(scope="module")
def from_prom(prom: PrometheusServer) -> WeekData:
    return week_of(PrometheusSource(PrometheusSettings(url=prom.url)), iso_week(WEEK))


def _close(a: float | None, b: float, rel: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-6)


def _assert_gpus(data: WeekData, fleet: Fleet, rel: float) -> None:
    assert {g.uuid for g in data.gpus} == set(fleet.truth.gpu)
    hosts = {d.uuid: (h, d.model, str(d.index)) for h, d in fleet.devices}
    for g in data.gpus:
        t = fleet.truth.gpu[g.uuid]
        assert (g.host, g.model, g.gpu) == hosts[g.uuid]
        for name, got in (
            ("sampled", g.sampled_s),
            ("busy", g.busy_s),
            ("sm", g.sm_active_s),
            ("alloc", g.allocated_s),
            ("idle", g.allocated_idle_s),
            ("energy", g.energy_j),
        ):
            assert _close(got, t[name], rel), (g.uuid, name, got, t[name])
        days = fleet.window.seconds / 86400
        assert len(g.daily) == days and math.isclose(sum(d.busy_s for d in g.daily), t["busy"], rel_tol=1e-9)


def _assert_failures(data: WeekData, fleet: Fleet) -> None:
    t = fleet.truth
    got = {(f.partition, state): n for f in data.failures for state, n in f.finished.items() if n}
    assert got == {k: v for k, v in t.finished.items() if v}
    for f in data.failures:
        assert _close(f.failed_gpu_hours, t.failed_gpu_hours.get(f.partition, 0.0), 1e-6)
        assert f.requeued == sum(j.restarts for j in fleet.jobs if j.partition == f.partition and j.start is not None)


def test_embedded_history_is_exact(embedded: WeekData, fleet: Fleet) -> None:
    _assert_gpus(embedded, fleet, EXACT)
    assert {(j.uuid, j.job) for j in embedded.jobs} == set(fleet.truth.job)
    for j in embedded.jobs:
        sampled, busy, energy = fleet.truth.job[(j.uuid, j.job)]
        assert j.sampled_s == sampled and j.busy_s == pytest.approx(busy) and j.energy_j == pytest.approx(energy)
    for q in embedded.queue:
        waits = fleet.truth.waits[q.partition]
        assert (q.source, q.started) == ("exact", len(waits))
        assert q.wait_mean == pytest.approx(sum(waits) / len(waits))
        assert q.wait_p50 == pytest.approx(truth_quantile(waits, 0.5))
        assert q.wait_p95 == pytest.approx(truth_quantile(waits, 0.95))
        assert q.wait_max == pytest.approx(max(waits)) and not q.wait_max_is_bound
        assert q.pending_gpu_hours == pytest.approx(fleet.truth.pending_gpu_hours[q.partition])
    _assert_failures(embedded, fleet)
    assert embedded.bench is not None and embedded.bench.busbw and embedded.bench.speedup[8] == pytest.approx(6.55)


@pytest.mark.integration
def test_prometheus_equals_the_truth(from_prom: WeekData, fleet: Fleet) -> None:
    assert from_prom.problems == ()
    _assert_gpus(from_prom, fleet, 1e-9)  # increase() over whole scrapes of a counter: exact
    # per-job series begin and end inside the window; increase() may miss one scrape of each
    assert {(j.uuid, j.job) for j in from_prom.jobs} == set(fleet.truth.job)
    for j in from_prom.jobs:
        sampled, busy, energy = fleet.truth.job[(j.uuid, j.job)]
        assert abs(j.sampled_s - sampled) <= STEP + 1e-6
        assert abs(j.busy_s - busy) <= STEP + 1e-6 and abs(j.energy_j - energy) <= 1000 * STEP
    for q in from_prom.queue:
        waits = fleet.truth.waits[q.partition]
        assert (q.source, q.started) == ("histogram", len(waits))
        assert q.wait_mean == pytest.approx(sum(waits) / len(waits))  # _sum / _count: exact
        ordered = sorted(waits)
        for quantile, got in ((0.5, q.wait_p50), (0.95, q.wait_p95)):
            # histogram_quantile interpolates inside a bucket: the estimate lies within the buckets
            # that hold the order statistics around rank q x n
            below = ordered[math.floor(quantile * (len(ordered) - 1))]
            above = ordered[min(len(ordered) - 1, math.ceil(quantile * len(ordered)))]
            lo = max([0.0, *(b for b in WAIT_BUCKETS if b < below)])
            hi = min(b for b in WAIT_BUCKETS if b >= above)
            assert got is not None and lo <= got <= hi, (q.partition, quantile, got, lo, hi)
        assert q.wait_max is not None and q.wait_max_is_bound and max(waits) <= q.wait_max
        assert q.wait_max == min(b for b in WAIT_BUCKETS if b >= max(waits))
        # a gauge sampled every scrape: each pending spell is off by under one scrape interval
        n = sum(1 for j in fleet.jobs if j.partition == q.partition)
        assert q.pending_gpu_hours is not None
        assert abs(q.pending_gpu_hours - fleet.truth.pending_gpu_hours[q.partition]) <= n * STEP / 3600
    _assert_failures(from_prom, fleet)
    assert from_prom.bench is not None and from_prom.bench.speedup == pytest.approx({1: 1.0, 2: 1.92, 4: 3.61, 8: 6.55})


def _sunday_drop(data: WeekData, fleet: Fleet, dated: float) -> None:
    """Every night's all-reduce run is carried; the figure is their median, and against a previous
    week at the usual figure the Sunday drop (x 0.8) is flagged, naming that Sunday."""
    truth = [
        (r.finished, json.loads(r.data or "{}")["rows"][-1]["busbw"]) for r in fleet.bench if r.bench == "allreduce"
    ]
    assert data.bench is not None
    runs = data.bench.busbw_runs[8]
    assert [v for _, v in truth] == pytest.approx([r.value for r in runs], rel=1e-9)
    for (t, _), run in zip(truth, runs, strict=True):
        assert t <= run.finished <= t + dated  # Prometheus: the first step that sees the new value
    assert data.bench.busbw[8] == pytest.approx(statistics.median(v for _, v in truth), rel=1e-9)
    sunday = next(t for t, _ in truth if dt.datetime.fromtimestamp(t, dt.UTC).weekday() == 6)
    previous = WeekData(data.window.previous(), data.source, data.gpus, bench=BenchWeek(busbw={8: 170e9}))
    (row,) = [
        b for b in build(data, CostModel(), previous=previous).benchmarks if b.world_size == 8 and "busbw" in b.metric
    ]
    assert row.runs == len(truth) == 7 and row.change is not None and abs(row.change) < 0.05  # the median hides it
    assert row.dropped and row.worst_date == dt.datetime.fromtimestamp(sunday, dt.UTC).strftime("%Y-%m-%d")
    assert row.worst_change is not None and row.worst_change < -0.15


def test_embedded_carries_every_benchmark_run(embedded: WeekData, fleet: Fleet) -> None:
    _sunday_drop(embedded, fleet, 0.0)


@pytest.mark.integration
def test_prometheus_carries_every_benchmark_run(from_prom: WeekData, fleet: Fleet) -> None:
    _sunday_drop(from_prom, fleet, 2 * STEP)


@pytest.mark.integration
def test_prometheus_and_embedded_give_the_same_report(from_prom: WeekData, embedded: WeekData) -> None:
    cost = CostModel()
    a, b = build(from_prom, cost), build(embedded, cost)
    assert a.complete and b.complete and a.source == "prometheus" and b.source == "embedded"
    for field in (
        "available_gpu_hours",
        "sampled_gpu_hours",
        "busy_gpu_hours",
        "useful_gpu_hours",
        "utilization",
        "sm_activity",
        "allocated_idle_gpu_hours",
        "energy_kwh",
        "energy_cost",
        "hardware_cost",
        "total_cost",
        "cost_per_useful_gpu_hour",
        "idle_cost",
    ):
        assert getattr(a.fleet, field) == pytest.approx(getattr(b.fleet, field), rel=1e-9), field
    for ra, rb in zip(a.group("host"), b.group("host"), strict=True):
        assert ra.key == rb.key and ra.total_cost == pytest.approx(rb.total_cost, rel=1e-9)
    users_a = {r.key: r.total_cost for r in a.group("user")}
    users_b = {r.key: r.total_cost for r in b.group("user")}
    assert users_a.keys() == users_b.keys()
    for user, c in users_b.items():  # per-job series: within one scrape per job
        assert users_a[user] == pytest.approx(c, rel=0.01)
    assert [(x.world_size, x.verdict) for x in a.multi_gpu] == [(x.world_size, x.verdict) for x in b.multi_gpu]
    assert_conserves(a)  # from either source: users + unallocated = jobs + unallocated = hosts = fleet
    assert_conserves(b)


@pytest.mark.integration
def test_dcgm_exporter_series_give_what_they_allow(fleet: Fleet, tmp_path: Path) -> None:
    server = prometheus(fleet, tmp_path, naming="dcgm")
    try:
        data = week_of(DcgmSource(PrometheusSettings(url=server.url, dcgm_scrape_interval=STEP)), iso_week(WEEK))
    finally:
        server.stop()
    assert data.source == "dcgm" and any("aliased" in a for a in data.approximations)
    assert {g.uuid for g in data.gpus} == set(fleet.truth.gpu)
    for g in data.gpus:
        t = fleet.truth.gpu[g.uuid]
        # one gauge reading per minute of per-minute data: no aliasing here, only the edges of the window
        assert _close(g.sampled_s, t["sampled"], 1e-9) and _close(g.energy_j, t["energy"], 1e-9)
        assert _close(g.busy_s, t["busy"], 0.002) and _close(g.sm_active_s, t["sm"], 0.002)
        assert g.allocated_s is None and g.allocated_idle_s is None  # dcgm-exporter has no allocation
    assert data.jobs == () and data.failures == () and data.bench is None
    r = build(data, CostModel())
    assert r.fleet.allocated_idle_gpu_hours is None and r.group("user") == [] and r.multi_gpu == []


class _StopsAfter(PromAPI):
    """A real client that stops the real Prometheus after ``n`` queries: a crash mid-report."""

    def __init__(self, s: PrometheusSettings, server: PrometheusServer, n: int) -> None:
        super().__init__(s)
        self.server, self.n = server, n

    def _get(self, path: str, params: dict[str, str]) -> dict[str, object]:
        if self.queries >= self.n and self.server.proc.poll() is None:
            self.server.stop()
        return super()._get(path, params)


@pytest.mark.integration
@pytest.mark.parametrize("after", [3, 70])
def test_prometheus_stopped_mid_report_fails_clearly(fleet: Fleet, tmp_path: Path, after: int) -> None:
    """Stopped during the GPU totals (3; they take 63) or the per-job queries (70): the failing query is
    retried (3 attempts), then the whole report fails with SourceUnavailable, never a partial figure
    passed off as the week's."""
    server = prometheus(fleet, tmp_path)
    settings = PrometheusSettings(url=server.url, retries=2, timeout=5, concurrency=1)  # one query at a time
    api = _StopsAfter(settings, server, after)
    try:
        with pytest.raises(SourceUnavailable, match="no answer after 3 attempts"):
            week_of(PrometheusSource(settings, api), iso_week(WEEK))
    finally:
        server.stop()
    assert api.queries == after + 3


@pytest.mark.integration
def test_a_window_beyond_the_data_is_incomplete(prom: PrometheusServer, fleet: Fleet) -> None:
    w = iso_week(WEEK)
    shifted = Window(w.start + 86400, w.end + 86400, "shifted", w.timezone)
    r = build(week_of(PrometheusSource(PrometheusSettings(url=prom.url)), shifted), CostModel())
    assert not r.complete and r.coverage == pytest.approx(6 / 7, rel=1e-6)
    assert any("coverage 85.7 %" in reason and "4 of 4 GPUs" in reason for reason in r.incomplete_reasons)
    first_day_busy = sum(t["busy"] for t in fleet.truth.gpu.values()) - sum(d.busy_gpu_hours * 3600 for d in r.daily)
    assert first_day_busy > 0  # the day outside the data is missing, not averaged over


@pytest.mark.integration
def test_a_tariff_costs_the_same_from_prometheus_and_the_embedded_history(
    prom: PrometheusServer, embedded: WeekData, fleet: Fleet
) -> None:
    """Energy read hour by hour (one range query) and priced by the hour of a tariff."""
    night = TariffWindow(start_hour=0, end_hour=6, price_per_kwh=0.05)
    day = TariffWindow(start_hour=8, end_hour=20, weekdays=[0, 1, 2, 3, 4], price_per_kwh=0.60)
    cost = CostModel(energy_price_per_kwh=0.20, pue=1.25, tariff=[night, day])
    w = iso_week(WEEK)
    hourly = week_of(PrometheusSource(PrometheusSettings(url=prom.url), hourly_energy=True), w)
    a, b = build(hourly, cost), build(embedded, cost)
    truth = sum(
        joules / 3.6e6 * 1.25 * cost.price_at(w.start + 60 * k + 1, w.timezone)
        for rows in fleet.minutes.values()
        for k, (*_, joules) in enumerate(rows)
    )
    assert a.fleet.energy_cost == pytest.approx(truth, rel=1e-9)
    assert b.fleet.energy_cost == pytest.approx(truth, rel=1e-9)
    flat = build(embedded, CostModel(energy_price_per_kwh=0.20, pue=1.25)).fleet.energy_cost
    assert a.fleet.energy_cost > 1.2 * flat  # weekday daytime load at the peak price


def test_embedded_jobs_carry_gpus_idle_sm_and_partition(embedded: WeekData, fleet: Fleet) -> None:
    """The embedded history's job rows: GPUs (distinct uuids), allocated-idle and SM-active seconds
    (the GPU's, in the job's minutes: each synthetic job holds its GPU alone) and the partition."""
    gpus: dict[str, set[str]] = {}
    idle: dict[str, float] = {}
    sm: dict[str, float] = {}
    for uuid, spans in fleet.job_minutes.items():
        for key, first, last in spans:
            gpus.setdefault(key.job_id, set()).add(uuid)
            for _, _, s, _, i, _ in fleet.minutes[uuid][first:last]:
                idle[key.job_id] = idle.get(key.job_id, 0.0) + i
                sm[key.job_id] = sm.get(key.job_id, 0.0) + s
    got_idle: dict[str, float] = {}
    got_sm: dict[str, float] = {}
    for j in embedded.jobs:
        assert j.allocated_idle_s is not None and j.sm_active_s is not None
        got_idle[j.job.job_id] = got_idle.get(j.job.job_id, 0.0) + j.allocated_idle_s
        got_sm[j.job.job_id] = got_sm.get(j.job.job_id, 0.0) + j.sm_active_s
    assert got_idle.keys() == idle.keys() and any(v > 0 for v in idle.values())
    for job_id, v in idle.items():
        assert math.isclose(got_idle[job_id], v, rel_tol=EXACT, abs_tol=1e-6)
        assert math.isclose(got_sm[job_id], sm[job_id], rel_tol=EXACT, abs_tol=1e-6)
    partition = {j.job_id: j.partition for j in fleet.jobs}
    finished = {j.job_id for j in fleet.jobs if j.end < embedded.window.end}
    assert all(j.partition == partition[j.job.job_id] for j in embedded.jobs if j.job.job_id in finished)
    report = build(embedded, CostModel(), now=embedded.window.end + 1)
    jobs = {r.key: r for r in report.group("job")}
    assert {k: r.gpus for k, r in jobs.items()} == {k: len(v) for k, v in gpus.items()}
    for k, r in jobs.items():
        assert r.allocated_idle_gpu_hours is not None and r.sm_activity is not None
        assert math.isclose(r.allocated_idle_gpu_hours, idle[k] / 3600, rel_tol=1e-9, abs_tol=1e-9)
    users = report.group("user")
    assert users and all(u.gpus > 0 and u.allocated_idle_gpu_hours is not None for u in users)
    per_user: dict[str, set[str]] = {}
    for uuid, spans in fleet.job_minutes.items():
        for key, _, _ in spans:
            per_user.setdefault(key.user, set()).add(uuid)
    assert {u.key: u.gpus for u in users} == {u: len(v) for u, v in per_user.items()}
    # the held-but-idle table: worst idle cost first, every row idle
    idle_rows = report.idle_holders
    assert idle_rows and [r.idle_cost for r in idle_rows] == sorted((r.idle_cost for r in idle_rows), reverse=True)
    worst = max(jobs.values(), key=lambda r: r.idle_cost)
    assert idle_rows[0].job == worst.key and idle_rows[0].idle_cost == worst.idle_cost
