"""Shared by the deployment tests (tests/test_deploy_*.py): where the deployment files are, a YAML
loader that understands Docker Compose's `!reset` and `!override` tags, Compose's variable
interpolation, and Compose's rules for merging several `-f` files into one model."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"

COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
COMPOSE_REPLAY_FILE = COMPOSE_DIR / "compose.replay.yaml"
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
VENV_GPULEDGER = REPO / ".venv" / "bin" / "gpuledger"  # scripts/test's virtualenv
INSTALLED_GPULEDGER = "/opt/gpuledger/bin/gpuledger"  # where the systemd units expect it


def yaml_files() -> list[Path]:
    """Every YAML file of the deployments and of Grafana's provisioning."""
    roots = (DEPLOY, GRAFANA_PROVISIONING)
    return sorted(p for root in roots for pattern in ("*.yml", "*.yaml") for p in root.rglob(pattern))


# ---- YAML with Compose's tags --------------------------------------------------------------------


@dataclass(frozen=True)
class ComposeTag:
    """A value tagged in a Compose file; only compose_merge gives the tag a meaning."""

    value: Any


class Reset(ComposeTag):
    """`!reset`: the attribute is removed from the model the earlier files built."""


class Override(ComposeTag):
    """`!override`: the attribute replaces the earlier files' instead of being merged with it."""


class ComposeLoader(yaml.SafeLoader):
    """yaml.SafeLoader plus `!reset` and `!override` on any node (scalar, sequence or mapping)."""


def _construct_untagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, yaml.ScalarNode)
    # the tag replaced the scalar's implicit type (null, int, bool, ...): resolve it as if untagged
    tag = loader.resolve(yaml.ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
    return loader.construct_object(yaml.ScalarNode(tag, node.value, node.start_mark, node.end_mark), deep=True)


def _reset(loader: yaml.SafeLoader, node: yaml.Node) -> Reset:
    return Reset(_construct_untagged(loader, node))


def _override(loader: yaml.SafeLoader, node: yaml.Node) -> Override:
    return Override(_construct_untagged(loader, node))


ComposeLoader.add_constructor("!reset", _reset)
ComposeLoader.add_constructor("!override", _override)


def load_yaml(path: Path) -> Any:
    """The one document of a YAML file (Compose tags allowed)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=ComposeLoader)


def load_yaml_all(path: Path) -> list[Any]:
    """Every document of a (multi-document) YAML file, empty ones left out."""
    docs = yaml.load_all(path.read_text(encoding="utf-8"), Loader=ComposeLoader)
    return [d for d in docs if d is not None]


def has_compose_tags(value: Any) -> bool:
    if isinstance(value, ComposeTag):
        return True
    if isinstance(value, Mapping):
        return any(has_compose_tags(v) for v in value.values())
    if isinstance(value, list):
        return any(has_compose_tags(v) for v in value)
    return False


# ---- interpolation -------------------------------------------------------------------------------

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    pass


def _interpolate_string(text: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name = m["braced"] or m["named"]
        op, arg = m["op"], m["arg"] or ""
        value = env.get(name)
        is_set = value is not None
        non_empty = bool(value)
        present = non_empty if op and op.startswith(":") else is_set
        if op in (":-", "-"):
            return value if present and value is not None else arg
        if op in (":?", "?"):
            if not present or value is None:
                raise InterpolationError(f"${{{name}}} is required: {arg}")
            return value
        if op in (":+", "+"):
            return arg if present else ""
        return value or ""

    return _VARIABLE.sub(sub, text)


def interpolate(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR:+alt}, $VAR and $$
    in every string value of a loaded Compose file (tags kept), with `env` as the environment."""
    env = env or {}
    if isinstance(value, str):
        return _interpolate_string(value, env)
    if isinstance(value, Reset):
        return Reset(interpolate(value.value, env))
    if isinstance(value, Override):
        return Override(interpolate(value.value, env))
    if isinstance(value, Mapping):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


# ---- merging -f files ----------------------------------------------------------------------------

# sequences whose entries are unique by a key: an entry of the later file replaces the earlier
# entry with the same key, the others are appended (Compose specification, "Merge")
_UNIQUE_BY_TARGET = frozenset({"volumes", "secrets", "configs", "devices"})
# attributes that may be written as a list of KEY=VALUE and are merged as mappings
_MAPPING_OR_LIST = frozenset({"environment", "labels", "annotations", "extra_hosts", "sysctls", "build_args"})


def _plain(value: Any) -> Any:
    """A value with its tags applied against nothing: `!reset` entries gone, `!override` unwrapped."""
    if isinstance(value, Override):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if not isinstance(v, Reset)}
    if isinstance(value, list):
        return [_plain(v) for v in value if not isinstance(v, Reset)]
    return copy.deepcopy(value)


