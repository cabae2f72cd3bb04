"""Kubernetes manifests (deploy/kubernetes): every object passes the Kubernetes 1.32 schemas (strict), the
prometheus-operator objects are well formed, the workloads are wired together (selectors, ports, probes,
volumes) and locked down, the GPU exporter watches every GPU without taking one, the generated rules and
dashboards match their sources, and `kubectl kustomize` builds the base, core and replay overlay."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from conftest import REPO

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


def check_crd_structure(o: Obj) -> None:
    what = ident(o)
    assert o.get("apiVersion") == "monitoring.coreos.com/v1", f"{what}: apiVersion {o.get('apiVersion')}"
    assert set(o) <= {"apiVersion", "kind", "metadata", "spec"}, f"{what}: unknown top-level keys {sorted(o)}"
    meta = o["metadata"]
    assert DNS1123.fullmatch(meta.get("name", "")) and len(meta["name"]) <= 253, f"{what}: bad name"
    for key in ("labels", "annotations"):
        for k, v in (meta.get(key) or {}).items():
            assert isinstance(k, str) and isinstance(v, str), f"{what}: {key} {k!r}: {v!r} is not a string"
    spec = o["spec"]
    if o["kind"] == "ServiceMonitor":
        assert set(spec) <= {
            "selector",
            "endpoints",
            "namespaceSelector",
            "jobLabel",
            "targetLabels",
            "podTargetLabels",
            "sampleLimit",
        }, f"{what}: unknown spec keys {sorted(spec)}"
        assert set(spec["selector"]) <= {"matchLabels", "matchExpressions"}, f"{what}: selector {spec['selector']}"
        assert spec["endpoints"], f"{what}: no endpoints"
        for ep in spec["endpoints"]:
            assert set(ep) <= {
                "port",
                "targetPort",
                "path",
                "scheme",
                "interval",
                "scrapeTimeout",
                "honorLabels",
                "honorTimestamps",
                "relabelings",
                "metricRelabelings",
                "params",
            }, f"{what}: unknown endpoint keys {sorted(ep)}"
            assert isinstance(ep.get("port"), str) and ep["port"], f"{what}: endpoint without a port name"
            assert str(ep.get("path", "/metrics")).startswith("/"), f"{what}: path {ep.get('path')}"
            for key in ("interval", "scrapeTimeout"):
                duration(ep[key])
            for rl in [*ep.get("relabelings", []), *ep.get("metricRelabelings", [])]:
                assert set(rl) <= {
                    "sourceLabels",
                    "separator",
                    "targetLabel",
                    "regex",
                    "modulus",
                    "replacement",
                    "action",
                }, f"{what}: unknown relabeling keys {sorted(rl)}"
                action = rl.get("action", "replace").lower()
                assert action in {
                    "replace",
                    "keep",
                    "drop",
                    "keepequal",
                    "dropequal",
                    "hashmod",
                    "labelmap",
                    "labeldrop",
                    "labelkeep",
                    "lowercase",
                    "uppercase",
                }, f"{what}: relabel action {action}"
                if action == "replace":
                    assert rl.get("targetLabel"), f"{what}: replace without targetLabel"
                re.compile(rl.get("regex", "(.*)"))
    else:
        assert set(spec) == {"groups"}, f"{what}: spec keys {sorted(spec)}"
        groups = spec["groups"]
        assert isinstance(groups, list) and groups, f"{what}: no groups"
        names = [g.get("name") for g in groups]
        assert len(set(names)) == len(names) and all(names), f"{what}: group names {names}"
        for g in groups:
            assert set(g) <= {"name", "interval", "rules", "limit", "query_offset", "labels"}, f"{what}: {sorted(g)}"
            if "interval" in g:
                duration(g["interval"])
            assert g["rules"], f"{what}: group {g['name']} has no rules"
            for r in g["rules"]:
                rule = r.get("alert") or r.get("record")
                assert ("alert" in r) != ("record" in r), f"{what}: a rule is neither or both alert and record: {r}"
                assert isinstance(r.get("expr"), str) and r["expr"].strip(), f"{what}: {rule}: no expr"
                allowed = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
                if "record" in r:
                    allowed = {"record", "expr", "labels"}
                assert set(r) <= allowed, f"{what}: {rule}: keys {sorted(r)}"
                for key in ("for", "keep_firing_for"):
                    if key in r:
                        duration(r[key])
                for key in ("labels", "annotations"):
                    for k, v in (r.get(key) or {}).items():
                        assert isinstance(v, str), f"{what}: {rule}: {key}.{k} = {v!r} is not a string"


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
                assert probe["httpGet"].get("path") == "/healthz", f"{cw}: {kind} on {probe['httpGet'].get('path')}"
        assert "httpGet" in c["readinessProbe"], f"{cw}: readiness must ask /healthz"


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


def check_operator_objects(objs: list[Obj]) -> None:
    services = of_kind(objs, "Service")
    monitors = of_kind(objs, "ServiceMonitor")
    assert monitors, "no ServiceMonitors"
    scraped: set[str] = set()
    for sm in monitors:
        what = ident(sm)
        assert "namespaceSelector" not in sm["spec"], f"{what}: looks outside its own namespace"
        selector = sm["spec"]["selector"].get("matchLabels") or {}
        matched = [s for s in services if selects(selector, s["metadata"].get("labels") or {})]
        assert len(matched) == 1, f"{what}: selector {selector} matches Services {[ident(s) for s in matched]}"
        scraped.add(matched[0]["metadata"]["name"])
        port_names = {p.get("name") for p in matched[0]["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            assert ep.get("port") in port_names, f"{what}: port {ep.get('port')!r} is not a port of {ident(matched[0])}"
            timeout, interval = duration(ep["scrapeTimeout"]), duration(ep["interval"])
            assert timeout <= interval, f"{what}: scrapeTimeout {ep['scrapeTimeout']} > interval {ep['interval']}"
    assert scraped == {s["metadata"]["name"] for s in services}, f"Services no ServiceMonitor scrapes: {scraped}"

    rule_files = sorted(RULES_DIR.glob("*.yml"))
    assert rule_files, f"no rule files in {RULES_DIR}"
    rules = of_kind(objs, "PrometheusRule")
    assert len(rules) == len(rule_files), f"{len(rules)} PrometheusRules for {len(rule_files)} rule files"
    by_source = {r["metadata"].get("annotations", {}).get("gpuledger/source"): r for r in rules}
    for f in rule_files:
        source = f.relative_to(REPO).as_posix()
        assert source in by_source, f"no PrometheusRule from {source}"
        groups = yaml.safe_load(f.read_text(encoding="utf-8"))["groups"]
        assert by_source[source]["spec"]["groups"] == groups, f"{ident(by_source[source])}: groups differ from {source}"

    dashboard_files = sorted(DASHBOARDS_DIR.glob("*.json"))
    assert dashboard_files, f"no dashboards in {DASHBOARDS_DIR}"
    keyed = [c for c in of_kind(objs, "ConfigMap") if any(k.endswith(".json") for k in c.get("data", {}))]
    labelled = [c for c in of_kind(objs, "ConfigMap") if "grafana_dashboard" in c["metadata"].get("labels", {})]
    assert sorted(map(ident, labelled)) == sorted(map(ident, keyed)), "dashboard labels and dashboard ConfigMaps differ"
    found = sorted(k for c in keyed for k in c["data"])
    assert found == [f.name for f in dashboard_files], f"dashboard ConfigMaps hold {found}"
    for c in keyed:
        what = ident(c)
        assert c["metadata"].get("labels", {}).get("grafana_dashboard") == "1", f"{what}: no grafana_dashboard: '1'"
        for key, text in c["data"].items():
            assert text.encode("utf-8") == (DASHBOARDS_DIR / key).read_bytes(), f"{what}: {key} differs from its source"


def check_namespaced(objs: list[Obj]) -> None:
    for o in objs:
        ns = o["metadata"].get("namespace")
        if o["kind"] == "Namespace":
            assert ns is None and o["metadata"]["name"] == NAMESPACE, f"{ident(o)}"
        else:
            assert ns == NAMESPACE, f"{ident(o)} is in namespace {ns!r}, not {NAMESPACE}"


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
    "probe-unknown-port": (_set(["containers", 0, "livenessProbe", "tcpSocket", "port"], "web", _analytics), "port"),
    "probe-path": (_set(["containers", 0, "readinessProbe", "httpGet", "path"], "/metrics", _exporter), "/metrics"),
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


def test_kustomize_base_builds(source_objects: list[Obj]) -> None:
    objs = build_and_check(KUBE, operator=True, gpu=True)
    assert sorted(map(ident, objs)) == sorted(map(ident, source_objects)), "the base build is not every source object"


def test_kustomize_core_builds_without_operator() -> None:
    objs = build_and_check(KUBE / "core", operator=False, gpu=True)
    assert sorted(map(ident, objs)) == sorted(map(ident, load_manifests(CORE_MANIFESTS)))


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


# --- generate.py -----------------------------------------------------------------------------------------


def run_generate(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, cwd=script.parent
    )


def test_generated_manifests_are_current() -> None:
    r = run_generate(GENERATE, "--check")
    assert r.returncode == 0, f"generate.py --check: exit {r.returncode}\n{r.stdout}{r.stderr}"


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """generate.py and its sources, laid out as in the repository under tmp_path."""
    shutil.copytree(KUBE, tmp_path / "deploy" / "kubernetes")
    shutil.copytree(RULES_DIR, tmp_path / "deploy" / "prometheus" / "rules")
    shutil.copytree(DASHBOARDS_DIR, tmp_path / "grafana" / "dashboards")
    return tmp_path


def test_generate_check_detects_stale_output(tree_copy: Path) -> None:
    script = tree_copy / "deploy" / "kubernetes" / "generate.py"
    assert run_generate(script, "--check").returncode == 0
    out = tree_copy / "deploy" / "kubernetes" / "dashboards" / "dashboards.yaml"
    stale = out.read_text(encoding="utf-8").replace('"gpuledger"', '"gpuledger-old"', 1)
    out.write_text(stale, encoding="utf-8")
    r = run_generate(script, "--check")
    assert r.returncode == 1 and "dashboards.yaml is stale" in r.stderr, r.stderr
    assert out.read_text(encoding="utf-8") == stale, "--check wrote the file"
    r = run_generate(script)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (KUBE / "dashboards" / "dashboards.yaml").read_bytes()


BAD_SOURCES = {
    # the parser's message gives the line, not the file: test_generate_names_the_broken_yaml_file
    "yaml-syntax": ("deploy/prometheus/rules/zz-bad.yml", "groups:\n  - name: x\n    rules: [\n", "line 4"),
    "no-groups": ("deploy/prometheus/rules/zz-bad.yml", "rules:\n  - record: x\n    expr: up\n", "no groups"),
    "empty-groups": ("deploy/prometheus/rules/zz-bad.yml", "groups: []\n", "no groups"),
    "extra-keys": (
        "deploy/prometheus/rules/zz-bad.yml",
        "groups:\n  - name: g\n    rules:\n      - record: x\n        expr: up\nalerting: {}\n",
        "keys other than groups",
    ),
    "dashboard-json": ("grafana/dashboards/zz-bad.json", '{"title": "x",\n', "not JSON"),
}


@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_generate_refuses_bad_sources(tree_copy: Path, case: str, check: bool) -> None:
    rel, text, message = BAD_SOURCES[case]
    (tree_copy / rel).write_text(text, encoding="utf-8")
    script = tree_copy / "deploy" / "kubernetes" / "generate.py"
    outputs = [
        tree_copy / "deploy" / "kubernetes" / "operator" / "prometheusrules.yaml",
        tree_copy / "deploy" / "kubernetes" / "dashboards" / "dashboards.yaml",
    ]
    before = [p.read_bytes() for p in outputs]
    r = run_generate(script, *(["--check"] if check else []))
    assert r.returncode not in (0, 1), f"exit {r.returncode} on a broken {rel}: {r.stdout}{r.stderr}"
    assert r.stderr.startswith("generate.py: ") and message in r.stderr, r.stderr
    if case != "yaml-syntax":
        assert "zz-bad" in r.stderr, f"the message does not name the broken file: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    assert [p.read_bytes() for p in outputs] == before, "a generated file was written from a broken source"


def test_generate_refuses_no_rules(tree_copy: Path) -> None:
    for f in (tree_copy / "deploy" / "prometheus" / "rules").iterdir():
        f.unlink()
    r = run_generate(tree_copy / "deploy" / "kubernetes" / "generate.py")
    assert r.returncode not in (0, 1) and "no rule files" in r.stderr, r.stderr


def test_generate_names_the_broken_yaml_file(tree_copy: Path) -> None:
    (tree_copy / "deploy" / "prometheus" / "rules" / "zz-bad.yml").write_text("groups: [\n", encoding="utf-8")
    r = run_generate(tree_copy / "deploy" / "kubernetes" / "generate.py", "--check")
    assert r.returncode == 2, r.stderr
    assert "zz-bad.yml" in r.stderr, r.stderr
