"""A MIG GPU read from Prometheus gives the report the embedded history gives: the GPU's row says
its busy time is its instances' SM activity (``gpuledger_gpu_mig_sampled_seconds_total``), the jobs
on its slices are charged their shares, and both conserve. Read from the raw series and from the
backfilled 5-minute rollups (which carry the MIG counter too)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analytics import synthetic
from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.model import Report
from analytics.sources.base import MIG_SM_ACTIVE
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.prometheus import ROLLUP_NOTE, PrometheusSource
from analytics.synthetic import Fleet
from domain.week import WeekData, Window
from tests.support.conservation import assert_conserves
from tests.support.fleet import history
from tests.support.prometheus import PrometheusServer
from tests.support.rollups import prometheus_with_rollups

WINDOW = Window(1_794_787_200.0, 1_794_787_200.0 + 2 * 86400, "2d")  # Monday 2026-11-16, two days
REL = 0.01
SCRAPE = 60.0  # the fleet's sample step: increase() (raw) and a series' first bucket (rollups) extrapolate


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return synthetic.generate(WINDOW, hosts=1, gpus_per_host=2, seed=5, mig_hosts=1)


@pytest.fixture(scope="module")
def embedded(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> WeekData:
    return EmbeddedSource(history(fleet, tmp_path_factory.mktemp("mig-hist"))).week(WINDOW)


@pytest.fixture(scope="module")
def prom(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """The fleet's series, and their rollups backfilled by promtool."""
    server = prometheus_with_rollups(fleet, WINDOW, tmp_path_factory.mktemp("mig-prom"))
    yield server
    server.stop()


def read(url: str, rollups: bool) -> WeekData:
    source = PrometheusSource(PrometheusSettings(url=url, kube_state_metrics=False), rollups=rollups)
    try:
        return source.week(WINDOW)
    finally:
        source.api.close()


def _jobs_on(r: Report, jobs: set[str]) -> dict[str, tuple[float, float, float]]:
    return {
        row.key.split(" ")[-1]: (row.sampled_gpu_hours, row.hardware_cost, row.busy_gpu_hours)
        for row in r.rows
        if row.group == "job" and row.key.split(" ")[-1] in jobs
    }


@pytest.mark.integration
@pytest.mark.parametrize("rollups", [False, True], ids=["raw", "rollups"])
def test_prometheus_reports_the_mig_gpu_as_the_history_does(
    fleet: Fleet, embedded: WeekData, prom: PrometheusServer, rollups: bool
) -> None:
    data = read(prom.url, rollups)
    assert data.problems == ()
    assert (ROLLUP_NOTE in data.approximations) == rollups
    (mig_gpu,) = fleet.mig
    assert {g.uuid: g.busy_measure for g in data.gpus} == {g.uuid: g.busy_measure for g in embedded.gpus}
    assert {g.uuid for g in data.gpus if g.busy_measure == MIG_SM_ACTIVE} == {mig_gpu}

    cost = CostModel()
    a, b = build(data, cost), build(embedded, cost)
    (row_a,) = [r for r in a.rows if r.group == "gpu" and r.key.endswith(mig_gpu)]
    (row_b,) = [r for r in b.rows if r.group == "gpu" and r.key.endswith(mig_gpu)]
    assert row_a.busy_measure == row_b.busy_measure == "mig_sm_active"
    assert row_a.busy_gpu_hours == pytest.approx(row_b.busy_gpu_hours, rel=REL)

    on_slices = {sp.key.job_id for sp in fleet.mig[mig_gpu]}
    got, want = _jobs_on(a, on_slices), _jobs_on(b, on_slices)
    assert got.keys() == want.keys() and len(got) >= 3
    for job, figures in want.items():
        held = figures[0]
        for x, y in zip(got[job], figures, strict=True):  # within 1 %, and a scrape interval at each end
            assert abs(x - y) <= REL * y + 2 * SCRAPE / 3600 * y / held, (job, got[job], figures)
    assert_conserves(a)
    assert_conserves(b)


@pytest.mark.integration
@pytest.mark.parametrize("rollups", [False, True], ids=["raw", "rollups"])
def test_prometheus_reads_each_jobs_link_bytes_as_the_history_does(
    fleet: Fleet, embedded: WeekData, prom: PrometheusServer, rollups: bool
) -> None:
    """The exporter's gpuledger_job_gpu_link_bytes_total (the GPU's bytes x the job's share, by link)
    against the history's minutes split by share: the same bytes per job and GPU, NVLink only where
    the GPU has it (none on the MIG GPU: a dash, not 0), PCIe everywhere, slice jobs their share."""
    data = read(prom.url, rollups)
    got = {(j.uuid, j.job.job_id): (j.nvlink_bytes, j.pcie_bytes) for j in data.jobs}
    want = {(j.uuid, j.job.job_id): (j.nvlink_bytes, j.pcie_bytes) for j in embedded.jobs}
    assert got.keys() == want.keys() and len(want) >= 5
    (mig_gpu,) = fleet.mig
    assert {u for (u, _), (nv, _) in want.items() if nv is None} == {mig_gpu}
    held = {(j.uuid, j.job.job_id): j.sampled_s for j in embedded.jobs}
    for k, (nv, pcie) in want.items():
        g_nv, g_pcie = got[k]
        assert (g_nv is None) == (nv is None), k
        for x, y in ((g_nv, nv), (g_pcie, pcie)):
            if x is not None and y is not None:  # within 1 %, and a scrape interval at each end
                assert abs(x - y) <= REL * y + 2 * SCRAPE * y / held[k], (k, got[k], want[k])
