"""The Prometheus source's Slurm account, partition and QOS, joined on the row's own job in a real
Prometheus: two clusters whose controllers both handed out job 1001 (same user, other accounts),
a third cluster whose job 1001 has no ``gpuledger_job_info`` at all, and a two-host job of which
only one host's exporter named the account. Each row gets its own cluster's (or its own
exporter's) values, never another cluster's."""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import gpuledger.statements
from analytics.config import FullSettings, PrometheusSettings
from analytics.cost import CostModel
from analytics.report.build import build, job_key
from analytics.report.model import UNALLOCATED
from analytics.sources.prometheus import PrometheusSource
from analytics.statements.job import AmbiguousJob, UnknownJob, job_figures
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, Window
from gpuledger.cli import main
from tests.support.clock import ANCHOR
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.integration  # starts a real Prometheus

WINDOW = Window(ANCHOR, ANCHOR + 3 * 3600, "3h")
STEP = 60
# host -> (cluster, GPU uuid)
GPUS = {
    "a-node1": ("site-a", "GPU-a1"),
    "a-node2": ("site-a", "GPU-a2"),
    "b-node1": ("site-b", "GPU-b1"),
    "c-node1": ("site-c", "GPU-c1"),
}
# host -> its exporter's job_info series: (job_id, user, account, partition, qos)
INFO = {
    "a-node1": [("1001", "ada", "pi-a", "gpu-a", "normal"), ("1002", "bob", "pi-a2", "", "")],
    "b-node1": [("1001", "ada", "pi-b", "gpu-b", "high")],
    # a-node2 runs 1002 too but its exporter never named it; c-node1's 1001 named nothing
}
# host -> its jobs (job_id, user)
JOBS = {
    "a-node1": [("1001", "ada"), ("1002", "bob")],
    "a-node2": [("1002", "bob")],
    "b-node1": [("1001", "ada")],
    "c-node1": [("1001", "ada")],
}


def _openmetrics(path: Path) -> None:
    times = range(int(WINDOW.start) - STEP, int(WINDOW.end) + 2 * STEP, STEP)
    with path.open("w") as out:

        def series(name: str, labels: dict[str, str], per_step: float, every: int = 1) -> None:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            for i, t in enumerate(times):
                if i % every == 0:
                    out.write(f"{name}{{{lab}}} {per_step * i:g} {t}\n")

        for host, (cluster, uuid) in GPUS.items():
            base = {"cluster": cluster, "instance": f"{host}:10044", "job": "gpuledger", "gpu": "0", "uuid": uuid}
            series("gpuledger_gpu_info", {**base, "model": "NVIDIA H200", "hostname": host}, 0.0)
            for name, v in (("sampled_seconds", STEP), ("busy_seconds", STEP / 2), ("energy_joules", 300.0 * STEP)):
                series(f"gpuledger_gpu_{name}_total", base, v)
            for job_id, user in JOBS[host]:
                share = 1 / len(JOBS[host])
                jl = {**base, "job_id": job_id, "user": user, "pod": "", "namespace": "", "container": ""}
                for name, v in (("sampled_seconds", STEP), ("charged_seconds", STEP * share)):
                    series(f"gpuledger_job_gpu_{name}_total", jl, v)
            for job_id, user, account, partition, qos in INFO.get(host, []):
                labels = {"cluster": cluster, "instance": f"{host}:10044", "job": "gpuledger", "job_id": job_id}
                labels |= {"user": user, "account": account, "partition": partition, "qos": qos}
                series("gpuledger_job_info", labels, 0.0, every=7)  # a gauge of 0: last_over_time finds it
        out.write("# EOF\n")


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("accounts")
    _openmetrics(folder / "data.om")
    server = PrometheusServer.backfilled(folder, folder / "data.om")
    yield server.url
    server.stop()


def read(url: str, cluster_label: str = "cluster") -> WeekData:
    source = PrometheusSource(PrometheusSettings(url=url, cluster_label=cluster_label, kube_state_metrics=False))
    try:
        return source.week(WINDOW)
    finally:
        source.api.close()


