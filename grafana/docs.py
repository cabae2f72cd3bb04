"""``docs/dashboards.md``, rendered from the dashboard modules (titles, descriptions, units,
thresholds), so the docs cannot drift from the dashboards. ``python grafana/generate.py`` writes it;
tests/deploy/test_dashboards.py fails when it is stale."""

from __future__ import annotations

from grafana.layout import Dashboard
from grafana.model import Json

UNITS = {
    "percentunit": "share (shown as %)",
    "watt": "W",
    "kwatth": "kWh",
    "Bps": "bytes/s",
    "s": "seconds",
    "h": "hours",
    "none": "count",
    "short": "money (the report's currency)",
    "celsius": "°C",
    "hertz": "Hz",
    "bytes": "bytes",
    "cps": "per second",
    "cpm": "per minute",
    "flops": "FLOP/s",
    "masskg": "kg",
    "suffix:×": "× (ratio)",
    "suffix: samples/s": "samples/s",
}
KINDS = {
    "timeseries": "time series",
    "stat": "stat",
    "gauge": "gauge",
    "bargauge": "bar gauge",
    "table": "table",
    "heatmap": "heatmap",
    "state-timeline": "state timeline",
    "barchart": "bar chart",
}

INTRO = """# Dashboards

Five Grafana dashboards ship in `grafana/dashboards/` (JSON, checked in). They are built as code by
`grafana/*.py` (one module per dashboard, no third-party dependency) and written by
`python grafana/generate.py`, which also writes this page from the panels' titles, descriptions,
units and thresholds; `tests/deploy/test_dashboards.py` fails when either is stale, and runs every panel's
query (and every variable's) against a real Prometheus that scraped a replay exporter and the
analytics daemon and holds a backfilled synthetic day: a query that errors or returns nothing fails
the build.

## Loading them

**Provisioning** (the compose stack does this): mount `grafana/provisioning` at
`/etc/grafana/provisioning` and `grafana/dashboards` at `/var/lib/grafana/dashboards/gpuledger`.
`provisioning/datasources/gpuledger.yml` adds a Prometheus data source with the fixed uid
`gpuledger-prometheus` (the dashboards' default; edit its `url`, and `timeInterval` if you scrape at
another interval than 15 s); `provisioning/dashboards/gpuledger.yml` is a file provider that loads
the dashboards into the folder *gpuledger*.

**Import by hand**: Dashboards → New → Import → upload a JSON file from `grafana/dashboards/`, then
pick your Prometheus in the *Data source* variable (any Prometheus-compatible source: Thanos, Mimir,
VictoriaMetrics). No `__inputs` to fill in.

**Kubernetes**: `deploy/kubernetes/dashboards/` holds one ConfigMap per dashboard, labelled
`grafana_dashboard: "1"` and annotated `grafana_folder: gpuledger`, for the Grafana sidecar (as in the
kube-prometheus-stack chart: `sidecar.dashboards.enabled=true`, `folderAnnotation: grafana_folder`).
Without a sidecar, create the ConfigMaps and mount them at the provider's path.

The dashboards link to each other (the *gpuledger* drop-down, keeping the time range and variables),
and GPU UUIDs in the fleet tables link to *GPU detail*.

## Variables

Every dashboard has the same four at the top, chained on `gpuledger_gpu_info`:

| variable | query | what it selects |
|---|---|---|
| `datasource` | Prometheus data sources | default `gpuledger-prometheus` |
| `job` (cluster/job) | `label_values(gpuledger_gpu_info, job)` | the exporters' Prometheus job (per cluster) |
| `hostname` | `label_values(gpuledger_gpu_info{job=~"$job"}, hostname)` | the exporters' `hostname` label |
| `gpu` | `label_values(gpuledger_gpu_info{job=~"$job", hostname=~"$hostname"}, uuid)` | GPUs by UUID |

Per-GPU series carry only `instance`, `job`, `gpu` and `uuid`, so each per-GPU query joins the identity:
`(...) * on (instance, gpu, uuid) group_left (hostname, model) max by (instance, gpu, uuid, hostname, model)
(gpuledger_gpu_info{job=~"$job", hostname=~"$hostname", uuid=~"$gpu"})`. That join is how `$hostname`
filters and where legends get host and model. Per-node series (benchmarks, exporter health) join on
`instance` the same way. Dashboard-specific variables are listed under each dashboard.

Utilisation-like figures are exact ratios of counters over the same window,
`rate(gpuledger_gpu_busy_seconds_total[w]) / rate(gpuledger_gpu_sampled_seconds_total[w])`, never
averages of the aliased utilisation gauge; pooled over several GPUs they sum both rates first, so each
GPU weighs by the time it was sampled. Stat and bar panels that say "over the time range" use
`$__range` (instant queries); time series use `$__rate_interval`.

Thresholds used throughout: utilisation and SM activity red under 30 %, amber under 60 %, green above
(a GPU under 30 % costs more than three times its price per useful hour); multi-GPU scaling
efficiency red under 60 %, amber under 80 %, green above (60–80 % of linear is the usual price of
spreading a job, docs/cost-model.md); counts of errors and failures red from 1, amber from 1 for
what a GPU or a queue can live with for a while (ECC errors, remapped rows, requeues).
"""


