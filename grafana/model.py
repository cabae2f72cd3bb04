"""What the layout and every panel kind share of Grafana's JSON model: the schema version, the
datasource, a panel's query (``Q``), threshold steps and value mappings, with the presets the
dashboards colour their figures by. The panel kinds themselves are in ``grafana.panels``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

SCHEMA_VERSION = 39  # Grafana 11.0
TAG = "gpuledger"
DATASOURCE_UID = "gpuledger-prometheus"  # grafana/provisioning/datasources/gpuledger.yml
DATASOURCE_NAME = "gpuledger Prometheus"
REFS = "ABCDEFGHIJKLMNOP"


def ds() -> Json:
    return {"type": "prometheus", "uid": "${datasource}"}


# --- queries, thresholds, mappings -----------------------------------------------------------------
@dataclass(frozen=True)
class Q:
    """One query of a panel. ``instant`` for figures over the whole time range (``$__range``)."""

    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"  # table | heatmap

    def to_json(self, ref: str) -> Json:
        return {
            "datasource": ds(),
            "refId": ref,
            "editorMode": "code",
            "expr": self.expr,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "instant": self.instant,
            "format": self.fmt,
        }


def steps(base: str, *more: tuple[float, str]) -> Json:
    """Absolute thresholds: ``base`` below the first value, then each (value, colour)."""
    return {
        "mode": "absolute",
        "steps": [{"color": base, "value": None}, *({"color": c, "value": v} for v, c in more)],
    }


UTILISATION = steps("red", (0.3, "orange"), (0.6, "green"))  # under 30 % red, under 60 % amber
EFFICIENCY = steps("red", (0.6, "orange"), (0.8, "green"))  # multi-GPU: dear, usual, cheap (cost-model.md)
PROBLEM = steps("green", (1, "red"))  # any count above zero is a problem
WARNING = steps("green", (1, "orange"))
NEUTRAL = steps("blue")


def mapping(**values: tuple[str, str]) -> list[Json]:
    """Value mappings: raw value (``v0``, ``v1`` for 0 and 1) -> (text, colour)."""
    options = {k.removeprefix("v"): {"text": t, "color": c, "index": i} for i, (k, (t, c)) in enumerate(values.items())}
    return [{"type": "value", "options": options}]


UP_DOWN = mapping(v1=("UP", "green"), v0=("DOWN", "red"))
YES_NO_BAD = mapping(v0=("no", "green"), v1=("yes", "red"))
