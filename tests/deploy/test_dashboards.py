"""The Grafana dashboards: the checked-in JSON is what grafana/generate.py writes, the layout and
variables are sound, the provisioning points at them, the docs describe every panel, and every
panel and variable query runs for real against a Prometheus that scraped a replay exporter and the
analytics daemon and holds a backfilled synthetic day (jobs, queue, benchmarks, health events)."""

from __future__ import annotations

import re
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.metrics import families
from analytics.report.build import GROUPINGS
from domain.week import last_full_week
from exporter.scrape.table import METRICS
from tests.support.clock import clock_now
from tests.support.dashboard_data import backfill_day, history_fleet, missing_states
from tests.support.dashboard_stack import (
    Stack,
    analytics_config,
    dashboard_runs,
    live_stack,
    panels,
    run,
    variable_values,
)
from tests.support.grafana_repeat import shown
from tests.support.grafana_vars import RANGE_S, builtins, regex_value, seconds, substitute
from tests.support.paths import REPO

if str(REPO) not in sys.path:  # grafana/ is no installed package
    sys.path.insert(0, str(REPO))

from grafana import docs, generate
from grafana.model import DATASOURCE_UID

Json = dict[str, Any]
DASHBOARDS: dict[str, Json] = {d.uid: d.to_json() for d in generate.dashboards()}
PROVISIONING = REPO / "grafana" / "provisioning"
DATASOURCE = yaml.safe_load((PROVISIONING / "datasources" / "gpuledger.yml").read_text())["datasources"][0]

# the dashboards and the panels each must have (by title)
REQUIRED: dict[str, tuple[str, ...]] = {
    "gpuledger-fleet": (
        "Utilisation",
        "SM activity",
        "Utilisation per GPU",
        "SM activity per GPU",
        "Power",
        "Energy",
        "Idle GPUs",
        "Allocated but idle",
        "Cost per hour now (${currency})",
        "Idle cost per hour now (${currency})",
    ),
    "gpuledger-gpu": (
        "GPU up",
        "XID errors",
        "ECC errors",
        "Clock-event (throttle) reasons",
        "Compute processes",
        "Jobs on the GPU now",
        "Per-job held, charged, busy, stalled and energy",
    ),
    "gpuledger-weekly": (
        "Cost per useful GPU-hour (${currency})",
        "Idle cost (${currency})",
        "Week-over-week change",
        "Utilisation",
    ),
    "gpuledger-bench": (
        "Bandwidth by message size (latest sweep)",
        "Bus bandwidth over time",
        "Speedup against the ideal",
        "Scaling efficiency by world size",
        "Failed or timed-out runs",
        "Skipped: GPUs busy",
    ),
    "gpuledger-queue": (
        "Pending jobs",
        "Pending GPUs",
        "Wait p50 and p95",
        "Failed share",
        "Jobs ended by state",
        "Top users holding idle GPUs",
    ),
}
NUMERIC = {"timeseries", "stat", "gauge", "bargauge", "barchart"}


def exprs(d: Json) -> Iterator[str]:
    for p in panels(d):
        for t in p["targets"]:
            yield t["expr"]


# --- generated files -------------------------------------------------------------------------------
def test_checked_in_json_is_what_the_generator_writes() -> None:
    rendered = generate.render()
    on_disk = {p.name: p.read_text() for p in (REPO / "grafana" / "dashboards").glob("*.json")}
    assert on_disk.keys() == rendered.keys(), "run: python grafana/generate.py"
    stale = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not stale, f"stale dashboards {stale}: run python grafana/generate.py"


def test_docs_are_generated_and_name_every_panel() -> None:
    text = (REPO / "docs" / "dashboards.md").read_text()
    assert text == docs.render(generate.dashboards()), "docs/dashboards.md is stale: run python grafana/generate.py"
    for d in DASHBOARDS.values():
        assert d["title"] in text
        for p in d["panels"]:
            assert p["title"] in text, p["title"]