def attrs(data: WeekData) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(uuid, job id) -> (account, partition, qos)."""
    return {(j.uuid, j.job.job_id): (j.account, j.partition, j.qos) for j in data.jobs}


def test_each_cluster_s_job_1001_has_its_own_account(prometheus_url: str) -> None:
    data = read(prometheus_url)
    assert data.problems == ()
    assert {g.uuid: g.cluster for g in data.gpus} == {uuid: c for c, uuid in GPUS.values()}
    assert attrs(data) == {
        ("GPU-a1", "1001"): ("pi-a", "gpu-a", "normal"),
        ("GPU-b1", "1001"): ("pi-b", "gpu-b", "high"),
        ("GPU-c1", "1001"): ("", "", ""),  # its cluster named nothing: none, not site-a's or site-b's
        ("GPU-a1", "1002"): ("pi-a2", "", ""),
        ("GPU-a2", "1002"): ("pi-a2", "", ""),  # its own exporter named nothing: its cluster's job did
    }
    report = build(data, CostModel(), now=WINDOW.end)
    accounts = {r.key: r.sampled_gpu_hours for r in report.group("account")}
    assert accounts == pytest.approx({"pi-a": 1.5, "pi-a2": 4.5, "pi-b": 3.0, "(none)": 3.0})  # charged: shared halves


def test_without_a_cluster_label_each_exporter_s_own_series_wins(prometheus_url: str) -> None:
    """``cluster_label = ""``: clusters are not told apart, but a row still takes its own exporter's
    series before any other host's."""
    got = attrs(read(prometheus_url, cluster_label=""))
    assert got[("GPU-a1", "1001")] == ("pi-a", "gpu-a", "normal")
    assert got[("GPU-b1", "1001")] == ("pi-b", "gpu-b", "high")
    assert got[("GPU-a2", "1002")] == ("pi-a2", "", "")
    # the limit of no cluster label: a host with nothing of its own takes another host's job 1001
    assert got[("GPU-c1", "1001")] in {("pi-a", "gpu-a", "normal"), ("pi-b", "gpu-b", "high")}


def test_each_cluster_s_job_1001_is_its_own_job_row_and_can_be_looked_up(prometheus_url: str) -> None:
    """Job ids are a scheduler's own: over several clusters a job row is ``cluster:job``, and each
    holds only its own cluster's hours; ``gpuledger job`` finds one by that key and refuses the
    bare id that three clusters share, naming the choices."""
    report = build(read(prometheus_url), CostModel(), now=WINDOW.end)
    jobs = report.group("job")
    # each a 3 h window; a-node1's two jobs halve its GPU (charged), a-node2's 1002 has it whole
    assert {r.key: r.gpus for r in jobs} == {"site-a:1001": 1, "site-a:1002": 2, "site-b:1001": 1, "site-c:1001": 1}
    assert {r.key: r.sampled_gpu_hours for r in jobs} == pytest.approx(
        {"site-a:1001": 1.5, "site-a:1002": 4.5, "site-b:1001": 3.0, "site-c:1001": 3.0}
    )
    assert sum(r.total_cost for r in report.group("job")) + report.group(UNALLOCATED)[0].total_cost == pytest.approx(
        report.fleet.total_cost
    )
    s = FullSettings(
        analytics={"source": "prometheus"}, prometheus={"url": prometheus_url, "kube_state_metrics": False}
    )
    source = PrometheusSource(s.prometheus)
    try:
        f = job_figures(source, "site-b:1001", s, WINDOW.end)
        assert (f.job, f.account, f.partition, f.gpus) == ("site-b:1001", "pi-b", "gpu-b", 1)
        assert f.row.sampled_gpu_hours == pytest.approx(3.0, abs=STEP / 3600)  # its series start a step early
        with pytest.raises(AmbiguousJob) as e:
            job_figures(source, "1001", s, WINDOW.end)
        assert e.value.keys == ["site-a:1001", "site-b:1001", "site-c:1001"]
        assert job_figures(source, "1002", s, WINDOW.end).job == "site-a:1002"  # one cluster's: no doubt
        with pytest.raises(UnknownJob):
            job_figures(source, "site-z:1001", s, WINDOW.end)
    finally:
        source.api.close()


def test_one_cluster_keeps_plain_job_ids() -> None:
    """A window of one cluster (or of none named) keys its jobs as the scheduler does."""
    gpu = GpuWeek("GPU-1", "h1", "NVIDIA H200", "0", 3600, 1800, None, None, None, 1e6, cluster="only")
    job = JobWeek("GPU-1", "h1", JobKey(job_id="7", user="ada"), 3600, 1800, 1e6)
    data = WeekData(WINDOW, "prometheus", (gpu,), (job,))
    assert data.jobs[0].cluster == "" and job_key(data.jobs[0]) == "7"
    two = WeekData(WINDOW, "prometheus", (gpu, replace(gpu, uuid="GPU-2", cluster="other")), (job,))
    assert job_key(two.jobs[0]) == "only:7"


def test_the_job_command_names_the_clusters_of_a_shared_id(
    prometheus_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpuledger.statements, "time", types.SimpleNamespace(time=lambda: WINDOW.end))
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    opened: list[PrometheusSource] = []

    def make_source(s: FullSettings) -> PrometheusSource:
        opened.append(PrometheusSource(s.prometheus))
        return opened[-1]

    monkeypatch.setattr(gpuledger.statements, "make_source", make_source)  # to close them after
    base = ["--source", "prometheus", "--prometheus-url", prometheus_url]
    try:
        assert main(["job", "1001", *base]) == 1
        err = capsys.readouterr().err
        assert main(["job", "site-c:1001", *base]) == 0
        out = capsys.readouterr().out
    finally:
        for source in opened:
            source.api.close()
    assert err == (
        "gpuledger job: '1001' names a job in each of 3 clusters: name one, e.g. "
        "site-a:1001 or site-b:1001 or site-c:1001\n"
    )
    assert out.startswith("Job: site-c:1001\n") and "\nGPUs: 1\n" in out
