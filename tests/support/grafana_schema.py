"""Grafana's own dashboard schema, as grafana-foundation-sdk generates it (Python types from Grafana's
CUE schema), used as a checker of the JSON grafana/ writes: no port of the DSL (docs/decisions.md).

``schema_problems`` decodes a dashboard with the SDK's models and encodes it again. A key the schema
does not know (a misspelt option, one of another panel kind) is lost on the way; a value outside a
closed set (an enum, a ``Literal``) is kept but is checked against it here, and so is each unit
against the SDK's list of Grafana's units (or a custom ``suffix:``-style one). Transformation options
and override values are ``object`` in the schema, so they are not checked (their tests are the
layout and query tests of tests/deploy/test_dashboards.py).
"""

from __future__ import annotations

import enum
import json
import os
import re
import types
import typing
from typing import Any

import pytest

Json = dict[str, Any]

# Keys Grafana itself writes that the schema leaves out, and why they stay
NOT_IN_SCHEMA = {
    # the text of a query variable's query as Grafana's variable editor shows it (Grafana writes it on
    # save; provisioning keeps it): `query` is the schema's field
    ".templating.list[*].definition",
}


def require_sdk() -> None:
    """Skip when the SDK is missing (a virtualenv older than pyproject.toml's dev extra); fail in CI."""
    import importlib.util

    if importlib.util.find_spec("grafana_foundation_sdk") is None:
        reason = "grafana-foundation-sdk not installed (pip install -e '.[dev]'; scripts/test installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def schema_problems(dashboard: Json) -> list[str]:
    """What in ``dashboard`` (Grafana's JSON model) the schema does not know or does not allow."""
    from grafana_foundation_sdk.cog import runtime
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    problems: list[str] = []
    for p in dashboard.get("panels", []):
        if p["type"] != "row" and runtime.panelcfg_config(p["type"]) is None:
            problems.append(f"panel {p.get('title')!r}: type {p['type']!r} unknown to the schema")
    model = Dashboard.from_json(dashboard)
    back = json.loads(JSONEncoder().encode(model))
    problems += [f"{path}: not in the schema" for path in _lost(dashboard, back, "")]
    problems += _closed_sets(model, "")
    problems += _units(dashboard)
    return problems


# Grafana's custom units: a prefix, then free text ("suffix: samples/s", "currency:EUR")
CUSTOM_UNIT = re.compile(r"(prefix|suffix|si|count|currency|time):.+")


def _units(dashboard: Json) -> list[str]:
    """Every unit (field defaults, overrides, a heatmap's axis and cells) is one of Grafana's or custom."""
    from grafana_foundation_sdk.models import units

    known = {v for k, v in vars(units).items() if not k.startswith("_") and isinstance(v, str)}
    out = []
    for p in dashboard.get("panels", []):
        where = f"panel {p.get('title')!r}"
        found = [p.get("fieldConfig", {}).get("defaults", {}).get("unit")]
        found += [p.get("options", {}).get(k, {}).get("unit") for k in ("yAxis", "cellValues")]
        for o in p.get("fieldConfig", {}).get("overrides", []):
            found += [x.get("value") for x in o["properties"] if x["id"] == "unit"]
        out += [f"{where}: unit {u!r} unknown" for u in found if u and u not in known and not CUSTOM_UNIT.fullmatch(u)]
    return out


def _generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", path)


def _lost(ours: Any, back: Any, path: str) -> list[str]:
    """Paths in ``ours`` that the round trip dropped (a null counts as absent)."""
    if isinstance(ours, dict) and isinstance(back, dict):
        out = []
        for k, v in ours.items():
            where = f"{path}.{k}"
            if k not in back:
                if v is not None and _generic(where) not in NOT_IN_SCHEMA:
                    out.append(where)
            else:
                out += _lost(v, back[k], where)
        return out
    if isinstance(ours, list) and isinstance(back, list):
        return [w for i, (a, b) in enumerate(zip(ours, back, strict=False)) for w in _lost(a, b, f"{path}[{i}]")]
    return []


def _allowed(hint: Any) -> set[Any] | None:
    """The values a closed-set type admits (None for an open type: str, int, a model class)."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return set(typing.get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {m.value for m in hint}
    if origin in (typing.Union, types.UnionType):
        parts = [a for a in typing.get_args(hint) if a is not type(None)]
        sets = [_allowed(a) for a in parts]
        if sets and all(s is not None for s in sets):
            return set().union(*(s for s in sets if s is not None))
    return None


def _closed_sets(obj: Any, path: str) -> list[str]:
    """Every enum- or Literal-typed field of the decoded model (and its nested models) holds a member."""
    if isinstance(obj, list):
        return [w for i, x in enumerate(obj) for w in _closed_sets(x, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [w for k, x in obj.items() for w in _closed_sets(x, f"{path}.{k}")]
    if not type(obj).__module__.startswith("grafana_foundation_sdk.") or not hasattr(obj, "__dict__"):
        return []
    out: list[str] = []
    hints = typing.get_type_hints(type(obj))
    for name, value in vars(obj).items():
        if value is None:
            continue
        allowed = _allowed(hints.get(name))
        if allowed is not None and value not in allowed:
            out.append(f"{path}.{name}: {value!r} is none of {sorted(map(str, allowed))}")
        out += _closed_sets(value, f"{path}.{name}")
    return out
