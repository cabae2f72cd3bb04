"""From kube-state-metrics, read through Prometheus (no API-server access):

- queue wait: pod created -> scheduled, for pods that request ``nvidia.com/gpu`` and were created
  in the window. Plain PromQL, one query per series and day;
- pod labels: the chosen ``label_*`` labels of ``kube_pod_labels``, per pod its latest in the
  window, for the sources to put on their pod rows (``JobWeek.labels``). One query per day, each
  aggregated by pod and label set in PromQL: its answer is one series per pod and label set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from analytics.sources.base import percentile
from analytics.sources.promapi import PromAPI, Series, rng
from domain.frozen import evolve
from domain.week import GpuWeek, JobWeek, QueueWeek, Window, days

Labels = tuple[tuple[str, str], ...]
PodKey = tuple[str, str, str]  # (cluster, namespace, pod)
NO_LABELS = "pod labels: no kube_pod_labels series in the window (is kube-state-metrics scraped?): pods go under (none)"


def queue_wait(api: PromAPI, w: Window, cluster_label: str = "") -> list[QueueWeek]:
    """The GPU pods' waits, each pod named as ``_pod`` names it (scraped with or without
    honor_labels) within its cluster (``cluster_label``; "" where there is none), so the same pod
    name in two clusters is two pods."""
    by = ", ".join(_by(cluster_label))

    def by_pod(series: str, across_containers: str = "max") -> dict[PodKey, float]:
        out: dict[PodKey, float] = {}
        for day in days(w):  # by day: each query's samples stay bounded
            expr = f"{across_containers} by ({by}) (last_over_time({series}[{rng(day.seconds)}]))"
            for s in api.query(expr, day.end):
                namespace, pod = _pod(s.labels)
                key = (s.labels.get(cluster_label, "") if cluster_label else "", namespace, pod)
                # max: a pod seen by two kube-state-metrics pods (a restart renames the scraped pod)
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


def _pod(labels: Mapping[str, str]) -> tuple[str, str]:
    """kube-state-metrics' own ``namespace``/``pod``: ``exported_*`` where the scrape renamed them
    (honor_labels off: the plain ones are then kube-state-metrics' own pod's)."""
    if labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels["exported_pod"]
    return labels.get("namespace", ""), labels.get("pod", "")


def _by(cluster_label: str, *names: str) -> list[str]:
    """What to aggregate kube-state-metrics' series by: the cluster, both shapes of the pod's
    name (``_pod`` picks one), then ``names``."""
    return list(
        dict.fromkeys(
            [*(x for x in (cluster_label,) if x), "namespace", "pod", "exported_namespace", "exported_pod", *names]
        )
    )


def pod_labels(api: PromAPI, w: Window, names: Sequence[str], cluster_label: str) -> dict[PodKey, Labels]:
    """(cluster, namespace, pod) -> the pod's chosen labels (name order; a label the pod lacks is
    left out), the latest label set seen in ``w``: per day, the time of each label set's last
    sample (``timestamp()`` in a 1-minute subquery), and the latest wins across the days."""
    if not names:
        return {}
    by = ", ".join(_by(cluster_label, *names))
    queries = [
        (f"max by ({by}) (max_over_time(timestamp(kube_pod_labels)[{rng(d.seconds)}:1m]))", d.end) for d in days(w)
    ]
    latest: dict[PodKey, tuple[float, Labels]] = {}
    for answer in api.query_many(queries):
        for s in answer:
            _keep(latest, s, names, cluster_label)
    return {k: v for k, (_, v) in latest.items()}


def _keep(latest: dict[PodKey, tuple[float, Labels]], s: Series, names: Sequence[str], cluster_label: str) -> None:
    namespace, pod = _pod(s.labels)
    if not pod:
        return
    key = (s.labels.get(cluster_label, "") if cluster_label else "", namespace, pod)
    found: Labels = tuple(sorted((n, s.labels[n]) for n in names if s.labels.get(n)))
    seen = latest.get(key)
    if seen is None or (s.value, found) > seen:  # ties (the same last sample): the larger set, so it is stable
        latest[key] = (s.value, found)


def label_rows(rows: Sequence[JobWeek], gpus: Sequence[GpuWeek], found: Mapping[PodKey, Labels]) -> list[JobWeek]:
    """``rows`` with each pod row's labels from ``found``, matched by the cluster of its GPU,
    its namespace and pod; a pod not found keeps none."""
    cluster = {g.uuid: g.cluster for g in gpus}
    out = []
    for r in rows:
        labels = found.get((cluster.get(r.uuid, ""), r.job.namespace, r.job.pod)) if r.job.pod else None
        out.append(evolve(r, labels=labels) if labels else r)
    return out
