"""Loading and checking Kubernetes objects for tests/deploy/test_deploy_kubernetes.py: schema validation
(kubernetes-validate, 1.32, strict), prometheus-operator objects, workloads, Services, the GPU
exporter, the replay overlay's restricted pods and the analytics Deployment."""

from __future__ import annotations

from collections import Counter

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.support.kube_objects import (
    ANALYTICS,
    CRD_KINDS,
    EXPORTER,
    GPU_NODE_LABELS,
    K8S_VERSION,
    NAMESPACE,
    POD_RESOURCES,
    PSS,
    RESTRICTED_VOLUMES,
    UID,
    Obj,
    all_containers,
    effective,
    env_of,
    ident,
    mounts_of,
    of_kind,
    one,
    pod_labels,
    pod_spec,
    selects,
    workloads,
)
from tests.support.kube_operator import check_crd_structure, check_operator_objects

# --- checks ----------------------------------------------------------------------------------------------


def validate_objects(objs: list[Obj], where: str) -> None:
    """Kubernetes 1.32 schemas (strict: no unknown fields) for the built-in kinds; structure for the CRDs."""
    for o in objs:
        if o.get("kind") in CRD_KINDS:
            check_crd_structure(o)
            continue
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{where}: {ident(o)} does not validate against Kubernetes {K8S_VERSION}: {path}: {e.message}")


def check_workload(w: Obj) -> None:
    what = ident(w)
    selector = w["spec"]["selector"]
    assert set(selector) == {"matchLabels"}, f"{what}: selector {selector}: matchLabels only"
    assert selector["matchLabels"], f"{what}: empty selector"
    assert selects(selector["matchLabels"], pod_labels(w)), (
        f"{what}: selector {selector['matchLabels']} does not match its pod template labels {pod_labels(w)}"
    )
    spec = pod_spec(w)
    assert spec["containers"], f"{what}: no containers"
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for c in all_containers(spec):
        cw = f"{what} container {c['name']}"
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{cw}: mounts {m['name']}, which is not a volume of the pod"
        sc = c.get("securityContext") or {}
        assert sc.get("readOnlyRootFilesystem") is True, f"{cw}: readOnlyRootFilesystem is not true"
        assert sc.get("allowPrivilegeEscalation") is False, f"{cw}: allowPrivilegeEscalation is not false"
        assert sc.get("privileged") is not True, f"{cw}: privileged"
        caps = sc.get("capabilities") or {}
        assert "ALL" in (caps.get("drop") or []), f"{cw}: capabilities do not drop ALL"
        assert not caps.get("add"), f"{cw}: adds capabilities {caps.get('add')}"
        assert effective("seccompProfile", c, spec) == {"type": "RuntimeDefault"}, (
            f"{cw}: seccompProfile is not RuntimeDefault (pod or container level)"
        )
        resources = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                assert (resources.get(kind) or {}).get(r), f"{cw}: no {r} in resources.{kind}"
    annotations = w["spec"]["template"].get("metadata", {}).get("annotations") or {}
    for c in spec["containers"]:
        cw = f"{what} container {c['name']}"
        ports = {p.get("name"): p for p in c.get("ports", [])}
        assert ports and None not in ports, f"{cw}: every container port must be named"
        if "prometheus.io/port" in annotations:
            assert int(annotations["prometheus.io/port"]) in {p["containerPort"] for p in ports.values()}, (
                f"{what}: prometheus.io/port {annotations['prometheus.io/port']} is no container port"
            )
        for kind in ("readinessProbe", "livenessProbe"):
            probe = c.get(kind)
            assert probe, f"{cw}: no {kind}"
            handlers = [h for h in ("httpGet", "tcpSocket", "grpc", "exec") if h in probe]
            assert handlers in (["httpGet"], ["tcpSocket"]), f"{cw}: {kind} by {handlers}: httpGet or tcpSocket"
            port = probe[handlers[0]]["port"]
            assert isinstance(port, str) and port in ports, f"{cw}: {kind} port {port!r} is no named container port"
            if "httpGet" in probe:
                # readiness may fail (NVML down, stale figures); liveness must not, or the pod crash-loops
                want = "/readyz" if kind == "readinessProbe" else "/livez"
                assert probe["httpGet"].get("path") == want, f"{cw}: {kind} on {probe['httpGet'].get('path')}"
        assert "httpGet" in c["readinessProbe"], f"{cw}: readiness must ask /readyz"


