"""dcgm-exporter's series in the shapes a Kubernetes cluster stores them (pods coming and going,
``exported_*`` labels, an exporter restart, a scrape gap, a GPU without profiling fields), loaded
into a real Prometheus and a real VictoriaMetrics: the dcgm source against the truth computed
from the generated scrapes, and the old way of reading them (a mean of per-series means, per-series
growth summed) shown to be off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.report.build import build
from analytics.sources.dcgm import DcgmSource, _growth, workload
from analytics.synthetic_dcgm import DcgmFleet, Truth, generate
from analytics.week_data import WeekData, Window, days
from exporter.attribution.shares import JobKey
from tests.support.clock import ANCHOR
from tests.support.conservation import assert_conserves
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer

INTERVAL = 30.0
WINDOW = Window(ANCHOR, ANCHOR + 3 * 86400, "dcgm-3d")
DATA_START = ANCHOR + 7980.0  # the history begins inside the window
UTIL_PP = 0.5  # utilisation, percentage points
ENERGY_REL = 0.01
HELD_REL = 0.01


@pytest.fixture(scope="module")
def fleet() -> DcgmFleet:
    # data from inside the window's first day to past its end: the end is clipped, the start found
    return generate(DATA_START, days=(WINDOW.end - DATA_START) / 86400 + 0.01, interval=INTERVAL, seed=7)


@pytest.fixture(scope="module")
def truth(fleet: DcgmFleet) -> Truth:
    return fleet.truth(WINDOW.start, WINDOW.end)


@pytest.fixture(scope="module")
def prometheus(fleet: DcgmFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("prom")
    fleet.write_openmetrics(folder / "dcgm.om")
    server = PrometheusServer.backfilled(folder, folder / "dcgm.om")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def victoria(fleet: DcgmFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetricsServer]:
    folder = tmp_path_factory.mktemp("vm")
    fleet.write_import(folder / "dcgm.txt")
    server = VictoriaMetricsServer.imported(folder, folder / "dcgm.txt")
    yield server
    server.stop()


def read(url: str, *, jobs: bool = True) -> tuple[WeekData, int]:
    """The window from the dcgm source at ``url``, and the queries it sent."""
    source = DcgmSource(PrometheusSettings(url=url, dcgm_scrape_interval=INTERVAL, kube_state_metrics=False))
    try:
        return source.week(WINDOW, jobs=jobs), source.api.queries
    finally:
        source.api.close()


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def store(request: pytest.FixtureRequest) -> tuple[str, WeekData, int]:
    server = request.getfixturevalue("prometheus" if request.param == "prometheus" else "victoria")
    data, queries = read(server.url)
    return request.param, data, queries


def test_the_data_has_the_shapes_that_broke_the_old_source(fleet: DcgmFleet, truth: Truth) -> None:
    series = {s.labels for ss in fleet.scrapes.values() for s in ss}
    labels = [dict(x) for x in series]
    assert any("exported_pod" in x for x in labels) and any(workload(x) and "exported_pod" not in x for x in labels)
    assert len({x["Hostname"] for x in labels if x["kubernetes_node"] == "gpu-node-a"}) == 2  # the restart
    assert len(truth.pods) >= 20 and len(series) > 3 * len(truth.gpu)
    no_pod = [s for ss in fleet.scrapes.values() for s in ss if s.pod is None]
    assert len(no_pod) > 0.1 * sum(map(len, fleet.scrapes.values()))
    assert any(f.stalled_s for f in truth.gpu.values()) and any(f.stalled_s is None for f in truth.gpu.values())
    # the old source's figures from the truth's own scrapes: off by more than the tolerances
    bounds = [WINDOW.start, *(d.end for d in days(WINDOW))]
    old = fleet.old_method(bounds)
    sampled = sum(f.sampled_s for f in truth.gpu.values())
    old_util = sum(b for b, _ in old.values()) / sampled
    true_util = sum(f.busy_s for f in truth.gpu.values()) / sampled
    assert abs(old_util - true_util) * 100 > 4 * UTIL_PP
    old_energy, true_energy = sum(e for _, e in old.values()), sum(f.energy_j for f in truth.gpu.values())
    assert old_energy / true_energy - 1 > 10 * ENERGY_REL
    for uuid, t in truth.gpu.items():
        assert old[uuid][1] / t.energy_j - 1 > ENERGY_REL  # every GPU: a recurring series counts the others' growth


@pytest.mark.integration
def test_gpus_match_the_truth(store: tuple[str, WeekData, int], truth: Truth) -> None:
    name, data, _ = store
    assert {g.uuid for g in data.gpus} == set(truth.gpu), name
    for g in data.gpus:
        t = truth.gpu[g.uuid]
        assert g.host == truth.host[g.uuid]  # the node, not the exporter pod; the restart splits nothing
        assert g.sampled_s == pytest.approx(t.sampled_s, rel=1e-9)
        assert abs(g.busy_s / g.sampled_s - t.util) * 100 < UTIL_PP
        assert g.busy_s == pytest.approx(t.busy_s, rel=1e-6)
        assert g.energy_j == pytest.approx(t.energy_j, rel=ENERGY_REL)
        if t.sm_active_s is None:
            assert g.sm_active_s is None and g.stalled_s is None
        else:
            assert g.sm_active_s == pytest.approx(t.sm_active_s, rel=1e-6)
            assert g.stalled_s == pytest.approx(t.stalled_s, rel=1e-6, abs=1e-6)
        assert sum(d.sampled_s for d in g.daily) == pytest.approx(g.sampled_s)
    fleet_busy = sum(g.busy_s for g in data.gpus) / sum(g.sampled_s for g in data.gpus)
    true_busy = sum(t.busy_s for t in truth.gpu.values()) / sum(t.sampled_s for t in truth.gpu.values())
    assert abs(fleet_busy - true_busy) * 100 < UTIL_PP
    assert sum(g.energy_j or 0.0 for g in data.gpus) == pytest.approx(
        sum(t.energy_j for t in truth.gpu.values()), rel=ENERGY_REL
    )
    assert any("no minimum duration" in a for a in data.approximations)


@pytest.mark.integration
def test_pods_match_the_truth(store: tuple[str, WeekData, int], truth: Truth) -> None:
    _, data, _ = store
    got = {(j.uuid, j.job): j for j in data.jobs}
    assert set(got) == set(truth.pods)
    energy = {g.uuid: g.energy_j or 0.0 for g in data.gpus}
    held: dict[str, float] = {}
    for key, t in truth.pods.items():
        j = got[key]
        assert j.job.user == "" and j.job.job_id == "" and j.job.namespace and j.job.container
        assert j.sampled_s == pytest.approx(t.sampled_s, rel=HELD_REL) and j.charged_s == j.sampled_s
        assert j.busy_s == pytest.approx(t.busy_s, rel=1e-6, abs=1e-6)
        assert j.energy_j == pytest.approx(t.energy_j, rel=ENERGY_REL)
        held[j.uuid] = held.get(j.uuid, 0.0) + j.energy_j
    for uuid, e in held.items():
        assert e <= energy[uuid]  # the pods on a GPU never hold more energy than it used


@pytest.mark.integration
def test_history_start_and_bounded_queries(store: tuple[str, WeekData, int], truth: Truth) -> None:
    _, data, queries = store
    assert data.history_start == pytest.approx(truth.history_start, abs=1e-3)
    assert queries <= 10 * len(days(WINDOW)) + 5  # per day, whatever the GPUs and pods


@pytest.mark.integration
def test_without_jobs_and_a_node_label_missing(prometheus: PrometheusServer, truth: Truth) -> None:
    data, _ = read(prometheus.url, jobs=False)
    assert data.jobs == () and len(data.gpus) == len(truth.gpu)
    s = PrometheusSettings(url=prometheus.url, dcgm_scrape_interval=INTERVAL, dcgm_host_labels=["node", "Hostname"])
    source = DcgmSource(s)
    try:
        hosts = {g.uuid: g.host for g in source.week(WINDOW, jobs=False).gpus}
    finally:
        source.api.close()
    # no node label: the exporter pod's name, taken from the GPU's most recent series (after the restart)
    assert {hosts[u] for u, h in truth.host.items() if h == "gpu-node-a"} == {"nvidia-dcgm-exporter-q9m4t"}


@pytest.mark.integration
def test_the_report_builds(store: tuple[str, WeekData, int], truth: Truth) -> None:
    name, data, _ = store
    r = build(data, CostModel())
    assert r.fleet.gpus == len(truth.gpu), name
    assert {row.key for row in r.group("host")} == {"gpu-node-a", "gpu-node-b"}
    # every pod has a namespace: namespaces + unallocated add up to the fleet too
    assert r.group("namespace") and all(j.job.namespace for j in data.jobs)
    assert_conserves(r, groups=("user", "namespace", "job"))


def test_energy_growth_at_day_boundaries() -> None:
    assert _growth(100.0, 150.0, 90.0) == (50.0, False)
    assert _growth(None, 150.0, 20.0) == (130.0, False)  # the first day: from its first reading
    assert _growth(1000.0, 150.0, 10.0) == (140.0, True)  # a reset: the growth since it, and said so
    assert _growth(100.0, None, None) == (None, False)


def test_workload_labels_in_either_spelling() -> None:
    exporter = {
        "Hostname": "nvidia-dcgm-exporter-7xk2p",
        "pod": "nvidia-dcgm-exporter-7xk2p",
        "namespace": "gpu-operator",
    }
    assert workload(exporter) is None  # the target's own labels: no pod holds the GPU
    renamed = exporter | {"exported_pod": "train-1", "exported_namespace": "ml", "exported_container": "trainer"}
    assert workload(renamed) == JobKey(pod="train-1", namespace="ml", container="trainer")
    plain = exporter | {"pod": "train-2", "namespace": "ml", "container": "trainer"}
    assert workload(plain) == JobKey(pod="train-2", namespace="ml", container="trainer")
    assert workload({"UUID": "GPU-1"}) is None
