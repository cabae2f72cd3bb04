"""The labels of a device-instance's series at a scrape, as Prometheus stores them.

What dcgm-exporter writes (internal/pkg/rendermetrics/render_metrics.go): ``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``; under MIG ``GPU_I_PROFILE`` and ``GPU_I_ID``; the host
label (``Hostname`` before d5e5f51, ``hostname`` after: internal/pkg/hostname/hostname.go, the
``NODE_NAME`` environment variable, else the OS hostname, which in a pod is the pod's name); the
label-type fields (``DCGM_FI_DRIVER_VERSION``); then attributes: ``pod``/``namespace``/``container``
(internal/pkg/transformation/kubernetes.go, the kubelet's pod holding the device; a GPU instance
maps to the pod holding it; with ``--kubernetes-virtual-gpus`` one copy per pod sharing the
device, the device's own series where none) or ``hpc_job`` (transformation/hpc.go: one copy per job
listed in the device's mapping file, ``0`` or ``<gpu>.<GPU_I_ID>``).

What the scrape adds: under Kubernetes (a ServiceMonitor) the target's ``namespace``, ``pod``,
``container``, ``service``, ``endpoint``, ``instance``, ``job``; with honorLabels false the
exporter's colliding ``namespace``/``pod``/``container`` become ``exported_*``, with it true they
win. On bare metal: ``instance`` and ``job``. And a ``cluster`` label where external labels set it.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytics.synthetic_dcgm.model import DeploymentKind, Exporter, Gpu, Node, Pod, Scrape, SlurmJob

Labels = tuple[tuple[str, str], ...]  # sorted by name, as Prometheus stores them
PORT = 9400


@dataclass(frozen=True, slots=True)
class Target:
    """A Kubernetes deployment kind's scrape target: the exporter pod's namespace and container,
    its Service (the ServiceMonitor's job) and the port's name (the endpoint)."""

    namespace: str
    container: str
    service: str
    endpoint: str


TARGETS: dict[DeploymentKind, Target] = {
    # dcgm-exporter's Helm chart: container `exporter`, port `metrics`, NODE_NAME from spec.nodeName
    "helm": Target("dcgm-exporter", "exporter", "dcgm-exporter", "metrics"),
    # the GPU Operator's dcgm-exporter: NODE_NAME set likewise
    "operator": Target("gpu-operator", "nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "gpu-metrics"),
    # an old manifest without NODE_NAME: the host label is the pod's name; the node by relabelling
    "legacy": Target("monitoring", "dcgm-exporter", "dcgm-exporter", "metrics"),
}
SLURM_JOB = "dcgm-exporter"


def host_value(node: Node, exporter: Exporter) -> str:
    """The host label's value: the node (NODE_NAME, or the bare-metal hostname), or the exporter
    pod's name where NODE_NAME is not set."""
    return exporter.pod if node.kind == "legacy" else node.name


def target_labels(node: Node, exporter: Exporter, cluster: str) -> dict[str, str]:
    """The scrape target's own labels (those ``up`` carries)."""
    out: dict[str, str] = {"instance": f"{exporter.address}:{PORT}"}
    if node.kind == "slurm":
        out["job"] = SLURM_JOB
    else:
        t = TARGETS[node.kind]
        out |= {
            "namespace": t.namespace,
            "pod": exporter.pod,
            "container": t.container,
            "service": t.service,
            "endpoint": t.endpoint,
            "job": t.service,
        }
        if node.kind == "legacy":
            out["kubernetes_node"] = node.name  # relabelled from __meta_kubernetes_pod_node_name
    if cluster:
        out["cluster"] = cluster
    return out


def exporter_labels(node: Node, gpu: Gpu, s: Scrape) -> dict[str, str]:
    """What dcgm-exporter writes for the device-instance before any attribute."""
    out = {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.model,
    }
    if s.instance.gi is not None and s.instance.profile is not None:
        out |= {"GPU_I_PROFILE": s.instance.profile, "GPU_I_ID": str(s.instance.gi)}
    out[s.exporter.host_label] = host_value(node, s.exporter)
    out["DCGM_FI_DRIVER_VERSION"] = s.exporter.driver
    return out


def _pod(base: dict[str, str], pod: Pod, honor: bool) -> dict[str, str]:
    prefix = "" if honor else "exported_"
    return base | {f"{prefix}namespace": pod.namespace, f"{prefix}pod": pod.pod, f"{prefix}container": pod.container}


def label_sets(node: Node, gpu: Gpu, s: Scrape, cluster: str) -> list[Labels]:
    """Every series the scrape stored for the device-instance (copies per job or sharing pod)."""
    base = target_labels(node, s.exporter, cluster) | exporter_labels(node, gpu, s)
    if node.kind == "slurm":
        jobs = [h for h in s.holders if isinstance(h, SlurmJob)]
        sets = [base | {"hpc_job": j.job_id} for j in jobs] or [base]
    else:
        pods = [h for h in s.holders if isinstance(h, Pod)]
        if not node.virtual_gpus:
            pods = pods[-1:]  # one pod per device (the kubelet's last mapping wins)
        sets = [_pod(base, p, node.honor_labels) for p in pods] or [base]
    return [tuple(sorted(x.items())) for x in sets]