def check_service(svc: Obj, ws: list[Obj]) -> None:
    what = ident(svc)
    selector = svc["spec"].get("selector") or {}
    assert selector, f"{what}: no selector"
    matched = [w for w in ws if selects(selector, pod_labels(w))]
    assert len(matched) == 1, f"{what}: selector {selector} selects the pods of {[ident(w) for w in matched]}"
    ports = {p["name"]: p for c in pod_spec(matched[0])["containers"] for p in c.get("ports", [])}
    assert svc["spec"].get("ports"), f"{what}: no ports"
    for p in svc["spec"]["ports"]:
        target = p.get("targetPort")
        assert isinstance(target, str) and target in ports, (
            f"{what}: targetPort {target!r} is no named container port of {ident(matched[0])} ({sorted(ports)})"
        )
        assert p.get("protocol", "TCP") == ports[target].get("protocol", "TCP"), f"{what}: {target} protocol"


def check_gpu_exporter(ds: Obj) -> None:
    what = ident(ds)
    spec = pod_spec(ds)
    assert spec.get("hostPID") is True, f"{what}: hostPID is not true (NVML names processes by host PID)"
    assert spec.get("runtimeClassName") == "nvidia", f"{what}: runtimeClassName is not nvidia"
    selector = spec.get("nodeSelector") or {}
    terms = (
        (spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )

    def gpu_term(term: Obj) -> bool:
        return any(
            e["key"] in GPU_NODE_LABELS and (e["operator"] == "Exists" or e.get("values") == ["true"])
            for e in term.get("matchExpressions", [])
        )

    on_gpu_nodes = any(selector.get(k) == "true" for k in GPU_NODE_LABELS) or (
        bool(terms) and all(gpu_term(t) for t in terms)
    )
    assert on_gpu_nodes, f"{what}: not confined to GPU nodes (nodeSelector {selector}, affinity terms {terms})"
    assert any(
        t.get("key") == "nvidia.com/gpu" and t.get("effect") in (None, "NoSchedule")
        for t in spec.get("tolerations", [])
    ), f"{what}: does not tolerate the nvidia.com/gpu taint"
    for c in all_containers(spec):
        for kind in ("requests", "limits"):
            taken = [r for r in (c.get("resources") or {}).get(kind) or {} if r.startswith("nvidia.com/")]
            assert not taken, f"{what}: container {c['name']} {kind} {taken}: it must not take a GPU"
    volumes = [v for v in spec.get("volumes", []) if (v.get("hostPath") or {}).get("path") == POD_RESOURCES]
    assert len(volumes) == 1, f"{what}: no hostPath volume for {POD_RESOURCES}"
    exporter = spec["containers"][0]
    assert "nvml" in exporter.get("args", []), f"{what}: does not read NVML: {exporter.get('args')}"
    mounts = mounts_of(exporter, volumes[0]["name"])
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True, f"{what}: {POD_RESOURCES} is not mounted readOnly"
    socket = env_of(exporter).get("GPULEDGER_ATTRIBUTION__KUBELET_SOCKET")
    assert socket and socket.startswith(mounts[0]["mountPath"] + "/"), f"{what}: kubelet socket {socket!r}"


def check_replay_exporter(ds: Obj) -> None:
    what = ident(ds)
    spec = pod_spec(ds)
    assert not spec.get("hostPID"), f"{what}: hostPID in the replay overlay"
    assert not spec.get("runtimeClassName"), f"{what}: runtimeClassName in the replay overlay"
    assert not spec.get("affinity") and not spec.get("nodeSelector"), f"{what}: replay confined to some nodes"
    assert not [v for v in spec.get("volumes", []) if "hostPath" in v], f"{what}: hostPath in the replay overlay"
    for c in all_containers(spec):
        cw = f"{what} container {c['name']}"
        assert effective("runAsNonRoot", c, spec) is True, f"{cw}: runAsNonRoot is not true"
        assert effective("runAsUser", c, spec) == UID, f"{cw}: runAsUser {effective('runAsUser', c, spec)} != {UID}"
        assert not [m for m in c.get("volumeMounts", []) if m["mountPath"] == POD_RESOURCES], f"{cw}: pod-resources"
    exporter = spec["containers"][0]
    assert "replay" in exporter.get("args", []), f"{what}: does not replay: {exporter.get('args')}"
    assert env_of(exporter).get("GPULEDGER_ATTRIBUTION__KUBELET_SOCKET") == "", f"{what}: kubelet socket not off"


def check_restricted(w: Obj) -> None:
    """What the restricted Pod Security level refuses beyond check_workload's container settings."""
    what = ident(w)
    spec = pod_spec(w)
    for key in ("hostPID", "hostIPC", "hostNetwork"):
        assert not spec.get(key), f"{what}: {key} under the restricted level"
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        assert kinds <= RESTRICTED_VOLUMES, f"{what}: volume {v['name']} of type {kinds} under the restricted level"
    for c in all_containers(spec):
        assert effective("runAsNonRoot", c, spec) is True, f"{what}: {c['name']} may run as root"
        assert effective("runAsUser", c, spec) != 0, f"{what}: {c['name']} runs as uid 0"
        assert not [p for p in c.get("ports", []) if p.get("hostPort")], f"{what}: {c['name']} uses a hostPort"


def check_analytics(dep: Obj, objs: list[Obj]) -> None:
    what = ident(dep)
    spec = pod_spec(dep)
    claims = [v for v in spec.get("volumes", []) if "persistentVolumeClaim" in v]
    assert len(claims) == 1, f"{what}: no PersistentVolumeClaim volume"
    claim = claims[0]["persistentVolumeClaim"]["claimName"]
    pvcs = [p for p in of_kind(objs, "PersistentVolumeClaim") if p["metadata"]["name"] == claim]
    assert len(pvcs) == 1, f"{what}: its claim {claim} is not among the objects"
    container = spec["containers"][0]
    mounts = mounts_of(container, claims[0]["name"])
    assert len(mounts) == 1, f"{what}: the reports volume is not mounted"
    assert env_of(container).get("GPULEDGER_ANALYTICS__REPORTS_DIR") == mounts[0]["mountPath"], (
        f"{what}: the reports are not written to the volume"
    )
    if "ReadWriteOnce" in pvcs[0]["spec"]["accessModes"]:
        assert dep["spec"].get("replicas", 1) == 1, f"{what}: more than one writer of a ReadWriteOnce volume"
        assert dep["spec"].get("strategy", {}).get("type") == "Recreate", f"{what}: a rolling update would hang"
    assert effective("runAsNonRoot", container, spec) is True, f"{what}: may run as root"
    assert effective("runAsUser", container, spec) == UID, f"{what}: not the image's uid {UID}"


def check_kube_objects(objs: list[Obj], *, operator: bool, gpu: bool) -> None:
    """The objects of one deployment: `operator` when the prometheus-operator and dashboard objects are
    among them, `gpu` for the NVML exporter (False: the replay overlay)."""
    dupes = [k for k, n in Counter(ident(o) for o in objs).items() if n > 1]
    assert not dupes, f"objects defined twice: {dupes}"
    namespaces = of_kind(objs, "Namespace")
    assert [n["metadata"]["name"] for n in namespaces] == [NAMESPACE], f"namespaces {namespaces}"
    level = (namespaces[0]["metadata"].get("labels") or {}).get(PSS)
    expected_level = "privileged" if gpu else "restricted"
    assert level == expected_level, f"namespace {PSS}={level}, expected {expected_level}"

    ws = workloads(objs)
    assert sorted(ident(w) for w in ws) == [f"DaemonSet/{EXPORTER}", f"Deployment/{ANALYTICS}"], ws
    for w in ws:
        check_workload(w)
        if not gpu:
            check_restricted(w)
    services = of_kind(objs, "Service")
    assert sorted(s["metadata"]["name"] for s in services) == [ANALYTICS, EXPORTER], "services"
    for svc in services:
        check_service(svc, ws)

    exporter = one(objs, "DaemonSet", EXPORTER)
    if gpu:
        check_gpu_exporter(exporter)
    else:
        check_replay_exporter(exporter)
    check_analytics(one(objs, "Deployment", ANALYTICS), objs)

    operator_kinds = sorted({o["kind"] for o in objs if o["kind"] in CRD_KINDS})
    dashboards = [c for c in of_kind(objs, "ConfigMap") if "grafana_dashboard" in c["metadata"].get("labels", {})]
    if operator:
        assert operator_kinds == sorted(CRD_KINDS), f"prometheus-operator objects: {operator_kinds}"
        assert dashboards, "no dashboard ConfigMaps"
        check_operator_objects(objs)
    else:
        assert not operator_kinds, f"prometheus-operator objects where there should be none: {operator_kinds}"
        assert not dashboards, "dashboard ConfigMaps where there should be none"


def check_namespaced(objs: list[Obj]) -> None:
    for o in objs:
        ns = o["metadata"].get("namespace")
        if o["kind"] == "Namespace":
            assert ns is None and o["metadata"]["name"] == NAMESPACE, f"{ident(o)}"
        else:
            assert ns == NAMESPACE, f"{ident(o)} is in namespace {ns!r}, not {NAMESPACE}"
