"""The panel kinds (time series, stat, gauge, bar gauge, state timeline, heatmap, tables, bar
chart), as dicts in Grafana's JSON model.

Each helper returns one panel with its queries bound to the ``$datasource`` variable, a unit, a
description and thresholds; ``grafana.layout`` places and numbers them. Only this module and
``grafana.model`` (queries, thresholds, mappings) know Grafana's field names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana.model import NEUTRAL, REFS, Json, Q, ds


def _panel(
    kind: str,
    title: str,
    description: str,
    queries: Sequence[Q],
    unit: str,
    defaults: Json,
    options: Json,
    overrides: list[Json] | None = None,
    transformations: list[Json] | None = None,
    interval: str = "",
) -> Json:
    p: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": ds(),
        "targets": [q.to_json(REFS[i]) for i, q in enumerate(queries)],
        "fieldConfig": {"defaults": {"unit": unit, **defaults}, "overrides": overrides or []},
        "options": options,
    }
    if transformations:
        p["transformations"] = transformations
    if interval:
        p["interval"] = interval  # the least $__interval: for rare events (job starts, runs)
    return p


def _limits(min_: float | None, max_: float | None, decimals: int | None) -> Json:
    out: Json = {}
    for key, value in (("min", min_), ("max", max_), ("decimals", decimals)):
        if value is not None:
            out[key] = value
    return out


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Q],
    unit: str,
    *,
    min_: float | None = 0,
    max_: float | None = None,
    decimals: int | None = None,
    thresholds: Json | None = None,
    stack: bool = False,
    bars: bool = False,
    interval: str = "",
) -> Json:
    custom = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 70 if bars else (30 if stack else 8),
        "gradientMode": "none",
        "lineInterpolation": "linear",
        "showPoints": "never",
        "spanNulls": False,
        "axisPlacement": "auto",
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "thresholdsStyle": {"mode": "dashed" if thresholds else "off"},
    }
    defaults = {"custom": custom, "color": {"mode": "palette-classic"}, "thresholds": thresholds or NEUTRAL}
    options = {
        "legend": {
            "showLegend": True,
            "displayMode": "table",
            "placement": "bottom",
            "calcs": ["mean", "max", "lastNotNull"],
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel(
        "timeseries",
        title,
        description,
        queries,
        unit,
        defaults | _limits(min_, max_, decimals),
        options,
        interval=interval,
    )


def _reduce(calc: str = "lastNotNull") -> Json:
    return {"calcs": [calc], "fields": "", "values": False}


def stat(
    title: str,
    description: str,
    queries: Sequence[Q],
    unit: str,
    *,
    thresholds: Json | None = None,
    mappings: list[Json] | None = None,
    decimals: int | None = None,
    no_value: str | None = None,
    background: bool = False,
    graph: bool = False,
    text_mode: str = "auto",
) -> Json:
    defaults: Json = {"color": {"mode": "thresholds"}, "thresholds": thresholds or NEUTRAL, "mappings": mappings or []}
    defaults |= _limits(None, None, decimals)
    if no_value is not None:
        defaults["noValue"] = no_value  # shown when nothing matched, e.g. no XID ever seen
    options = {
        "reduceOptions": _reduce(),
        "colorMode": "background" if background else "value",
        "graphMode": "area" if graph else "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": text_mode,
        "wideLayout": True,
        "showPercentChange": False,
    }
    return _panel("stat", title, description, queries, unit, defaults, options)


def gauge(
    title: str, description: str, queries: Sequence[Q], unit: str, *, thresholds: Json, min_: float = 0, max_: float = 1
) -> Json:
    defaults = {"color": {"mode": "thresholds"}, "thresholds": thresholds, "min": min_, "max": max_}
    options = {
        "reduceOptions": _reduce(),
        "orientation": "auto",
        "showThresholdLabels": False,
        "showThresholdMarkers": True,
        "sizing": "auto",
    }
    return _panel("gauge", title, description, queries, unit, defaults, options)


def bargauge(
    title: str,
    description: str,
    queries: Sequence[Q],
    unit: str,
    *,
    thresholds: Json | None = None,
    min_: float | None = 0,
    max_: float | None = None,
    decimals: int | None = None,
) -> Json:
    defaults = {"color": {"mode": "thresholds"}, "thresholds": thresholds or NEUTRAL} | _limits(min_, max_, decimals)
    options = {
        "reduceOptions": _reduce(),
        "orientation": "horizontal",
        "displayMode": "gradient",
        "valueMode": "color",
        "namePlacement": "auto",
        "showUnfilled": True,
        "sizing": "auto",
        "minVizHeight": 16,
        "minVizWidth": 8,
        "maxVizHeight": 300,
    }
    return _panel("bargauge", title, description, queries, unit, defaults, options)


def state_timeline(
    title: str, description: str, queries: Sequence[Q], *, mappings: list[Json], thresholds: Json
) -> Json:
    defaults = {
        "custom": {"lineWidth": 0, "fillOpacity": 70},
        "color": {"mode": "thresholds"},
        "thresholds": thresholds,
        "mappings": mappings,
    }
    options = {
        "mergeValues": True,
        "showValue": "never",
        "alignValue": "left",
        "rowHeight": 0.8,
        "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return _panel("state-timeline", title, description, queries, "none", defaults, options)


def heatmap(title: str, description: str, query: Q, y_unit: str, *, interval: str = "") -> Json:
    """A Prometheus histogram as a heatmap: ``query`` is ``sum by (le) (increase(x_bucket[...]))``."""
    options = {
        "calculate": False,
        "cellGap": 1,
        "color": {
            "mode": "scheme",
            "scheme": "Oranges",
            "scale": "exponential",
            "exponent": 0.5,
            "steps": 64,
            "fill": "dark-orange",
            "reverse": False,
        },
        "yAxis": {"axisPlacement": "left", "unit": y_unit, "reverse": False},
        "rowsFrame": {"layout": "auto"},
        "cellValues": {"unit": "short"},
        "filterValues": {"le": 1e-9},
        "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
        "legend": {"show": True},
    }
    return _panel("heatmap", title, description, [query], "short", {}, options, interval=interval)


@dataclass(frozen=True)
class Col:
    """A value column of a table: one instant query, its header and unit (``gauge``: a bar in the cell)."""

    name: str
    expr: str
    unit: str
    gauge: bool = False
    thresholds: Json | None = None


def table(
    title: str,
    description: str,
    cols: Sequence[Col],
    labels: Sequence[str],
    *,
    rename: dict[str, str] | None = None,
    numeric: dict[str, str] | None = None,
    sort: str = "",
    desc: bool = True,
    links: dict[str, Json] | None = None,
) -> Json:
    """Instant queries merged on their labels: one row per label set, the ``labels`` first (renamed
    by ``rename``; ``numeric`` labels become numbers with a unit and sort numerically), then a
    column per query. ``links``: a data link per (original) label column."""
    rename = rename or {}
    numeric = numeric or {}
    values = ["Value"] if len(cols) == 1 else [f"Value #{REFS[i]}" for i in range(len(cols))]
    names = {**{lab: rename.get(lab, lab) for lab in labels}, **{v: c.name for v, c in zip(values, cols, strict=True)}}
    transformations: list[Json] = [{"id": "merge", "options": {}}] if len(cols) > 1 else []
    transformations.append({"id": "filterFieldsByName", "options": {"include": {"names": [*labels, *values]}}})
    if numeric:
        conversions = [{"targetField": lab, "destinationType": "number"} for lab in numeric]
        transformations.append({"id": "convertFieldType", "options": {"conversions": conversions, "fields": {}}})
    transformations.append(
        {
            "id": "organize",
            "options": {"excludeByName": {}, "indexByName": {k: i for i, k in enumerate(names)}, "renameByName": names},
        }
    )
    overrides = []
    for c in cols:
        props: list[Json] = [{"id": "unit", "value": c.unit}]
        if c.gauge:
            props.append(
                {"id": "custom.cellOptions", "value": {"type": "gauge", "mode": "basic", "valueDisplayMode": "text"}}
            )
            if c.unit == "percentunit":
                props += [{"id": "min", "value": 0}, {"id": "max", "value": 1}]
        if c.thresholds:
            props += [{"id": "thresholds", "value": c.thresholds}, {"id": "color", "value": {"mode": "thresholds"}}]
            if not c.gauge:
                props.append({"id": "custom.cellOptions", "value": {"type": "color-text"}})
        overrides.append({"matcher": {"id": "byName", "options": c.name}, "properties": props})
    for lab, unit in numeric.items():
        overrides.append(
            {"matcher": {"id": "byName", "options": names[lab]}, "properties": [{"id": "unit", "value": unit}]}
        )
    for lab, link in (links or {}).items():
        overrides.append(
            {"matcher": {"id": "byName", "options": names[lab]}, "properties": [{"id": "links", "value": [link]}]}
        )
    sort_by = [{"displayName": sort or (names[next(iter(numeric))] if numeric else cols[0].name), "desc": desc}]
    options = {
        "showHeader": True,
        "cellHeight": "sm",
        "sortBy": sort_by,
        "footer": {"show": False, "reducer": ["sum"], "fields": "", "countRows": False},
    }
    defaults = {"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}, "thresholds": NEUTRAL}
    queries = [Q(c.expr, instant=True, fmt="table") for c in cols]
    return _panel("table", title, description, queries, "none", defaults, options, overrides, transformations)


def info_table(
    title: str, description: str, expr: str, labels: Sequence[str], rename: dict[str, str] | None = None
) -> Json:
    """The label sets of an info-style series (value always 1, not shown)."""
    names = {lab: (rename or {}).get(lab, lab) for lab in labels}
    transformations = [
        {"id": "filterFieldsByName", "options": {"include": {"names": list(labels)}}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {},
                "indexByName": {k: i for i, k in enumerate(labels)},
                "renameByName": names,
            },
        },
    ]
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
    defaults = {"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}, "thresholds": NEUTRAL}
    return _panel(
        "table",
        title,
        description,
        [Q(expr, instant=True, fmt="table")],
        "none",
        defaults,
        options,
        transformations=transformations,
    )


def barchart(title: str, description: str, x: str, x_name: str, series: dict[str, str], unit: str) -> Json:
    """Bars per value of the label ``x`` (sorted numerically, shown as ``x_name``), one bar per
    entry of ``series`` (display name -> instant query aggregated ``by (x)``)."""
    values = [f"Value #{REFS[i]}" for i in range(len(series))]
    names = {x: x_name, **dict(zip(values, series, strict=True))}
    transformations = [
        {"id": "merge", "options": {}},
        {"id": "filterFieldsByName", "options": {"include": {"names": [x, *values]}}},
        {
            "id": "convertFieldType",
            "options": {"conversions": [{"targetField": x, "destinationType": "number"}], "fields": {}},
        },
        {"id": "sortBy", "options": {"sort": [{"field": x, "desc": False}]}},
        {
            "id": "convertFieldType",
            "options": {"conversions": [{"targetField": x, "destinationType": "string"}], "fields": {}},
        },
        {
            "id": "organize",
            "options": {"excludeByName": {}, "indexByName": {k: i for i, k in enumerate(names)}, "renameByName": names},
        },
    ]
    options = {
        "xField": x_name,
        "orientation": "vertical",
        "barWidth": 0.85,
        "groupWidth": 0.7,
        "showValue": "auto",
        "stacking": "none",
        "xTickLabelRotation": 0,
        "xTickLabelSpacing": 0,
        "fullHighlight": False,
        "barRadius": 0,
        "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
        "tooltip": {"mode": "multi", "sort": "none"},
    }
    defaults = {
        "custom": {"fillOpacity": 80, "gradientMode": "none", "lineWidth": 1, "axisSoftMin": 0},
        "color": {"mode": "palette-classic"},
        "thresholds": NEUTRAL,
    }
    queries = [Q(expr, instant=True, fmt="table") for expr in series.values()]
    return _panel("barchart", title, description, queries, unit, defaults, options, transformations=transformations)