def _as_mapping(value: Any) -> Any:
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            key, sep, val = str(item).partition("=")
            out[key] = val if sep else None
        return out
    return value


def _in_service(path: tuple[str, ...]) -> bool:
    return len(path) >= 2 and path[0] == "services"


def _replaced_sequence(path: tuple[str, ...]) -> bool:
    """command, entrypoint and healthcheck.test: the later file's replaces the earlier's."""
    if not _in_service(path):
        return False
    inner = path[2:]
    return inner in (("command",), ("entrypoint",), ("healthcheck", "test"))


def _target(entry: Any) -> Any:
    """The unique key of a volumes/secrets/configs/devices entry: where it appears in the container."""
    if isinstance(entry, Mapping):
        return entry.get("target", entry.get("source"))
    parts = str(entry).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _merge_sequences(path: tuple[str, ...], base: list[Any], over: list[Any]) -> list[Any]:
    if _replaced_sequence(path):
        return [_plain(v) for v in over]
    merged = [copy.deepcopy(v) for v in base]
    unique = _in_service(path) and len(path) == 3 and path[2] in _UNIQUE_BY_TARGET
    for entry in over:
        if isinstance(entry, Reset):
            continue
        entry = _plain(entry)
        if unique:
            same = [i for i, old in enumerate(merged) if _target(old) == _target(entry)]
            if same:
                merged[same[0]] = entry
                continue
        elif entry in merged and _in_service(path) and len(path) == 3 and path[2] == "ports":
            continue  # the same port mapping twice is one mapping
        merged.append(entry)
    return merged


def _merge(path: tuple[str, ...], base: Any, over: Any) -> Any:
    if isinstance(over, Reset):
        raise AssertionError("a Reset is handled by its parent mapping")
    if isinstance(over, Override):
        return _plain(over.value)
    key = path[-1] if path else ""
    if _in_service(path) and len(path) == 3 and key in _MAPPING_OR_LIST:
        base, over = _as_mapping(base), _as_mapping(over)
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        out = {k: copy.deepcopy(v) for k, v in base.items()}
        for k, v in over.items():
            if isinstance(v, Reset):
                out.pop(k, None)
            elif k in out:
                out[k] = _merge((*path, str(k)), out[k], v)
            else:
                out[k] = _plain(v)
        return out
    if isinstance(base, list) and isinstance(over, list):
        return _merge_sequences(path, base, over)
    return _plain(over)


def compose_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """The model `docker compose -f base -f over` builds: mappings merge key by key, recursively;
    sequences append (volumes, secrets, configs and devices entries replace the earlier one with
    the same target; a port mapping already there is not repeated), except command, entrypoint and
    healthcheck.test, which the later file replaces; scalars are replaced; `!reset` removes the
    attribute, `!override` replaces it whole. Neither argument is changed."""
    merged = _merge((), dict(base), dict(over))
    assert isinstance(merged, dict)
    return merged


def load_compose(*files: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`docker compose -f FILE [-f FILE ...]`'s model, interpolated with `env` (default: none set,
    i.e. every ${VAR:-default} at its default)."""
    model: dict[str, Any] = {}
    for f in files:
        doc = load_yaml(f)
        assert isinstance(doc, dict), f"{f}: not a mapping"
        model = compose_merge(model, interpolate(doc, env))
    return model


def documents(paths: Iterable[Path]) -> Iterator[tuple[Path, Any]]:
    """(file, document) for every document of every file."""
    for p in paths:
        for doc in load_yaml_all(p):
            yield p, doc