# --- structure --------------------------------------------------------------------------------------
def test_every_required_dashboard_and_panel_exists() -> None:
    for uid, titles in REQUIRED.items():
        assert uid in DASHBOARDS, uid
        have = {p["title"] for p in panels(DASHBOARDS[uid])}
        assert not set(titles) - have, (uid, set(titles) - have)


def test_gpu_detail_shows_every_per_gpu_series() -> None:
    text = " ".join(exprs(DASHBOARDS["gpuledger-gpu"]))
    missing = [m.name for m in METRICS if m.per_gpu and not re.search(rf"\b{m.name}\b", text)]
    assert not missing, missing


def test_every_analytics_series_is_on_a_dashboard() -> None:
    text = " ".join(e for d in DASHBOARDS.values() for e in exprs(d))
    missing = [f.name for f in families() if not re.search(rf"\b{f.name}\b", text)]
    assert not missing, missing


def test_ids_and_layout() -> None:
    titles = {d["title"] for d in DASHBOARDS.values()}
    assert len(DASHBOARDS) == len({d["uid"] for d in DASHBOARDS.values()}) == len(titles) == len(generate.MODULES)
    for uid, d in DASHBOARDS.items():
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), uid
        boxes: list[tuple[str, Json]] = []
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, (uid, p)
            for other, o in boxes:
                apart = g["x"] >= o["x"] + o["w"] or o["x"] >= g["x"] + g["w"] or g["y"] >= o["y"] + o["h"]
                overlap = not apart and o["y"] < g["y"] + g["h"]
                assert not overlap, (uid, p["title"], other)
            boxes.append((p["title"], g))


def test_panels_use_the_datasource_variable_units_and_thresholds() -> None:
    ds = {"type": "prometheus", "uid": "${datasource}"}
    for uid, d in DASHBOARDS.items():
        for p in panels(d):
            where = (uid, p["title"])
            assert p["type"] in NUMERIC | {"table", "heatmap", "state-timeline"}, where  # no graph/singlestat
            assert p["datasource"] == ds and all(t["datasource"] == ds for t in p["targets"]), where
            assert p["description"] and p["targets"], where
            defaults = p["fieldConfig"]["defaults"]
            if p["type"] in NUMERIC:
                assert defaults.get("unit") not in (None, ""), where
            if p["type"] == "heatmap":
                assert p["options"]["yAxis"]["unit"], where
            if p["type"] == "table":
                shown = [n for n in _included(p) if n.startswith("Value")]
                renamed = _renames(p)
                with_unit = {
                    o["matcher"]["options"]
                    for o in p["fieldConfig"]["overrides"]
                    if any(x["id"] == "unit" for x in o["properties"])
                }
                assert {renamed.get(n, n) for n in shown} <= with_unit, where
            steps = defaults.get("thresholds", {}).get("steps", [])
            if p["type"] != "heatmap":
                assert steps and steps[0]["value"] is None, where
                values = [s["value"] for s in steps[1:]]
                assert values == sorted(values), where
            if defaults.get("unit") == "percentunit" and p["type"] in ("stat", "gauge"):
                assert len(steps) > 1 or defaults.get("mappings"), ("a share without thresholds", where)


def _included(p: Json) -> list[str]:
    for t in p.get("transformations", []):
        if t["id"] == "filterFieldsByName":
            names: list[str] = t["options"]["include"]["names"]
            return names
    return []


def _renames(p: Json) -> dict[str, str]:
    for t in p.get("transformations", []):
        if t["id"] == "organize":
            names: dict[str, str] = t["options"]["renameByName"]
            return names
    return {}


