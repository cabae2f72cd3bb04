"""The Prometheus, Alertmanager and Grafana configs the deployments mount: Prometheus' targets and rule
files fit the Compose stack; the scrape job names are the ones the alert rules select, on Compose
and on Kubernetes; promtool and amtool accept the configs; Grafana's provisioning fits the mounts
and the dashboards' datasource uid."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from daemonkit.settings import split_listen
from tests.support.deploy_files import (
    ALERT_RULES,
    ALERTMANAGER_CONFIG,
    GRAFANA_DASHBOARDS,
    GRAFANA_DATASOURCES_FILE,
    GRAFANA_PROVIDER_FILE,
    KUBERNETES_DIR,
    PROMETHEUS_CONFIG,
    REPO,
    STACK_FILES,
    Json,
    container_ports,
    load_yaml,
    load_yaml_all,
    mounts,
    stack,
)
from tests.support.tools import require_binary

if str(REPO) not in sys.path:  # grafana/ is no installed package
    sys.path.insert(0, str(REPO))

from grafana.model import DATASOURCE_UID


@pytest.fixture(params=list(STACK_FILES))
def stack_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def services(stack_name: str) -> dict[str, Json]:
    svcs: dict[str, Json] = stack(stack_name)["services"]
    return svcs


# ---- Prometheus and Alertmanager -----------------------------------------------------------------


def static_targets(config: Json) -> dict[str, list[str]]:
    """job name -> static targets; the Alertmanagers under "alerting"."""
    out = {
        job["job_name"]: [t for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
        for job in config["scrape_configs"]
    }
    out["alerting"] = [
        t for am in config["alerting"]["alertmanagers"] for sc in am.get("static_configs", []) for t in sc["targets"]
    ]
    return out


def test_prometheus_targets_are_compose_services(stack_name: str) -> None:
    services = stack(stack_name)["services"]
    targets = static_targets(load_yaml(PROMETHEUS_CONFIG))
    assert targets == {
        "gpuledger": ["exporter:10044"],
        "gpuledger-analytics": ["analytics:10045"],
        "alerting": ["alertmanager:9093"],
    }
    for job, addresses in targets.items():
        for address in addresses:
            host, port = split_listen(address)
            assert host in services, f"{job}: {address} is no compose service"
            assert port in container_ports(services[host]), f"{job}: {host} does not listen on {port}"


def job_matchers(alert: Json) -> list[tuple[str, str]]:
    """(operator, value) of every job matcher in an alert's expression."""
    expr = str(alert["expr"])
    selectors = re.findall(r"\{([^{}]*)\}", expr)
    return [
        (op, value) for sel in selectors for op, value in re.findall(r'\bjob\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', sel)
    ]


def matches(job: str, op: str, value: str) -> bool:
    if op == "=":
        return job == value
    if op == "!=":
        return job != value
    hit = re.fullmatch(value, job) is not None  # PromQL regexes are anchored
    return hit if op == "=~" else not hit


def kubernetes_jobs() -> dict[str, str]:
    """component (exporter, analytics) -> the job prometheus-operator gives its ServiceMonitor's
    targets: the value of the Service's jobLabel label, or the Service's name."""
    services = [
        d for f in sorted((KUBERNETES_DIR / "core").glob("*.yaml")) for d in load_yaml_all(f) if d["kind"] == "Service"
    ]
    monitors = [
        d for d in load_yaml_all(KUBERNETES_DIR / "operator" / "servicemonitors.yaml") if d["kind"] == "ServiceMonitor"
    ]
    jobs = {}
    for sm in monitors:
        selector = sm["spec"]["selector"]["matchLabels"]
        selected = [s for s in services if selector.items() <= s["metadata"].get("labels", {}).items()]
        assert len(selected) == 1, f"ServiceMonitor {sm['metadata']['name']} selects {len(selected)} Services"
        svc = selected[0]
        job_label = sm["spec"].get("jobLabel")
        job = svc["metadata"]["labels"][job_label] if job_label else svc["metadata"]["name"]
        jobs[svc["metadata"]["labels"]["app.kubernetes.io/component"]] = job
    return jobs


def test_kubernetes_jobs_are_the_ones_the_rules_select() -> None:
    scrape = {job["job_name"]: job for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]}
    assert "gpuledger" in scrape and "gpuledger-analytics" in scrape
    k8s = kubernetes_jobs()
    assert set(k8s) == {"exporter", "analytics"}
    jobs = {"exporter": ["gpuledger", k8s["exporter"]], "analytics": ["gpuledger-analytics", k8s["analytics"]]}
    alerts = [r for g in load_yaml(ALERT_RULES)["groups"] for r in g["rules"] if "alert" in r]
    checked = dict.fromkeys(jobs, 0)
    for alert in alerts:
        component = alert.get("labels", {}).get("component")
        for op, value in job_matchers(alert):
            assert component in jobs, f"{alert['alert']} selects job {op}{value!r} but is no exporter/analytics alert"
            for job in jobs[component]:
                assert matches(job, op, value), f"{alert['alert']}: job{op}{value!r} misses job {job!r}"
            checked[component] += 1
    assert all(checked.values()), f"no job matcher found for {[c for c, n in checked.items() if not n]}"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("tool", "args"),
    [("promtool", ["check", "config", str(PROMETHEUS_CONFIG)]), ("amtool", ["check-config", str(ALERTMANAGER_CONFIG)])],
    ids=["prometheus.yml-promtool", "alertmanager.yml-amtool"],
)
def test_config_passes_its_checker(tool: str, args: list[str]) -> None:
    res = subprocess.run([require_binary(tool), *args], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


# ---- Grafana -------------------------------------------------------------------------------------


def test_grafana_provisioning_fits_compose() -> None:
    services = stack("gpu")["services"]
    datasources = load_yaml(GRAFANA_DATASOURCES_FILE)["datasources"]
    assert len(datasources) == 1
    ds = datasources[0]
    assert ds["type"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"
    host, port = split_listen(ds["url"].removeprefix("http://"))
    assert host in services and port in container_ports(services[host])
    assert ds["uid"] == DATASOURCE_UID
    providers = load_yaml(GRAFANA_PROVIDER_FILE)["providers"]
    assert len(providers) == 1
    path = providers[0]["options"]["path"]
    dashboards = [m for m in mounts(services["grafana"]) if m.kind == "bind" and m.host_path == GRAFANA_DASHBOARDS]
    assert [m.target for m in dashboards] == [path]
