"""The prometheus-operator objects (ServiceMonitor, PrometheusRule) and the dashboard ConfigMaps,
checked by structure, since their CRD schemas are not among kubernetes-validate's: fields and
durations, selectors that meet the Services, rule groups equal to deploy/prometheus/rules, dashboards
equal to grafana/dashboards."""

from __future__ import annotations

import re

import yaml

from tests.support.kube_objects import (
    DASHBOARDS_DIR,
    DNS1123,
    RULES_DIR,
    Obj,
    duration,
    ident,
    of_kind,
    selects,
)
from tests.support.paths import REPO


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