def test_template_variables() -> None:
    for uid, d in DASHBOARDS.items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert {"datasource", "job", "hostname", "gpu"} <= variables.keys(), uid
        ds = variables["datasource"]
        assert ds["type"] == "datasource" and ds["query"] == "prometheus", uid
        assert ds["current"]["value"] == DATASOURCE["uid"] == DATASOURCE_UID, uid
        for v in variables.values():
            if v["type"] == "query":
                assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (uid, v["name"])
                assert re.fullmatch(r"label_values\(.+, \w+\)", v["query"]), (uid, v["name"])
        used = " ".join(exprs(d)) + " ".join(v.get("query", "") for v in variables.values() if v["type"] == "query")
        for name in variables.keys() - {"datasource", "currency"}:  # currency: for titles only
            assert f"${name}" in used, (uid, name, "variable not used by any query")


# --- budgets: a row of panels per grouping with a budget ------------------------------------------
BUDGET_SERIES = re.compile(r"\bgpuledger_budget_(?:spent|limit|forecast)\b(\{[^}]*\})?")


def _budget_panels(groupings: list[str]) -> dict[str, list[Json]]:
    """The weekly dashboard's budget panels as Grafana shows them with these groupings in the
    ``group`` variable, by the grouping of their repeated row ("" for a panel not repeated)."""
    out: dict[str, list[Json]] = {}
    for s in shown(DASHBOARDS["gpuledger-weekly"], {"group": groupings}):
        if any("gpuledger_budget_" in t["expr"] for t in s.panel["targets"]):
            out.setdefault(s.scoped.get("group", ""), []).append(s.panel)
    return out


def test_every_grouping_with_a_budget_gets_its_own_panels() -> None:
    variables = {v["name"]: v for v in DASHBOARDS["gpuledger-weekly"]["templating"]["list"]}
    group = variables["group"]  # the groupings the daemon exports a limit for: every [budgets] rule's
    assert group["query"] == "label_values(gpuledger_budget_limit, group)" and group["includeAll"], group
    groupings = [*GROUPINGS, "label:label_team"]
    by_group = _budget_panels(groupings)
    assert set(by_group) == set(groupings), "every budget panel is in the row repeated by $group"
    for g, ps in by_group.items():
        assert sorted(p["type"] for p in ps) == ["bargauge", "table"], g
        for p in ps:
            for t in p["targets"]:
                expr = substitute(t["expr"], {"group": regex_value([g], None, False)})
                selectors = BUDGET_SERIES.findall(expr)  # each series: the row's grouping, or matched to one
                assert f'{{group=~"{g}"}}' in selectors and set(selectors) <= {f'{{group=~"{g}"}}', ""}, (g, expr)


@pytest.mark.integration
def test_every_grouping_with_a_budget_has_its_own_panel_with_its_data(live: Stack, tmp_path: Path) -> None:
    """The stack's [budgets] groupings: each is a value of $group, and its row's queries return its
    budgets and only those."""
    rules = tomllib.loads(analytics_config(tmp_path, 0).read_text())["budgets"]["rules"]
    budgeted = {r["group"] for r in rules}
    assert len(budgeted) >= 2, "the stack needs budgets in two groupings"
    d = DASHBOARDS["gpuledger-weekly"]
    values, bad = variable_values(live.prom, d, {"window": "week"}, live.end)
    assert not bad, bad
    var = next(v for v in d["templating"]["list"] if v["name"] == "group")
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
    assert m, var["query"]
    selector, label = m.groups()
    span = {"match[]": selector, "start": f"{live.end - RANGE_S:.0f}", "end": f"{live.end:.0f}"}
    groups = live.prom.api(f"label/{label}/values", span)["data"]
    assert budgeted <= set(groups), groups
    by_group = _budget_panels(groups)
    for g in budgeted:
        assert len(by_group.get(g, [])) == 2, (g, "no panels of its own")
        for p in by_group[g]:
            b = builtins(p)
            for t in p["targets"]:
                expr = substitute(t["expr"], {**values, **b, "group": regex_value([g], None, False)})
                if t["instant"]:
                    answer = live.prom.api("query", {"query": expr, "time": f"{live.end:.3f}"})
                else:
                    step = f"{seconds(b['__interval']):.0f}"
                    span = {"start": f"{live.end - RANGE_S:.3f}", "end": f"{live.end:.3f}", "step": step}
                    answer = live.prom.api("query_range", {"query": expr, **span})
                got = {r["metric"].get("group") for r in answer["data"]["result"]}
                assert got == {g}, (g, p["title"], expr, got)


