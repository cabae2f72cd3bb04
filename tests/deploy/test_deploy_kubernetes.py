"""Kubernetes manifests (deploy/kubernetes): every object passes the Kubernetes 1.32 schemas (strict), the
prometheus-operator objects are well formed, the workloads are wired together (selectors, ports, probes,
volumes) and locked down, the GPU exporter watches every GPU without taking one, the generated rules and
dashboards match their sources, and `kubectl kustomize` builds the base, core and replay overlay."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube_checks import (
    check_kube_objects,
    check_namespaced,
    validate_objects,
)
from tests.support.kube_objects import (
    ANALYTICS,
    CORE_MANIFESTS,
    EXPORTER,
    KUBE,
    NAMESPACE,
    PSS,
    SOURCE_MANIFESTS,
    Obj,
    ident,
    kustomize,
    load_all,
    load_manifests,
    of_kind,
    one,
    pod_spec,
)
from tests.support.kube_operator import check_operator_objects
from tests.support.paths import REPO

# --- source manifests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def source_objects() -> list[Obj]:
    return load_manifests(SOURCE_MANIFESTS)


@pytest.mark.parametrize("manifest", SOURCE_MANIFESTS)
def test_manifest_validates(manifest: str) -> None:
    objs = load_all(KUBE / manifest)
    assert objs, f"{manifest}: no objects"
    validate_objects(objs, manifest)


def test_validation_is_strict() -> None:
    """An unknown field or a wrong type fails: the schema check is not a no-op."""
    ds = copy.deepcopy(one(load_all(KUBE / "core" / "exporter.yaml"), "DaemonSet", EXPORTER))
    pod_spec(ds)["hostPid"] = True
    with pytest.raises(pytest.fail.Exception, match="hostPid"):
        validate_objects([ds], "mutated")
    svc = copy.deepcopy(one(load_all(KUBE / "core" / "exporter.yaml"), "Service", EXPORTER))
    svc["spec"]["ports"][0]["port"] = "metrics"
    with pytest.raises(pytest.fail.Exception, match="ports"):
        validate_objects([svc], "mutated")
    rule = copy.deepcopy(of_kind(load_all(KUBE / "operator" / "prometheusrules.yaml"), "PrometheusRule")[0])
    rule["spec"]["groups"][0]["rules"][0]["expresion"] = "up"
    with pytest.raises(AssertionError, match="keys"):
        validate_objects([rule], "mutated")


def test_source_objects(source_objects: list[Obj]) -> None:
    check_kube_objects(source_objects, operator=True, gpu=True)


def test_source_core_objects() -> None:
    check_kube_objects(load_manifests(CORE_MANIFESTS), operator=False, gpu=True)


def test_operator_objects(source_objects: list[Obj]) -> None:
    check_operator_objects(source_objects)


def test_source_objects_are_not_replay(source_objects: list[Obj]) -> None:
    with pytest.raises(AssertionError, match="restricted"):
        check_kube_objects(source_objects, operator=True, gpu=False)


Mutation = Callable[[list[Obj]], None]


def _exporter(objs: list[Obj]) -> Obj:
    return pod_spec(one(objs, "DaemonSet", EXPORTER))


def _analytics(objs: list[Obj]) -> Obj:
    return pod_spec(one(objs, "Deployment", ANALYTICS))


def _set(path: list[Any], value: Any, pick: Callable[[list[Obj]], Obj]) -> Mutation:
    def mutate(objs: list[Obj]) -> None:
        node = pick(objs)
        for p in path[:-1]:
            node = node[p]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return mutate


_DELETE = object()


def _obj(kind: str, name: str) -> Callable[[list[Obj]], Obj]:
    return lambda objs: one(objs, kind, name)


def _first(kind: str) -> Callable[[list[Obj]], Obj]:
    return lambda objs: of_kind(objs, kind)[0]


def _remove(kind: str, name: str) -> Mutation:
    def mutate(objs: list[Obj]) -> None:
        objs.remove(one(objs, kind, name))

    return mutate


def _edit_dashboard(objs: list[Obj]) -> None:
    cm = of_kind(objs, "ConfigMap")[0]
    key = next(iter(cm["data"]))
    cm["data"][key] = cm["data"][key].rstrip("\n")


def _edit_rule(objs: list[Obj]) -> None:
    of_kind(objs, "PrometheusRule")[0]["spec"]["groups"][0]["rules"][0]["expr"] += " * 2"


def _add_gpu(objs: list[Obj]) -> None:
    _exporter(objs)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1


def _non_gpu_term(objs: list[Obj]) -> None:
    terms = _exporter(objs)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [{"key": "kubernetes.io/os", "operator": "Exists"}]})


MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "ds-selector": (
        _set(["spec", "selector", "matchLabels", "app.kubernetes.io/name"], "x", _obj("DaemonSet", EXPORTER)),
        "does not match its pod template",
    ),
    "deploy-selector": (
        _set(["spec", "selector", "matchLabels", "app.kubernetes.io/name"], "x", _obj("Deployment", ANALYTICS)),
        "does not match its pod template",
    ),
    "service-selects-none": (
        _set(["spec", "selector"], {"app.kubernetes.io/name": "nobody"}, _obj("Service", EXPORTER)),
        "selects the pods of",
    ),
    "service-selects-both": (
        _set(["spec", "selector"], {"app.kubernetes.io/part-of": "gpuledger"}, _obj("Service", ANALYTICS)),
        "selects the pods of",
    ),
    "service-numeric-targetport": (
        _set(["spec", "ports", 0, "targetPort"], 10044, _obj("Service", EXPORTER)),
        "targetPort",
    ),
    "service-unknown-targetport": (
        _set(["spec", "ports", 0, "targetPort"], "metrics", _obj("Service", ANALYTICS)),
        "targetPort",
    ),
    "probe-unknown-port": (_set(["containers", 0, "livenessProbe", "httpGet", "port"], "web", _analytics), "port"),
    "probe-path": (_set(["containers", 0, "readinessProbe", "httpGet", "path"], "/metrics", _exporter), "/metrics"),
    # liveness on readiness' endpoint: a node whose NVML is down would restart the exporter in a loop
    "liveness-on-readiness": (
        _set(["containers", 0, "livenessProbe", "httpGet", "path"], "/healthz", _exporter),
        "/healthz",
    ),
    "probe-missing": (_set(["containers", 0, "readinessProbe"], _DELETE, _analytics), "readinessProbe"),
    "rw-root": (
        _set(["containers", 0, "securityContext", "readOnlyRootFilesystem"], _DELETE, _exporter),
        "readOnlyRootFilesystem",
    ),
    "escalation": (
        _set(["containers", 0, "securityContext", "allowPrivilegeEscalation"], True, _analytics),
        "allowPrivilegeEscalation",
    ),
    "capabilities": (_set(["containers", 0, "securityContext", "capabilities"], {"drop": []}, _exporter), "drop ALL"),
    "seccomp-pod": (_set(["securityContext", "seccompProfile"], _DELETE, _analytics), "seccompProfile"),
    "seccomp-container": (
        _set(["containers", 0, "securityContext", "seccompProfile"], {"type": "Unconfined"}, _exporter),
        "seccompProfile",
    ),
    "no-limits": (_set(["containers", 0, "resources", "limits"], _DELETE, _exporter), "resources.limits"),
    "no-memory-request": (_set(["containers", 0, "resources", "requests", "memory"], _DELETE, _analytics), "memory"),
    "scrape-annotation": (
        _set(
            ["spec", "template", "metadata", "annotations", "prometheus.io/port"], "9100", _obj("DaemonSet", EXPORTER)
        ),
        "prometheus.io/port",
    ),
    "no-hostpid": (_set(["hostPID"], _DELETE, _exporter), "hostPID"),
    "no-runtimeclass": (_set(["runtimeClassName"], "runc", _exporter), "runtimeClassName"),
    "no-affinity": (_set(["affinity"], _DELETE, _exporter), "GPU nodes"),
    "non-gpu-term": (_non_gpu_term, "GPU nodes"),
    "no-toleration": (_set(["tolerations"], [], _exporter), "nvidia.com/gpu taint"),
    "takes-a-gpu": (_add_gpu, "must not take a GPU"),
    "pod-resources-rw": (_set(["containers", 0, "volumeMounts", 1, "readOnly"], False, _exporter), "readOnly"),
    "pod-resources-gone": (_set(["volumes", 1, "hostPath", "path"], "/run/kubelet", _exporter), "hostPath"),
    "mount-unknown-volume": (_set(["containers", 0, "volumeMounts", 0, "name"], "nope", _analytics), "not a volume"),
    "no-pvc": (_remove("PersistentVolumeClaim", "gpuledger-reports"), "claim"),
    "claim-name": (_set(["volumes", 0, "persistentVolumeClaim", "claimName"], "other", _analytics), "claim"),
    "rolling-analytics": (
        _set(["spec", "strategy", "type"], "RollingUpdate", _obj("Deployment", ANALYTICS)),
        "rolling update",
    ),
    "analytics-root": (_set(["securityContext", "runAsUser"], 0, _analytics), "uid"),
    "namespace-level": (_set(["metadata", "labels", PSS], "baseline", _obj("Namespace", NAMESPACE)), PSS),
    "no-namespace": (_remove("Namespace", NAMESPACE), "namespaces"),
    "monitor-selector": (
        _set(["spec", "selector", "matchLabels", "app.kubernetes.io/name"], "x", _obj("ServiceMonitor", EXPORTER)),
        "matches Services",
    ),
    "monitor-port": (_set(["spec", "endpoints", 0, "port"], "http", _obj("ServiceMonitor", EXPORTER)), "port"),
    "scrape-timeout": (
        _set(["spec", "endpoints", 0, "scrapeTimeout"], "90s", _obj("ServiceMonitor", ANALYTICS)),
        "scrapeTimeout",
    ),
    "monitor-gone": (_remove("ServiceMonitor", ANALYTICS), "no ServiceMonitor scrapes"),
    "rule-expr": (_edit_rule, "groups differ"),
    "rule-gone": (lambda objs: objs.remove(of_kind(objs, "PrometheusRule")[0]), "rule files"),
    "dashboard-bytes": (_edit_dashboard, "differs from its source"),
    "dashboard-label": (
        _set(["metadata", "labels", "grafana_dashboard"], 1, _first("ConfigMap")),
        "grafana_dashboard",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_checks_catch(source_objects: list[Obj], name: str) -> None:
    """Each check fails on a copy of the manifests broken the way it guards against."""
    mutate, message = MUTATIONS[name]
    objs = copy.deepcopy(source_objects)
    mutate(objs)
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_kube_objects(objs, operator=True, gpu=True)


# --- kustomizations --------------------------------------------------------------------------------------


def kustomizations() -> list[Path]:
    found = sorted(KUBE.rglob("kustomization.yaml"))
    assert found, f"no kustomization.yaml under {KUBE}"
    return found


def test_kustomizations_reference_existing_files_and_cover_every_manifest() -> None:
    resources: set[Path] = set()
    patches: set[Path] = set()
    for k in kustomizations():
        data = yaml.safe_load(k.read_text(encoding="utf-8"))
        rel = k.relative_to(REPO)
        assert data.get("namespace") == NAMESPACE, f"{rel}: namespace {data.get('namespace')!r}"
        assert data.get("resources"), f"{rel}: no resources"
        for r in data["resources"]:
            p = (k.parent / r).resolve()
            assert p.exists(), f"{rel}: resource {r} does not exist"
            if p.is_dir():
                assert (p / "kustomization.yaml").is_file(), f"{rel}: {r} is a folder without kustomization.yaml"
            else:
                resources.add(p)
        for patch in data.get("patches", []):
            assert "path" in patch or "patch" in patch, f"{rel}: a patch with neither path nor patch: {patch}"
            if "path" in patch:
                p = (k.parent / patch["path"]).resolve()
                assert p.is_file(), f"{rel}: patch {patch['path']} does not exist"
                patches.add(p)
        for key in ("patchesStrategicMerge", "patchesJson6902", "components", "bases"):
            assert key not in data, f"{rel}: {key} (deprecated or unused here): use resources and patches"
    manifests = {p.resolve() for p in [*KUBE.rglob("*.yaml"), *KUBE.rglob("*.yml")] if p.name != "kustomization.yaml"}
    left_out = sorted(p.relative_to(KUBE).as_posix() for p in manifests - resources - patches)
    assert not left_out, f"manifests no kustomization uses: {left_out}"
    assert sorted(p.relative_to(KUBE).as_posix() for p in resources) == sorted(SOURCE_MANIFESTS), (
        "SOURCE_MANIFESTS in this test is out of date"
    )


def build_and_check(directory: Path, *, operator: bool, gpu: bool) -> list[Obj]:
    objs = kustomize(directory)
    check_namespaced(objs)
    validate_objects(objs, f"kubectl kustomize {directory.relative_to(REPO)}")
    check_kube_objects(objs, operator=operator, gpu=gpu)
    return objs


@pytest.mark.integration
def test_kustomize_base_builds(source_objects: list[Obj]) -> None:
    objs = build_and_check(KUBE, operator=True, gpu=True)
    assert sorted(map(ident, objs)) == sorted(map(ident, source_objects)), "the base build is not every source object"


@pytest.mark.integration
def test_kustomize_core_builds_without_operator() -> None:
    objs = build_and_check(KUBE / "core", operator=False, gpu=True)
    assert sorted(map(ident, objs)) == sorted(map(ident, load_manifests(CORE_MANIFESTS)))


@pytest.mark.integration
def test_kustomize_replay_overlay_builds() -> None:
    objs = build_and_check(KUBE / "overlays" / "replay", operator=False, gpu=False)
    assert sorted(map(ident, objs)) == sorted(map(ident, load_manifests(CORE_MANIFESTS)))
    with pytest.raises(AssertionError, match="privileged"):
        check_kube_objects(objs, operator=False, gpu=True)
    # the overlay's checks fail where the exporter would still be privileged
    for name, mutate in {
        "hostPID": _set(["hostPID"], True, _exporter),
        "hostPath": _set(["volumes", 0], {"name": "history", "hostPath": {"path": "/var/lib/gpuledger"}}, _exporter),
        "runAsUser": _set(["securityContext", "runAsUser"], 0, _exporter),
        "runAsNonRoot": _set(["containers", 0, "securityContext", "runAsNonRoot"], False, _exporter),
    }.items():
        broken = copy.deepcopy(objs)
        mutate(broken)
        assert _exporter(broken) != _exporter(objs), name
        with pytest.raises(AssertionError):
            check_kube_objects(broken, operator=False, gpu=False)
