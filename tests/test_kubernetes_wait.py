"""Kubernetes queue wait from kube-state-metrics series in a real Prometheus: pods that request
``nvidia.com/gpu``, created in the window, wait from creation to scheduling."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.sources.kubernetes import queue_wait
from analytics.sources.promapi import PromAPI
from analytics.week_data import Window
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


def _write(path: Path) -> None:
    with path.open("w") as out:
        for pod, (created, scheduled, gpus, containers) in PODS.items():
            lab = f'namespace="ml",pod="{pod}"'
            alive = range(max(created, -6 * H), END - START + 1, STEP)
            for t in alive:
                out.write(f"kube_pod_created{{{lab}}} {START + created} {START + t}\n")
            if scheduled is not None:
                for t in range(scheduled, END - START + 1, STEP):
                    out.write(f"kube_pod_status_scheduled_time{{{lab}}} {START + scheduled} {START + t}\n")
            for c in range(containers):
                resource = "nvidia_com_gpu" if gpus else "cpu"
                clab = f'{lab},container="c{c}",resource="{resource}",unit="integer"'
                for t in alive:
                    out.write(f"kube_pod_container_resource_requests{{{clab}}} {gpus or 1} {START + t}\n")
        out.write("# EOF\n")


def test_pod_waits_and_pending_gpu_hours(tmp_path: Path) -> None:
    _write(tmp_path / "ksm.om")
    server = PrometheusServer.backfilled(tmp_path, tmp_path / "ksm.om")
    try:
        with closing(PromAPI(PrometheusSettings(url=server.url))) as api:
            [q] = queue_wait(api, Window(START, END, "two days", "UTC"))
    finally:
        server.stop()
    waits = [120.0, 3600.0, 600.0]
    assert (q.partition, q.source, q.started) == ("kubernetes", "exact", 3)
    assert q.wait_mean == pytest.approx(sum(waits) / 3) and q.wait_max == 3600.0 and not q.wait_max_is_bound
    assert q.wait_p50 == 600.0
    # GPU-hours pending inside the window: 1 x 2 min + 8 x 1 h + 2 x 10 min + 8 x (48 h - 40 h)
    assert q.pending_gpu_hours == pytest.approx(120 / H + 8 * 1 + 2 * 600 / H + 8 * 8)
