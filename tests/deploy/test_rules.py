"""Prometheus config and rules: promtool accepts them, every alert is unit-tested both ways, every
alert is documented with a runbook, and every metric the rules read exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.metrics import families
from exporter.scrape.table import METRICS
from tests.support.paths import REPO
from tests.support.tools import promtool as run_promtool

PROM = REPO / "deploy" / "prometheus"
RULE_FILES = sorted((PROM / "rules").glob("*.yml"))
TEST_FILES = sorted((PROM / "tests").glob("*.yml"))
ALERTS_DOC = REPO / "docs" / "alerts.md"


def promtool(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_promtool(list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict[str, Any]]:
    return [r for f in RULE_FILES for g in load(f)["groups"] for r in g["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def test_there_are_rule_and_test_files() -> None:
    assert [p.name for p in RULE_FILES] == [
        "gpuledger-alerts.yml",
        "gpuledger-recording.yml",
        "gpuledger-rollups-1h.yml",
        "gpuledger-rollups.yml",
    ]
    assert TEST_FILES


@pytest.mark.integration
def test_promtool_checks_the_config() -> None:
    res = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(RULE_FILES)} rule files found" in res.stdout, res.stdout


@pytest.mark.integration
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_the_rules(path: Path) -> None:
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.integration
@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout, res.stdout


def test_every_alert_has_a_firing_and_a_silent_test_case() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in TEST_FILES:
        for case in load(path)["tests"]:
            for t in case.get("alert_rule_test") or []:
                (firing if t.get("exp_alerts") else silent).add(t["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"
    assert (firing | silent) - names == set(), "tests of alerts that do not exist"


def test_firing_cases_assert_labels_and_annotations_in_full() -> None:
    for path in TEST_FILES:
        for case in load(path)["tests"]:
            for t in case.get("alert_rule_test") or []:
                for exp in t.get("exp_alerts") or []:
                    assert {"severity", "component"} <= set(exp["exp_labels"]), (path.name, t)
                    assert set(exp["exp_annotations"]) == {"summary", "description", "runbook_url"}, (path.name, t)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def test_every_alert_is_documented_with_a_runbook() -> None:
    known = anchors(ALERTS_DOC.read_text())
    for a in alerts():
        ann, labels = a.get("annotations", {}), a.get("labels", {})
        assert {"summary", "description", "runbook_url"} <= set(ann), a["alert"]
        assert labels.get("severity") in ("critical", "warning", "info"), a["alert"]
        assert labels.get("component"), a["alert"]
        url = ann["runbook_url"]
        assert url.startswith("docs/alerts.md#"), url
        assert url.split("#", 1)[1] in known, f"{a['alert']}: no heading for {url} in docs/alerts.md"


def test_every_recording_group_is_documented() -> None:
    doc = ALERTS_DOC.read_text()
    for path in RULE_FILES:
        for g in load(path)["groups"]:
            assert f"`{g['name']}`" in doc, f"group {g['name']} not described in docs/alerts.md"


def metric_names(expr: str) -> set[str]:
    """Metric (and recorded series) names in a PromQL expression: label values removed first."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)  # matchers
    return set(re.findall(r"(?<![\w:])(gpuledger[\w:]*|up)(?![\w:])", bare))


def test_metric_names_in_rules_exist() -> None:
    exported = {m.name for m in METRICS} | {f.name for f in families()}
    for m in METRICS:
        if m.kind == "histogram":
            exported |= {f"{m.name}_bucket", f"{m.name}_count", f"{m.name}_sum"}
    recorded = {r["record"] for r in rules() if "record" in r}
    used = set().union(*(metric_names(r["expr"]) for r in rules()))
    assert {"gpuledger_gpu_busy_seconds_total", "gpuledger_price_gpu_hour", "up"} <= used  # the parser sees them
    unknown = used - exported - recorded - {"up"}
    assert unknown == set(), f"rules read metrics nobody exports: {sorted(unknown)}"


def test_metric_name_parser() -> None:
    expr = 'rate(gpuledger_x_total{job="gpuledger-analytics", a=~"gpuledger_y"}[5m]) / on (gpu) gpuledger:z:rate1h'
    assert metric_names(expr) == {"gpuledger_x_total", "gpuledger:z:rate1h"}


def test_every_rollup_has_an_hourly_rollup_of_its_buckets() -> None:
    """The hourly file sums each 5-minute rollup, and only those: a counter added to one and not
    the other would be read from the 5-minute buckets in one report and be missing in the next.
    The jobs' records (a gauge's last value, not a counter's growth) have no hourly sum."""
    groups5 = load(PROM / "rules" / "gpuledger-rollups.yml")["groups"]
    five = {r["record"] for g in groups5 if g["name"] != "gpuledger-rollup-records" for r in g["rules"]}
    records = {r["record"] for g in groups5 if g["name"] == "gpuledger-rollup-records" for r in g["rules"]}
    assert records == {"gpuledger:slurm_job_info:last_over_time5m", "gpuledger:job_info:last_over_time5m"}
    hourly = {
        r["record"]: r["expr"] for g in load(PROM / "rules" / "gpuledger-rollups-1h.yml")["groups"] for r in g["rules"]
    }
    assert five and all(name.endswith(":increase5m") for name in five)
    assert {name.removesuffix("5m") + "1h" for name in five} == set(hourly)
    for name, expr in hourly.items():
        assert expr == f"sum_over_time({name.removesuffix('1h')}5m[3599999ms] offset 5m)", name
    groups = {g["name"]: g["interval"] for g in load(PROM / "rules" / "gpuledger-rollups-1h.yml")["groups"]}
    assert groups == {"gpuledger-rollup-gpu-1h": "1h", "gpuledger-rollup-job-1h": "1h"}
