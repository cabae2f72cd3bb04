"""dcgm-exporter's series as its own source writes them, and what Prometheus adds when it scrapes
them: which device a series is of, who holds it, and which host it is on.

Modelled from NVIDIA/dcgm-exporter (``internal/pkg/rendermetrics/render_metrics.go``,
``transformation/kubernetes.go`` and ``hpc.go``, ``hostname/hostname.go``, the Helm chart):

- a device is a GPU (``UUID``; ``uuid`` under ``--use-old-namespace``) or, on a MIG-enabled GPU,
  one of its GPU instances (the parent's ``UUID`` plus ``GPU_I_ID`` and ``GPU_I_PROFILE``);
- a device's series is *repeated* once per holder where holders share it: one copy per Slurm job
  listed for it in ``--hpc-job-mapping-dir`` (label ``hpc_job``), one per pod sharing it under
  time-slicing (``--kubernetes-virtual-gpus``); the copies hold the same values;
- the host label is ``Hostname`` (before dcgm-exporter #655, May 2026) or ``hostname``: the node's
  name where ``NODE_NAME`` is set (its Helm chart and manifests, the GPU Operator), else the
  exporter's own host name, which under Kubernetes is its *pod's* name;
- a pod holding the device adds ``pod``/``namespace``/``container`` (``pod_name``/
  ``pod_namespace``/``container_name`` under ``--use-old-namespace``). Scraped by a
  ServiceMonitor with ``honorLabels: false`` (kube-prometheus-stack's default), they collide with
  the scrape target's own and become ``exported_*``, the plain ones being the exporter pod's; with
  ``honorLabels: true`` they stay plain, and a series no pod holds still carries the exporter
  pod's. The scrape target's own pod is on ``up`` for the same ``instance`` and ``job``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from domain.jobs import JobKey

UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %, whole GPUs only: there is none under MIG
GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio, of the GPU or of the MIG instance
SM = "DCGM_FI_PROF_SM_ACTIVE"  # ratio; not in dcgm-exporter's default counters
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM = "DCGM_FI_PROF_DRAM_ACTIVE"
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W; repeated on every instance's series under MIG
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since the driver loaded; repeated likewise

UUIDS = ("UUID", "uuid")
GI_ID, GI_PROFILE = "GPU_I_ID", "GPU_I_PROFILE"
DEVICE = (*UUIDS, GI_ID, GI_PROFILE)  # what the copies of one device's series share
HOSTNAMES = ("hostname", "Hostname")
HPC_JOB = "hpc_job"
# (pod, namespace, container) label names, in the order they are believed: renamed by Prometheus,
# the old namespace's, then the plain ones (the workload's or the exporter's own)
POD_SETS = (
    ("exported_pod", "exported_namespace", "exported_container"),
    ("pod_name", "pod_namespace", "container_name"),
    ("pod", "namespace", "container"),
)
TARGET = ("instance", "job")
GROUP = (
    *DEVICE,
    "gpu",
    "modelName",
    *HOSTNAMES,
    *TARGET,
    HPC_JOB,
    *(name for names in POD_SETS for name in names),
)  # the labels every per-day answer is grouped by (plus the host and cluster labels)

_SLICES = re.compile(r"^(?:\d+c\.)?(\d+)g\.")  # 1g.10gb, 3g.40gb, 1c.3g.40gb (a compute instance)
_FOUR_SLICE_MODELS = ("A30", "RTX PRO 6000")  # GPUs whose MIG has 4 compute slices; the rest have 7


def uuid_of(labels: Mapping[str, str]) -> str:
    return labels.get("UUID") or labels.get("uuid", "")


@dataclass(frozen=True, slots=True, order=True)
class Device:
    """A GPU (``instance`` "") or one of its MIG GPU instances."""

    uuid: str
    instance: str = ""  # GPU_I_ID
    profile: str = ""  # GPU_I_PROFILE, e.g. 1g.10gb

    @property
    def mig(self) -> bool:
        return bool(self.instance)


def device_of(labels: Mapping[str, str]) -> Device:
    return Device(uuid_of(labels), labels.get(GI_ID, ""), labels.get(GI_PROFILE, "") if labels.get(GI_ID) else "")


def gpu_slices(model: str) -> int:
    """Compute slices of a MIG-capable GPU: 7 (A100, H100, H200, B200), 4 (A30)."""
    return 4 if any(m in model for m in _FOUR_SLICE_MODELS) else 7


def share(device: Device, model: str) -> float | None:
    """A device's share of its GPU: 1 for a whole GPU; a MIG instance's compute slices over the
    GPU's (a 1g.10gb of an H100 is 1/7); None where the profile names no slices."""
    if not device.mig:
        return 1.0
    m = _SLICES.match(device.profile)
    if m is None:
        return None
    return min(1.0, int(m.group(1)) / gpu_slices(model))


Targets = Mapping[tuple[str, str, str], frozenset[tuple[str, str]]]
"""(cluster, instance, job) of a scrape target -> the (namespace, pod) it had (from ``up``)."""


def target_of(labels: Mapping[str, str], cluster_label: str) -> tuple[str, str, str]:
    cluster = labels.get(cluster_label, "") if cluster_label else ""
    return (cluster, labels.get("instance", ""), labels.get("job", ""))


def holder(
    labels: Mapping[str, str], targets: Targets, cluster_label: str, containers: Collection[str]
) -> JobKey | None:
    """Who holds the device in this series: the Slurm job (``hpc_job``), the pod, or None (no
    holder: the plain pod labels are the exporter's own). The exporter's own pod is the scrape
    target's (``up`` of the same ``instance`` and ``job``); where ``up`` is not stored, a plain pod
    that names the host label (an exporter without ``NODE_NAME``) or runs one of ``containers``
    (the exporter's container names) is taken for it."""
    if labels.get(HPC_JOB):
        return JobKey(job_id=labels[HPC_JOB])
    for pod_l, ns_l, c_l in POD_SETS[:2]:
        if labels.get(pod_l):
            return JobKey(pod=labels[pod_l], namespace=labels.get(ns_l, ""), container=labels.get(c_l, ""))
    pod = labels.get("pod", "")
    if not pod:
        return None
    namespace = labels.get("namespace", "")
    own = targets.get(target_of(labels, cluster_label))
    if own is not None:
        if (namespace, pod) in own:
            return None
    elif pod in (labels.get(h) for h in HOSTNAMES) or labels.get("container", "") in containers:
        return None
    return JobKey(pod=pod, namespace=namespace, container=labels.get("container", ""))


def host_of(labels: Mapping[str, str], host_labels: Collection[str], exporter_pods: Collection[str]) -> str:
    """The GPU's host: the first of ``host_labels`` present, passing over a host label that names
    an exporter pod (dcgm-exporter without ``NODE_NAME``) while a later one is present; "" where
    none is."""
    present = [(h, labels[h]) for h in host_labels if labels.get(h)]
    named = [v for h, v in present if not (h in HOSTNAMES and v in exporter_pods)]
    return named[0] if named else (present[0][1] if present else "")
