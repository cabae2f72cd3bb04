"""Pod labels from kube-state-metrics' ``kube_pod_labels`` and clusters, both sources, in real
stores: two clusters (a ``cluster`` label on every series, as external labels set it), pods whose
labels change in the window, pods kube-state-metrics never saw, a cluster scraped without
honor_labels (``exported_namespace``/``exported_pod``), the same pod name in both clusters, and
hostile label values (quote, backslash, newline). Each GPU's cluster, each pod row's labels and
every cluster's figures are checked against the generated truth."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics import synthetic, synthetic_om
from analytics.config import AnalyticsSettings, PrometheusSettings
from analytics.sources import kubernetes
from analytics.sources.dcgm import DcgmSource
from analytics.sources.prometheus import PrometheusSource
from analytics.synthetic import Fleet
from analytics.synthetic_dcgm import DcgmFleet, escape, generate
from analytics.synthetic_ksm import KsmPod, import_lines, openmetrics_lines, series
from domain.week import WeekData, Window, days
from tests.support.clock import ANCHOR
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer

pytestmark = pytest.mark.integration

WINDOW = Window(ANCHOR, ANCHOR + 2 * 86400, "2d")
CLUSTERS = ("eu-west-1", 'lab "b"\nsite\\2')  # the second: a hostile value
HOSTILE = 'ml "core"\nteam\\x'
TEAMS = ("vision", "nlp", HOSTILE)
CHOSEN = ("label_project", "label_team")
INTERVAL = 30.0
Expected = dict[tuple[str, str, str], tuple[tuple[str, str], ...]]


def plan(cluster: int, pods: list[tuple[str, str, float, float]]) -> list[KsmPod]:
    """kube-state-metrics' view of ``pods`` (namespace, pod, first, last seen): every 5th absent;
    others with a team (some changed midway, some hostile), most with a project, and an unchosen
    label."""
    out = []
    for i, (ns, pod, start, end) in enumerate(sorted(pods)):
        if i % 5 == 4:
            continue  # kube-state-metrics never saw it
        labels: dict[str, str] = {"team": TEAMS[(i + cluster) % 3], "app.kubernetes.io/name": "trainer"}
        if i % 5 != 2:
            labels["project"] = f"p{cluster}-{i % 4}"
        sets: list[tuple[float, dict[str, str]]] = [(start - 60, labels)]
        if i % 5 == 1:  # relabelled while it ran: the latest set wins
            sets = [(start - 60, labels | {"team": "before-relabel"}), ((start + end) / 2, labels)]
        out.append(KsmPod(ns, pod, start - 60, end + 60, tuple(sets), CLUSTERS[cluster]))
    return out


def expected(pods: list[KsmPod]) -> Expected:
    """(cluster, namespace, pod) -> the chosen labels of its last kube_pod_labels sample in the window."""
    last: dict[tuple[str, str, str], tuple[float, tuple[tuple[str, str], ...]]] = {}
    for metric, labels, times in series(pods, INTERVAL, honor_labels=True):
        inside = [t for t in times if WINDOW.start < t <= WINDOW.end]
        if metric != "kube_pod_labels" or not inside:
            continue
        key = (labels.get("cluster", ""), labels["namespace"], labels["pod"])
        chosen = tuple(sorted((k, v) for k, v in labels.items() if k in CHOSEN))
        if key not in last or inside[-1] > last[key][0]:
            last[key] = (inside[-1], chosen)
    return {k: v for k, (_, v) in last.items()}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


# --- dcgm-exporter's series ---------------------------------------------------------------


@pytest.fixture(scope="module")
def dcgm_fleets() -> dict[str, DcgmFleet]:
    return {
        c: generate(WINDOW.start - 3600, days=2.1, interval=INTERVAL, seed=21 + i, cluster=c)
        for i, c in enumerate(CLUSTERS)
    }


def dcgm_ksm(fleets: dict[str, DcgmFleet]) -> tuple[list[tuple[list[KsmPod], bool]], Expected]:
    """Per cluster its kube-state-metrics pods and whether scraped with honor_labels (the second
    not), a decoy in the second with the first's pod name (seen later, other labels); and the
    expected labels."""
    out: list[tuple[list[KsmPod], bool]] = []
    want: Expected = {}
    for i, f in enumerate(fleets.values()):
        spans: dict[tuple[str, str], list[float]] = defaultdict(list)
        for ss in f.scrapes.values():
            for s in ss:
                for pod in s.jobs:
                    spans[pod.namespace, pod.pod].append(s.t)
        pods = plan(i, [(ns, pod, min(ts), max(ts)) for (ns, pod), ts in spans.items()])
        want |= expected(pods)
        out.append((pods, i == 0))
    first = out[0][0][0]
    decoy = KsmPod(first.namespace, first.pod, WINDOW.start, WINDOW.end, ((0.0, {"team": "decoy"}),), CLUSTERS[1])
    out[1][0].append(decoy)
    return out, want


@pytest.fixture(scope="module")
def dcgm_expected(dcgm_fleets: dict[str, DcgmFleet]) -> Expected:
    return dcgm_ksm(dcgm_fleets)[1]


@pytest.fixture(scope="module")
def dcgm_prometheus(dcgm_fleets: dict[str, DcgmFleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prom")
    om = folder / "all.om"
    with om.open("w") as out:
        for f in dcgm_fleets.values():
            part = folder / "part.om"
            f.write_openmetrics(part)
            out.writelines(line for line in lines(part) if not line.startswith("# EOF"))
        for pods, honor in dcgm_ksm(dcgm_fleets)[0]:
            out.writelines(openmetrics_lines(pods, INTERVAL, honor))
        out.write("# EOF\n")
    server = PrometheusServer.backfilled(folder, om)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def dcgm_victoria(dcgm_fleets: dict[str, DcgmFleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("vm")
    everything = folder / "all.txt"
    with everything.open("w") as out:
        for f in dcgm_fleets.values():
            part = folder / "part.txt"
            f.write_import(part)
            out.writelines(lines(part))
        for pods, honor in dcgm_ksm(dcgm_fleets)[0]:
            out.writelines(import_lines(pods, INTERVAL, honor))
    server = VictoriaMetricsServer.imported(folder, everything)
    yield server.url
    server.stop()


def read_dcgm(url: str, pod_labels: tuple[str, ...] = CHOSEN) -> tuple[WeekData, int]:
    s = PrometheusSettings(url=url, dcgm_scrape_interval=INTERVAL, kube_state_metrics=False)
    source = DcgmSource(s, pod_labels=pod_labels)
    try:
        return source.week(WINDOW), source.api.queries
    finally:
        source.api.close()


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def dcgm_store(request: pytest.FixtureRequest) -> tuple[str, str]:
    url = request.getfixturevalue("dcgm_prometheus" if request.param == "prometheus" else "dcgm_victoria")
    return request.param, url


def test_dcgm_clusters_and_pod_labels(
    dcgm_store: tuple[str, str], dcgm_fleets: dict[str, DcgmFleet], dcgm_expected: Expected
) -> None:
    name, url = dcgm_store
    data, queries = read_dcgm(url)
    assert data.problems == (), name
    cluster_of = {g.uuid: c for c, f in dcgm_fleets.items() for g in f.gpus}
    assert {g.uuid: g.cluster for g in data.gpus} == cluster_of, name
    for c, f in dcgm_fleets.items():  # each cluster's figures: its own truth
        truth = f.truth(WINDOW.start, WINDOW.end)
        mine = [g for g in data.gpus if g.cluster == c]
        assert sum(g.sampled_s for g in mine) == pytest.approx(sum(t.sampled_s for t in truth.gpu.values()), rel=1e-9)
        assert sum(g.busy_s for g in mine) == pytest.approx(sum(t.busy_s for t in truth.gpu.values()), rel=1e-6)
        got_j, true_j = sum(g.energy_j or 0.0 for g in mine), sum(t.energy_j for t in truth.gpu.values())
        assert got_j == pytest.approx(true_j, rel=0.01)
        rows = [j for j in data.jobs if cluster_of[j.uuid] == c]
        assert sum(j.sampled_s for j in rows) == pytest.approx(sum(t.held_s for t in truth.holders.values()), rel=1e-9)
    seen = {"absent": 0, "hostile": 0, "no project": 0}
    for j in data.jobs:
        want = dcgm_expected.get((cluster_of[j.uuid], j.job.namespace, j.job.pod), ())
        assert j.labels == want, (name, j.job)
        seen["absent"] += not want
        seen["hostile"] += ("label_team", HOSTILE) in want
        seen["no project"] += bool(want) and "label_project" not in dict(want)
    assert all(seen.values()), seen  # every case is in the data
    assert not any(("label_team", "before-relabel") in j.labels for j in data.jobs)
    assert not any(("label_team", "decoy") in j.labels for j in data.jobs)
    # the labels cost one query a day, whatever the fleet
    without, plain = read_dcgm(url, pod_labels=())
    assert queries - plain == len(days(WINDOW)) and all(j.labels == () for j in without.jobs)
    assert [(g.uuid, g.busy_s) for g in without.gpus] == [(g.uuid, g.busy_s) for g in data.gpus]


def test_dcgm_without_kube_state_metrics_says_so(dcgm_fleets: dict[str, DcgmFleet], tmp_path: Path) -> None:
    f = next(iter(dcgm_fleets.values()))
    f.write_openmetrics(tmp_path / "dcgm.om")
    server = PrometheusServer.backfilled(tmp_path, tmp_path / "dcgm.om")
    try:
        data, _ = read_dcgm(server.url)
    finally:
        server.stop()
    assert data.problems == (kubernetes.NO_LABELS,)
    assert data.jobs and all(j.labels == () for j in data.jobs)


# --- gpuledger's own series ---------------------------------------------------------------

JOB = re.compile(r'job_id="([^"]*)",user="([^"]*)"')
NAMESPACES = ("ml-research", "inference", "team-vision")


def as_pod(job_id: str) -> tuple[str, str]:
    return NAMESPACES[int(job_id) % 3], f"job-{job_id}"


def kubernetes_series(line: str, cluster: str) -> str:
    """A gpuledger series as a Kubernetes cluster's would be: the cluster label on it, and a
    per-job series' Slurm job named as a pod (jobs of both clusters share numbers: the same pod
    names in each)."""
    if line.startswith("#"):
        return line
    line = line.replace("{", f'{{cluster="{escape(cluster)}",', 1)
    if line.startswith("gpuledger_job_gpu_"):
        ns, pod = as_pod(JOB.search(line)[1])  # type: ignore[index]
        line = JOB.sub(f'pod="{pod}",namespace="{ns}",container="main"', line)
    return line


@pytest.fixture(scope="module")
def fleets() -> dict[str, Fleet]:
    return {
        c: synthetic.generate(WINDOW, hosts=1, gpus_per_host=2, seed=11 + i, minute_step=60)
        for i, c in enumerate(CLUSTERS)
    }


def gpuledger_ksm(fleets: dict[str, Fleet]) -> tuple[list[tuple[list[KsmPod], bool]], Expected]:
    out: list[tuple[list[KsmPod], bool]] = []
    want: Expected = {}
    for i, f in enumerate(fleets.values()):
        spans: dict[tuple[str, str], list[float]] = defaultdict(list)  # a pod on two GPUs: one pod
        for held in f.job_minutes.values():
            for key, first, last in held:
                spans[as_pod(key.job_id)] += [WINDOW.start + 60 * first, WINDOW.start + 60 * last]
        ksm = plan(i, [(ns, pod, min(ts), max(ts)) for (ns, pod), ts in spans.items()])
        want |= expected(ksm)
        out.append((ksm, i == 0))
    return out, want


@pytest.fixture(scope="module")
def gpuledger_prometheus(fleets: dict[str, Fleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prom")
    om = folder / "all.om"
    with om.open("w") as out:
        for c, f in fleets.items():
            synthetic_om.write(f, folder / "part.om")
            out.writelines(kubernetes_series(x, c) for x in lines(folder / "part.om") if not x.startswith("# EOF"))
        for pods, honor in gpuledger_ksm(fleets)[0]:
            out.writelines(openmetrics_lines(pods, INTERVAL, honor))
        out.write("# EOF\n")
    server = PrometheusServer.backfilled(folder, om)
    yield server.url
    server.stop()


def read_gpuledger(url: str, pod_labels: tuple[str, ...] = CHOSEN) -> tuple[WeekData, int]:
    source = PrometheusSource(PrometheusSettings(url=url, kube_state_metrics=False), pod_labels=pod_labels)
    try:
        return source.week(WINDOW), source.api.queries
    finally:
        source.api.close()


def test_gpuledger_clusters_and_pod_labels(gpuledger_prometheus: str, fleets: dict[str, Fleet]) -> None:
    data, queries = read_gpuledger(gpuledger_prometheus)
    want = gpuledger_ksm(fleets)[1]
    assert data.problems == ()
    cluster_of = {d.uuid: c for c, f in fleets.items() for _, d in f.devices}
    assert {g.uuid: g.cluster for g in data.gpus} == cluster_of
    for c, f in fleets.items():
        mine = [g for g in data.gpus if g.cluster == c]
        for attr, kind in (("sampled_s", "sampled"), ("busy_s", "busy"), ("energy_j", "energy")):
            got = sum(getattr(g, attr) for g in mine)
            assert got == pytest.approx(sum(t[kind] for t in f.truth.gpu.values()), rel=1e-9), (c, attr)
        rows = {(j.uuid, j.job.namespace, j.job.pod): j for j in data.jobs if cluster_of[j.uuid] == c}
        truth = {(u, *as_pod(k.job_id)): held for (u, k), (held, _, _) in f.truth.job.items()}
        assert set(rows) == set(truth)  # each pod's row, in its own cluster
        for k, r in rows.items():  # per-job series begin and end inside the window: one scrape either way
            assert abs(r.sampled_s - truth[k]) <= 60 + 1e-6, k
    both = {j.job.pod for j in data.jobs if cluster_of[j.uuid] == CLUSTERS[0]} & {
        j.job.pod for j in data.jobs if cluster_of[j.uuid] == CLUSTERS[1]
    }
    assert both  # the same pod names in both clusters, told apart by the cluster
    labelled = 0
    for j in data.jobs:
        assert j.labels == want.get((cluster_of[j.uuid], j.job.namespace, j.job.pod), ()), j.job
        labelled += bool(j.labels)
    assert 0 < labelled < len(data.jobs)
    assert any(("label_team", HOSTILE) in j.labels for j in data.jobs)
    _, plain = read_gpuledger(gpuledger_prometheus, pod_labels=())
    assert queries - plain == len(days(WINDOW))


def test_pod_labels_and_cluster_label_are_checked() -> None:
    assert AnalyticsSettings(pod_labels=["label_team", "label_team", "label_a"]).pod_labels == [
        "label_team",
        "label_a",
    ]
    for bad in (["team"], ["label_team-x"], ["label_"]):
        with pytest.raises(ValueError, match="label_<name>"):
            AnalyticsSettings(pod_labels=bad)
    assert PrometheusSettings(cluster_label="").cluster_label == ""
    with pytest.raises(ValueError, match="not a Prometheus label name"):
        PrometheusSettings(cluster_label="kube-cluster")
