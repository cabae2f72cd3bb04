"""Kubernetes queue wait from kube-state-metrics series in a real Prometheus: pods that request
``nvidia.com/gpu``, created in the window, wait from creation to scheduling."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.sources.dcgm import DcgmSource
from analytics.sources.kubernetes import queue_wait
from analytics.sources.promapi import PromAPI
from domain.week import QueueWeek, Window
from tests.support.prometheus import PrometheusServer

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration

START = 1795219200  # 2026-11-22 00:00 UTC
END = START + 2 * 86400
STEP = 30
H = 3600
# pod -> (created, scheduled or None, GPUs per container, containers); times from START
PODS: dict[str, tuple[int, int | None, int, int]] = {
    "train-a": (1 * H, 1 * H + 120, 1, 1),  # waited 2 min
    "train-b": (10 * H, 10 * H + 3600, 4, 2),  # 2 containers x 4 GPUs, waited 1 h
    "train-c": (30 * H, 30 * H + 600, 2, 1),  # day 2, waited 10 min
    "old": (-5 * H, -4 * H, 1, 1),  # created before the window: not a wait of this window
    "stuck": (40 * H, None, 8, 1),  # still pending at the end
    "cpu-only": (2 * H, 2 * H + 5000, 0, 1),  # asks for no GPU
}


KSM_RESTART = 24 * H  # without honor_labels: kube-state-metrics' own pod is renamed here


def _lab(pod: str, t: int, shape: str, cluster: str) -> str:
    """The pod's labels on a sample at ``t`` as the scrape left them: ``plain`` (honor_labels, or
    no target labels to collide with); ``exported`` (honor_labels off: kube-state-metrics' own pod
    in ``namespace``/``pod``, renamed by its restart, the object's in ``exported_*``)."""
    own = f'cluster="{cluster}",' if cluster else ""
    if shape == "plain":
        return f'{own}namespace="ml",pod="{pod}"'
    ksm = "kube-state-metrics-0" if t < KSM_RESTART else "kube-state-metrics-1"
    return f'{own}namespace="monitoring",pod="{ksm}",exported_namespace="ml",exported_pod="{pod}"'


def _write(path: Path, shape: str = "plain", clusters: tuple[str, ...] = ("",)) -> None:
    with path.open("w") as out:
        for cluster in clusters:
            for pod, (created, scheduled, gpus, containers) in PODS.items():
                alive = range(max(created, -6 * H), END - START + 1, STEP)
                for t in alive:
                    out.write(f"kube_pod_created{{{_lab(pod, t, shape, cluster)}}} {START + created} {START + t}\n")
                if scheduled is not None:
                    for t in range(scheduled, END - START + 1, STEP):
                        lab = _lab(pod, t, shape, cluster)
                        out.write(f"kube_pod_status_scheduled_time{{{lab}}} {START + scheduled} {START + t}\n")
                for c in range(containers):
                    resource = "nvidia_com_gpu" if gpus else "cpu"
                    for t in alive:
                        clab = f'{_lab(pod, t, shape, cluster)},container="c{c}",resource="{resource}",unit="integer"'
                        out.write(f"kube_pod_container_resource_requests{{{clab}}} {gpus or 1} {START + t}\n")
        out.write("# EOF\n")


def _read(tmp_path: Path, cluster_label: str = "") -> QueueWeek:
    server = PrometheusServer.backfilled(tmp_path, tmp_path / "ksm.om")
    try:
        with closing(PromAPI(PrometheusSettings(url=server.url))) as api:
            [q] = queue_wait(api, Window(START, END, "two days", "UTC"), cluster_label)
    finally:
        server.stop()
    return q


WAITS = [120.0, 3600.0, 600.0]
# GPU-hours pending inside the window: 1 x 2 min + 8 x 1 h + 2 x 10 min + 8 x (48 h - 40 h)
PENDING = 120 / H + 8 * 1 + 2 * 600 / H + 8 * 8


@pytest.mark.parametrize("shape", ["plain", "exported"])
def test_pod_waits_and_pending_gpu_hours(tmp_path: Path, shape: str) -> None:
    _write(tmp_path / "ksm.om", shape)
    q = _read(tmp_path)
    assert (q.partition, q.source, q.started) == ("kubernetes", "exact", 3)
    assert q.wait_mean == pytest.approx(sum(WAITS) / 3) and q.wait_max == 3600.0 and not q.wait_max_is_bound
    assert q.wait_p50 == 600.0
    assert q.pending_gpu_hours == pytest.approx(PENDING)  # train-b: 2 x 4 GPUs, not 4 (nor kube-state-metrics')


def test_the_same_pods_in_two_clusters_are_two_pods(tmp_path: Path) -> None:
    _write(tmp_path / "ksm.om", "exported", clusters=("eu", "us"))
    q = _read(tmp_path, cluster_label="cluster")
    assert q.started == 6 and q.wait_mean == pytest.approx(sum(WAITS) / 3) and q.wait_max == 3600.0
    assert q.pending_gpu_hours == pytest.approx(2 * PENDING)


def test_the_dcgm_source_counts_each_cluster_s_pods(tmp_path: Path) -> None:
    """The dcgm source asks for the queue within [prometheus] cluster_label too (it once counted
    the two clusters' namesakes as three pods, each twice created)."""
    _write(tmp_path / "ksm.om", "exported", clusters=("eu", "us"))
    server = PrometheusServer.backfilled(tmp_path, tmp_path / "ksm.om")
    try:
        source = DcgmSource(PrometheusSettings(url=server.url, cluster_label="cluster"))
        with closing(source.api):
            [q] = source.week(Window(START, END, "two days", "UTC")).queue
    finally:
        server.stop()
    assert q.started == 6 and q.wait_mean == pytest.approx(sum(WAITS) / 3)
    assert q.pending_gpu_hours == pytest.approx(2 * PENDING)