# --- provisioning -----------------------------------------------------------------------------------
def test_provisioning() -> None:
    assert DATASOURCE["type"] == "prometheus" and DATASOURCE["uid"] == DATASOURCE_UID
    assert DATASOURCE["access"] == "proxy" and DATASOURCE["url"].startswith("http")
    assert DATASOURCE["jsonData"]["timeInterval"] == "15s"
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "gpuledger.yml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["folder"] == "gpuledger"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/gpuledger"


# --- every query, for real --------------------------------------------------------------------------
@pytest.mark.integration
def test_every_query_returns_data(live: Stack) -> None:
    started = time.monotonic()
    failures: list[str] = []
    count = 0
    for d in DASHBOARDS.values():
        custom = [v for v in d["templating"]["list"] if v["type"] == "custom"]
        variants = [{}] if not custom else [{custom[0]["name"]: o["value"]} for o in custom[0]["options"]]
        for fixed in variants:
            values, bad = variable_values(live.prom, d, fixed, live.end)
            failures += bad
            count += sum(1 for v in d["templating"]["list"] if v["type"] == "query")
            label = d["uid"] + "".join(f" [{k}={v}]" for k, v in fixed.items())
            for r in dashboard_runs(d, values, label):
                count += 1
                why = run(live.prom, r, live.end)
                if why:
                    failures.append(f"{r.where}: {why}\n    {r.expr}")
    print(f"{count} queries run in {time.monotonic() - started:.1f} s, {len(failures)} failed")
    assert not failures, "\n".join(failures)


def test_the_synthetic_data_holds_every_state_at_any_hour() -> None:
    """Built at a fixed anchor and shifted: the same jobs and rounds whatever "now" is."""
    now = clock_now() // 60 * 60
    assert not missing_states(backfill_day(now), now)
    history = history_fleet(now)
    assert history.window.start <= last_full_week(now).start - 7 * 86400 and history.window.end == now


# --- the stack (tests/support/dashboard_stack.py), once for the module ------------------------------
@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with live_stack(tmp_path_factory.mktemp("dashboards")) as stack:
        yield stack


@pytest.mark.integration
def test_skipped_rounds_count_rounds_not_benchmarks(live: Stack) -> None:
    """ "Skipped: GPUs busy" counts a skipped round once, whatever benchmarks it planned (it counted
    each of the four, so amber at 7 came after two skipped days, not a week)."""
    d = DASHBOARDS["gpuledger-bench"]
    values, bad = variable_values(live.prom, d, {}, live.end)
    assert not bad, bad
    (r,) = [x for x in dashboard_runs(d, values, "bench") if x.where.startswith("bench / Skipped: GPUs busy /")]
    at = {"time": f"{live.end:.3f}"}
    panel = live.prom.api("query", {"query": r.expr, **at})["data"]["result"]
    one_bench = f'increase(gpuledger_bench_runs_total{{bench="allreduce", result="skipped_busy"}}[{RANGE_S:.0f}s])'
    rounds = live.prom.api("query", {"query": f"max (max by (instance) ({one_bench}))", **at})["data"]["result"]
    every = live.prom.api("query", {"query": one_bench.replace('bench="allreduce", ', ""), **at})["data"]["result"]
    assert len(panel) == 1 and float(panel[0]["value"][1]) > 0
    assert float(panel[0]["value"][1]) == pytest.approx(float(rounds[0]["value"][1]))
    assert len({s["metric"]["bench"] for s in every}) == 4  # four benchmarks per round, counted once
