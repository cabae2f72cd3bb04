"""Kubernetes queue wait from kube-state-metrics: pod created -> scheduled, for pods that request
``nvidia.com/gpu`` and were created in the window. Plain PromQL, one query per series and day."""

from __future__ import annotations

from analytics.sources.base import percentile
from analytics.sources.promapi import PromAPI, rng
from analytics.week_data import QueueWeek, Window, days


def queue_wait(api: PromAPI, w: Window) -> list[QueueWeek]:
    def by_pod(series: str, across_containers: str = "max") -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for day in days(w):  # by day: each query's samples stay bounded
            expr = f"{across_containers} by (namespace, pod) (last_over_time({series}[{rng(day.seconds)}]))"
            for s in api.query(expr, day.end):
                key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
                out[key] = max(out.get(key, s.value), s.value)
        return out

    gpus = by_pod('kube_pod_container_resource_requests{resource="nvidia_com_gpu"}', "sum")  # all its containers
    if not gpus:
        return []  # no kube-state-metrics, or no GPU pods: nothing to say
    created = by_pod("kube_pod_created")
    scheduled = by_pod("kube_pod_status_scheduled_time")
    waits = [
        scheduled[pod] - created[pod]
        for pod in gpus
        if pod in created and pod in scheduled and w.start <= created[pod] < w.end
    ]
    pending = sum(
        gpus[pod] * max(0.0, min(scheduled.get(pod, w.end), w.end) - max(created[pod], w.start)) / 3600
        for pod in gpus
        if pod in created
    )
    return [
        QueueWeek(
            "kubernetes",
            "exact",
            len(waits),
            sum(waits) / len(waits) if waits else None,
            percentile(waits, 0.5),
            percentile(waits, 0.95),
            max(waits) if waits else None,
            False,
            pending,
        )
    ]
