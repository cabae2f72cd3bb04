"""Kubernetes objects for the deployment tests: the manifests' paths and names, loading (files and
`kubectl kustomize` builds), and accessors for pods, containers, mounts and durations."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO

Obj = dict[str, Any]

KUBE = REPO / "deploy" / "kubernetes"
RULES_DIR = REPO / "deploy" / "prometheus" / "rules"
DASHBOARDS_DIR = REPO / "grafana" / "dashboards"
GENERATE = KUBE / "generate.py"
K8S_VERSION = "1.32"
NAMESPACE = "gpuledger"
EXPORTER = "gpuledger-exporter"
ANALYTICS = "gpuledger-analytics"
UID = 10044  # the image's user
POD_RESOURCES = "/var/lib/kubelet/pod-resources"
GPU_NODE_LABELS = {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
WORKLOAD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job", "CronJob"}
PSS = "pod-security.kubernetes.io/enforce"
# the restricted Pod Security level's volume types
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}

# every file a kustomization lists as a resource; patches are checked through the builds
SOURCE_MANIFESTS = [
    "core/namespace.yaml",
    "core/exporter.yaml",
    "core/analytics.yaml",
    "operator/servicemonitors.yaml",
    "operator/prometheusrules.yaml",
    "dashboards/dashboards.yaml",
]
CORE_MANIFESTS = [m for m in SOURCE_MANIFESTS if m.startswith("core/")]

DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
DURATION_UNITS = [365 * 86400.0, 7 * 86400.0, 86400.0, 3600.0, 60.0, 1.0, 0.001]


# --- loading ---------------------------------------------------------------------------------------------


def load_all(path: Path) -> list[Obj]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for d in docs:
        assert isinstance(d, dict), f"{path}: a document that is not a mapping: {d!r:.80}"
    return docs


def load_manifests(names: list[str]) -> list[Obj]:
    objs = [o for n in names for o in load_all(KUBE / n)]
    assert objs, f"no objects in {names}"
    return objs


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl not installed: `kubectl kustomize` builds are checked only where it is")
    return path


def kustomize(directory: Path) -> list[Obj]:
    r = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, f"kubectl kustomize {directory.relative_to(REPO)} failed:\n{r.stderr}"
    objs = [d for d in yaml.safe_load_all(r.stdout) if d is not None]
    assert objs and all(isinstance(o, dict) for o in objs), f"kubectl kustomize {directory}: no objects"
    return objs


def ident(o: Obj) -> str:
    return f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o.get("kind") == kind]


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in of_kind(objs, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def duration(text: object) -> float:
    """Seconds of a Prometheus duration (15s, 1m30s, 2h)."""
    assert isinstance(text, str), f"duration {text!r} is not a string"
    m = DURATION.fullmatch(text)
    assert text and m, f"{text!r} is not a Prometheus duration"
    return sum(int(g) * unit for g, unit in zip(m.groups(), DURATION_UNITS, strict=True) if g)


# --- pods ------------------------------------------------------------------------------------------------


def workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o.get("kind") in WORKLOAD_KINDS]


def pod_spec(w: Obj) -> Obj:
    spec: Obj = w["spec"]["template"]["spec"]
    return spec


def pod_labels(w: Obj) -> dict[str, str]:
    labels: dict[str, str] = w["spec"]["template"].get("metadata", {}).get("labels") or {}
    return labels


def all_containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def effective(key: str, container: Obj, spec: Obj) -> Any:
    """A security setting as it applies to the container: its own, else the pod's."""
    own = container.get("securityContext") or {}
    if key in own:
        return own[key]
    return (spec.get("securityContext") or {}).get(key)


def mounts_of(container: Obj, volume: str) -> list[Obj]:
    return [m for m in container.get("volumeMounts", []) if m["name"] == volume]


def env_of(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}