def _number(value: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{value * 100:g} %"
    if unit == "s" and value >= 3600:
        return f"{value / 3600:g} h"
    return f"{value:g}"


def _thresholds(p: Json) -> str:
    if p["type"] == "table":  # per column, in the overrides
        cols = []
        for o in p["fieldConfig"]["overrides"]:
            props = {x["id"]: x["value"] for x in o["properties"]}
            if "thresholds" in props:
                rule = _steps(props["thresholds"]["steps"], props.get("unit", ""))
                cols.append(f"{o['matcher']['options']}: {rule}")
        return "; ".join(cols) or "—"
    defaults = p["fieldConfig"]["defaults"]
    mappings = defaults.get("mappings") or []
    if mappings:
        opts = mappings[0]["options"]
        return ", ".join(f"{k} → {v['text']} ({v['color']})" for k, v in opts.items())
    return _steps(defaults.get("thresholds", {}).get("steps", []), defaults.get("unit", ""))


def _steps(steps: list[Json], unit: str) -> str:
    if len(steps) < 2:
        return "—"
    parts = [f"{steps[0]['color']} below {_number(steps[1]['value'], unit)}"]
    parts += [f"{s['color']} from {_number(s['value'], unit)}" for s in steps[1:]]
    return ", ".join(parts)


def _unit(p: Json) -> str:
    if p["type"] == "table":
        units = [x["value"] for o in p["fieldConfig"]["overrides"] for x in o["properties"] if x["id"] == "unit"]
        return ", ".join(dict.fromkeys(UNITS.get(u, u) for u in units)) or "labels"
    if p["type"] == "heatmap":
        return "jobs per bucket, y: " + UNITS.get(p["options"]["yAxis"]["unit"], "")
    unit: str = p["fieldConfig"]["defaults"].get("unit", "")
    return UNITS.get(unit, unit)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _dashboard(d: Dashboard) -> list[str]:
    j = d.to_json()
    out = [
        f"## {d.title}",
        "",
        f"`grafana/dashboards/{d.uid}.json`, uid `{d.uid}`, default range "
        f"{d.time_from} to now, refresh {d.refresh}. {d.description}",
        "",
    ]
    extra = [v for v in j["templating"]["list"] if v["name"] not in ("datasource", "job", "hostname", "gpu")]
    if extra:
        out += ["More variables:", ""]
        out += [f"- `{v['name']}` ({v.get('query', '')}): {v.get('description', '')}" for v in extra]
        out.append("")
    gpu = next(v for v in j["templating"]["list"] if v["name"] == "gpu")
    if not gpu.get("includeAll"):
        out += ["`gpu` has no *All* here: pick one GPU (or a few, to compare).", ""]
    rows: list[str] = []
    for p in j["panels"]:
        if p["type"] == "row":
            out += rows
            out += [
                "",
                f"### {p['title']}",
                "",
                "| panel | kind | unit | thresholds | what it shows and how |",
                "|---|---|---|---|---|",
            ]
            rows = []
            continue
        rows.append(
            f"| **{_cell(p['title'])}** | {KINDS[p['type']]} | {_cell(_unit(p))} | {_cell(_thresholds(p))} "
            f"| {_cell(p['description'])} |"
        )
    out += rows
    out.append("")
    return out


def render(dashboards: list[Dashboard]) -> str:
    lines = [INTRO]
    for d in dashboards:
        lines += _dashboard(d)
    return "\n".join(lines).rstrip() + "\n"
