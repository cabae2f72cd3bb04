"""Reading the Compose model for the deployment tests: the stacks (GPU, and GPU + replay merged),
mounts, ports, commands and environment of a service, and the Dockerfile facts Compose relies on."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from deploy_files import (
    COMPOSE_DIR,
    COMPOSE_FILE,
    COMPOSE_REPLAY_FILE,
    DOCKERFILE,
    REPO,
    load_compose,
)

from gpuledger.cli import build_parser

if str(REPO) not in sys.path:  # grafana/ is no installed package
    sys.path.insert(0, str(REPO))


Json = dict[str, Any]

SERVICES = ("exporter", "analytics", "prometheus", "alertmanager", "grafana")
GPULEDGER_SERVICES = ("exporter", "analytics")
STACK_FILES: dict[str, tuple[Path, ...]] = {
    "gpu": (COMPOSE_FILE,),
    "replay": (COMPOSE_FILE, COMPOSE_REPLAY_FILE),
}
HOST_PATHS_ALLOWED = {Path("/etc/passwd")}  # the exporter's user names (GPU stack)
LOOPBACK = "127.0.0.1"


def stack(name: str, env: dict[str, str] | None = None) -> Json:
    return load_compose(*STACK_FILES[name], env=env)


# ---- reading the Compose model -----------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    kind: str  # bind | volume | tmpfs
    source: str | None  # host path as written (bind), volume name (volume), None (anonymous, tmpfs)
    target: str
    read_only: bool

    @property
    def host_path(self) -> Path:
        """A bind mount's source, relative ones resolved against the compose project folder."""
        assert self.kind == "bind" and self.source is not None
        return (COMPOSE_DIR / Path(self.source).expanduser()).resolve()


def _is_path(source: str) -> bool:
    return source.startswith(("/", ".", "~"))


def mounts(service: Json) -> list[Mount]:
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            kind = v.get("type", "volume")
            out.append(Mount(kind, v.get("source"), v["target"], bool(v.get("read_only", False))))
            continue
        parts = str(v).split(":")
        if len(parts) == 1:  # an anonymous volume
            out.append(Mount("volume", None, parts[0], False))
            continue
        source, target, *mode = parts
        ro = bool(mode) and "ro" in mode[0].split(",")
        out.append(Mount("bind" if _is_path(source) else "volume", source, target, ro))
    out += [Mount("tmpfs", None, str(t).split(":")[0], False) for t in _as_list(service.get("tmpfs"))]
    return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


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
    out = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.append(Port(p.get("host_ip"), str(p.get("published")), int(p["target"])))
            continue
        spec = str(p).split("/")[0]
        host_ip: str | None = None
        if spec.startswith("["):  # [v6]:published:target
            close = spec.index("]")
            host_ip, spec = spec[1:close], spec[close + 2 :]
            published, target = spec.split(":")
        else:
            parts = spec.split(":")
            if len(parts) == 3:
                host_ip, published, target = parts
            elif len(parts) == 2:
                published, target = parts
            else:
                published, target = "", parts[0]
        out.append(Port(host_ip or None, published or None, int(target)))
    return out


def container_ports(service: Json) -> set[int]:
    exposed = {int(str(e).split("/")[0]) for e in service.get("expose", [])}
    return {p.target for p in ports(service)} | exposed


def flag(service: Json, name: str) -> str:
    """The value of --name=VALUE in a service's command."""
    values = [str(a).split("=", 1)[1] for a in service.get("command", []) if str(a).startswith(f"--{name}=")]
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
    assert "entrypoint" not in service, "the compose file should use the image's entrypoint"
    assert dockerfile_entrypoint() == ["gpuledger"]
    return build_parser().parse_args([str(a) for a in service["command"]])


def environment(service: Json) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(str(e).partition("=")[::2] for e in env)
    return {str(k): str(v) for k, v in env.items()}
