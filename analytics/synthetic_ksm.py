"""kube-state-metrics' pod series (``kube_pod_labels``, ``kube_pod_info``) in the shapes Prometheus
stores them, for tests of the pod-label join.

Shapes taken from kube-state-metrics v2 scraped by kube-prometheus-stack:
- ``kube_pod_labels{namespace, pod, uid, label_<name>...} 1``: one ``label_*`` per pod label in
  ``--metric-labels-allowlist`` that the pod has (names sanitised: ``app.kubernetes.io/name`` ->
  ``label_app_kubernetes_io_name``); a pod label changed while the pod runs starts a new series
  (the same ``uid``) and ends the old one;
- ``kube_pod_info{namespace, pod, uid, node, host_ip, pod_ip, created_by_kind, created_by_name,
  priority_class, host_network} 1``;
- the target's labels besides: ``instance``, ``job``, ``container``, ``endpoint``, ``service``;
  with honor_labels (kube-prometheus-stack's default for kube-state-metrics) ``namespace`` and
  ``pod`` are the object's; without it they collide with the target's (kube-state-metrics' own
  pod) and the object's are renamed ``exported_namespace``/``exported_pod``;
- a cluster label where external labels or relabelling add it (``cluster``).

A pod's series exist from its start to its end, one sample per scrape. Output: OpenMetrics lines
(seconds) or VictoriaMetrics import lines (milliseconds), for ``synthetic_dcgm``'s writers' files.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from analytics.synthetic_dcgm import escape

KSM_POD = "kube-prometheus-stack-kube-state-metrics-6d5f8b7c9-x2k4q"


@dataclass(frozen=True)
class KsmPod:
    """A pod as kube-state-metrics sees it: its label sets over time (from, labels), in order."""

    namespace: str
    pod: str
    start: float
    end: float
    labels: tuple[tuple[float, Mapping[str, str]], ...]  # (from epoch s, pod labels by Kubernetes name)
    cluster: str = ""
    node: str = "gpu-node-a"
    uid: str = field(default="")

    def id(self) -> str:
        if self.uid:
            return self.uid
        h = hashlib.sha1(f"{self.cluster}/{self.namespace}/{self.pod}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def sanitise(name: str) -> str:
    """A Kubernetes label name as kube-state-metrics names its label: ``label_`` + [a-zA-Z0-9_]."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _target(pod: KsmPod, honor_labels: bool) -> dict[str, str]:
    base = {
        "container": "kube-state-metrics",
        "endpoint": "http",
        "instance": "10.244.0.12:8080",
        "job": "kube-state-metrics",
        "service": "kube-prometheus-stack-kube-state-metrics",
    }
    if honor_labels:
        base |= {"namespace": pod.namespace, "pod": pod.pod}
    else:
        base |= {
            "namespace": "monitoring",
            "pod": KSM_POD,
            "exported_namespace": pod.namespace,
            "exported_pod": pod.pod,
        }
    return base | ({"cluster": pod.cluster} if pod.cluster else {})


def series(
    pods: list[KsmPod], interval: float = 30.0, honor_labels: bool = True
) -> Iterator[tuple[str, dict[str, str], list[float]]]:
    """(metric, labels, sample times) per series; every value is 1."""
    for p in pods:
        base = _target(p, honor_labels)
        t0 = (p.start // interval + 1) * interval  # scrapes on the interval's grid
        times = [t0 + k * interval for k in range(int((p.end - t0) // interval) + 1)]
        info = {
            "uid": p.id(),
            "node": p.node,
            "host_ip": "10.0.0.11",
            "pod_ip": "10.244.1.77",
            "created_by_kind": "Job",
            "created_by_name": p.pod.rsplit("-", 1)[0],
            "priority_class": "",
            "host_network": "false",
        }
        yield "kube_pod_info", base | {k: v for k, v in info.items() if v}, times
        for i, (since, labels) in enumerate(p.labels):
            until = p.labels[i + 1][0] if i + 1 < len(p.labels) else float("inf")
            chosen = {sanitise(k): v for k, v in sorted(labels.items())}
            yield "kube_pod_labels", base | {"uid": p.id()} | chosen, [t for t in times if since <= t < until]


def _text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items())) + "}"


def openmetrics_lines(pods: list[KsmPod], interval: float = 30.0, honor_labels: bool = True) -> Iterator[str]:
    """For ``promtool tsdb create-blocks-from openmetrics`` (no ``# EOF``: the caller ends the file)."""
    for metric, labels, times in series(pods, interval, honor_labels):
        text = _text(labels)
        for t in times:
            yield f"{metric}{text} 1 {t:.3f}\n"


def import_lines(pods: list[KsmPod], interval: float = 30.0, honor_labels: bool = True) -> Iterator[str]:
    """For VictoriaMetrics' ``/api/v1/import/prometheus`` (millisecond timestamps)."""
    for metric, labels, times in series(pods, interval, honor_labels):
        text = _text(labels)
        for t in times:
            yield f"{metric}{text} 1 {round(t * 1000)}\n"
