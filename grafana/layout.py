"""Dashboard variables and the layout: panels placed left to right in rows of 24 columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from grafana.model import DATASOURCE_NAME, DATASOURCE_UID, SCHEMA_VERSION, TAG, Json, ds

WIDTH = 24
# a drop-down of every gpuledger dashboard, keeping the time range and the variables
LINKS = {
    "title": "gpuledger",
    "type": "dashboards",
    "tags": [TAG],
    "asDropdown": True,
    "includeVars": True,
    "keepTime": True,
    "icon": "external link",
    "targetBlank": False,
    "tooltip": "",
    "url": "",
}


# --- variables ----------------------------------------------------------------------------------------
def datasource_var() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "regex": "",
        "current": {"selected": False, "text": DATASOURCE_NAME, "value": DATASOURCE_UID},
        "options": [],
        "refresh": 1,
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "skipUrlSync": False,
    }


def query_var(
    name: str, label: str, query: str, description: str, *, multi: bool = True, include_all: bool = True, hide: int = 0
) -> Json:
    """A ``label_values(...)`` variable; ``All`` is the regex ``.*`` so selectors keep working."""
    current: Json = {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all else {}
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": ds(),
        "query": query,
        "definition": query,
        "refresh": 2,  # on time range change: GPUs and jobs come and go
        "regex": "",
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "allValue": ".*" if include_all else None,
        "current": current,
        "options": [],
        "hide": hide,
        "skipUrlSync": False,
    }


def custom_var(name: str, label: str, values: Sequence[str], description: str) -> Json:
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "custom",
        "query": ",".join(values),
        "current": {"selected": True, "text": values[0], "value": values[0]},
        "options": [{"selected": i == 0, "text": v, "value": v} for i, v in enumerate(values)],
        "multi": False,
        "includeAll": False,
        "hide": 0,
        "skipUrlSync": False,
    }


def gpu_vars() -> list[Json]:
    """datasource, job ("cluster/job"), hostname and GPU, chained on gpuledger_gpu_info."""
    return [
        datasource_var(),
        query_var(
            "job",
            "cluster/job",
            "label_values(gpuledger_gpu_info, job)",
            "Prometheus job label of the exporters: one per cluster or scrape job.",
        ),
        query_var(
            "hostname",
            "hostname",
            'label_values(gpuledger_gpu_info{job=~"$job"}, hostname)',
            "Hosts of the selected jobs (the exporter's hostname label, not the scrape address).",
        ),
        query_var(
            "gpu",
            "GPU",
            'label_values(gpuledger_gpu_info{job=~"$job", hostname=~"$hostname"}, uuid)',
            "GPUs (by UUID) of the selected hosts.",
        ),
    ]


# --- the dashboard ------------------------------------------------------------------------------------
@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    variables: list[Json]
    time_from: str = "now-24h"
    refresh: str = "1m"
    panels: list[Json] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _line: int = 0

    def row(self, title: str) -> None:
        self._newline()
        self._place({"type": "row", "title": title, "collapsed": False, "panels": []}, WIDTH, 1)

    def add(self, panel: Json, w: int, h: int = 8) -> None:
        if self._x + w > WIDTH:
            self._newline()
        self._place(panel, w, h)

    def _newline(self) -> None:
        self._x, self._y, self._line = 0, self._y + self._line, 0

    def _place(self, panel: Json, w: int, h: int) -> None:
        pos = {"h": h, "w": w, "x": self._x, "y": self._y}
        self.panels.append({"id": len(self.panels) + 1, "gridPos": pos, **panel})
        self._x += w
        self._line = max(self._line, h)

    def to_json(self) -> Json:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": [TAG],
            "editable": True,
            "graphTooltip": 1,  # shared crosshair
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "time": {"from": self.time_from, "to": "now"},
            "timezone": "browser",
            "refresh": self.refresh,
            "fiscalYearStartMonth": 0,
            "liveNow": False,
            "annotations": {"list": []},
            "links": [LINKS],
            "templating": {"list": self.variables},
            "panels": self.panels,
        }
