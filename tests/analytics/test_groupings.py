"""Groupings: accounts, partitions, QOS, namespaces, pod labels (job groupings) and clusters (a GPU
grouping) in the report. Each job grouping + unallocated = the fleet and the clusters = the fleet,
in every cost column; a job without the attribute is under ``(none)``; a grouping nobody has shows
no rows; each grouping with rows gets one section and one chart in the HTML (and in Chromium) and
its rows in costs.csv; /metrics exports each grouping's top N keys and one ``(other)`` row, which
add up. A hypothesis property over random attributes."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric

from analytics.config import FullSettings
from analytics.cost import CostModel
from analytics.metrics import OTHER, ReportCollector, bounded
from analytics.pipeline import make_report
from analytics.report.build import GROUP_BY, NONE, build
from analytics.report.csvio import to_csv
from analytics.report.html import to_html
from analytics.report.markdown import to_markdown
from analytics.report.model import UNALLOCATED, Report
from domain.week import GpuWeek, JobWeek, WeekData, Window
from tests.support.browser import show
from tests.support.conservation import COST_COLUMNS, assert_conserves, total
from tests.support.groupings import AFTER, ALL, TEAM, WEEK, grouped_week, team_labels
from tests.support.report_pages import page_sections
from tests.support.sources import StubSource
from tests.support.weeks import gpu_week, job_week

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

JOB_GROUPINGS = ("user", "namespace", "account", "partition", "qos", TEAM)


def _report(data: WeekData | None = None, group_by: tuple[str, ...] = ALL) -> Report:
    return build(data or grouped_week(), CostModel(), now=AFTER, group_by=group_by)


def _keys(r: Report, group: str) -> list[str]:
    return [x.key for x in r.group(group)]


def _cost(r: Report, group: str, key: str) -> float:
    (row,) = [x for x in r.group(group) if x.key == key]
    return row.total_cost


def _job_cost(r: Report, *keys: str) -> float:
    return sum(_cost(r, "job", k) for k in keys)


def test_every_job_grouping_and_unallocated_is_the_fleet() -> None:
    r = _report()
    assert_conserves(r, groups=(*JOB_GROUPINGS, "job"))
    (rest,) = r.group(UNALLOCATED)
    assert rest.total_cost > 0  # GPU-4, and what the jobs did not hold


def test_clusters_are_the_fleet_and_a_gpu_without_one_is_none() -> None:
    r = _report()
    assert _keys(r, "cluster") == ["east", "west", NONE]
    assert [x.gpus for x in r.group("cluster")] == [3, 2, 1]
    for column in (*COST_COLUMNS, "available_gpu_hours", "busy_gpu_hours", "useful_gpu_hours"):
        assert total(r.group("cluster"), column) == pytest.approx(getattr(r.fleet, column)), column
    west = sum(x.total_cost for x in r.group("host") if x.key == "n2")
    assert _cost(r, "cluster", "west") == pytest.approx(west)


def test_the_jobs_without_an_attribute_are_under_none_last() -> None:
    r = _report()
    assert _keys(r, "account") == ["chem", "physics", NONE]
    assert _keys(r, "partition") == ["debug", "gpu", NONE]
    assert _keys(r, "qos") == ["high", "normal", NONE]
    assert _keys(r, "namespace") == ["ml", "web", NONE]
    assert _keys(r, TEAM) == ["nlp", "vision", NONE]
    # over two clusters a job row is cluster:job (the GPU without a cluster keeps plain ids), and
    # the same namespace/pod in two clusters is two pods
    pods = ("east:ml/train-1", "east:ml/train-2", "west:ml/train-2", "west:web/serve-1")
    assert _keys(r, "job") == ["103", "104", "east:101", "east:102", *sorted(pods)]
    assert _cost(r, "account", NONE) == pytest.approx(_job_cost(r, "103", *pods))
    assert _cost(r, "account", "physics") == pytest.approx(_job_cost(r, "east:101", "104"))
    assert _cost(r, "namespace", NONE) == pytest.approx(_job_cost(r, "east:101", "east:102", "103", "104"))
    assert _cost(r, TEAM, "nlp") == pytest.approx(_job_cost(r, "east:ml/train-2", "west:ml/train-2"))
    none_team = ("east:101", "east:102", "103", "104", "west:web/serve-1")
    assert _cost(r, TEAM, NONE) == pytest.approx(_job_cost(r, *none_team))
    (nlp,) = [x for x in r.group(TEAM) if x.key == "nlp"]
    assert nlp.gpus == 2  # its pods on two GPUs


def test_a_grouping_nobody_has_shows_no_rows_nor_section() -> None:
    data = grouped_week()
    plain = tuple(
        JobWeek(j.uuid, j.host, j.job, j.sampled_s, j.busy_s, j.energy_j, charged_s=j.charged_s) for j in data.jobs
    )
    no_cluster = tuple(GpuWeek(**{**g.__dict__, "cluster": ""}) for g in data.gpus)
    r = _report(WeekData(WEEK, "t", no_cluster, plain))
    for group in ("account", "partition", "qos", TEAM, "cluster"):
        assert r.group(group) == [], group
    assert {x.key for x in r.group("namespace")} == {"ml", "web", NONE}  # the pods still have theirs
    assert_conserves(r, groups=("user", "namespace", "job"))
    sections = page_sections(to_html(r))
    assert not {"accounts", "partitions", "qos", "label-label_team", "clusters"} & set(sections)


def test_group_by_chooses_the_groupings() -> None:
    r = _report(group_by=("user", "account"))
    assert {x.group for x in r.rows} == {"host", "model", "gpu", "user", "job", "account", UNALLOCATED}
    assert_conserves(r, groups=("user", "account", "job"))
    with pytest.raises(ValueError, match="unknown grouping 'acount'"):
        _report(group_by=("acount",))


def test_the_config_default_is_the_builders_and_a_label_must_be_read() -> None:
    assert tuple(FullSettings().analytics.group_by) == GROUP_BY
    s = FullSettings(analytics={"pod_labels": ["label_team"], "group_by": ["account", TEAM, "account"]})
    assert s.analytics.group_by == ["account", TEAM]
    with pytest.raises(ValueError, match="add 'label_team' to \\[analytics\\] pod_labels"):
        FullSettings(analytics={"group_by": [TEAM]})
    with pytest.raises(ValueError, match="unknown grouping 'team'"):
        FullSettings(analytics={"group_by": ["team"]})
    with pytest.raises(ValueError, match="group_top_n"):
        FullSettings(analytics={"group_top_n": 0})


class _Source(StubSource):
    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        return grouped_week() if window == WEEK else WeekData(window, "t", ())


def test_the_pipeline_passes_the_configured_groupings() -> None:
    s = FullSettings(analytics={"group_by": ["qos", "cluster"]})
    r = make_report(_Source(), WEEK, s, now=AFTER)
    assert {x.group for x in r.rows} - {"host", "model", "gpu", "job", UNALLOCATED} == {"qos", "cluster"}


# ---------------------------------------------------------------- HTML, Markdown, CSV


SLUGS = {
    "user": "users",
    "namespace": "namespaces",
    "account": "accounts",
    "partition": "partitions",
    "qos": "qos",
    "cluster": "clusters",
    TEAM: "label-label_team",
}


def test_html_has_one_section_and_one_chart_per_grouping() -> None:
    r = _report()
    sections = page_sections(to_html(r))
    for group, slug in SLUGS.items():
        charts, rows = sections[slug]
        assert len(charts) == 1 and charts[0].startswith("Total cost per"), (slug, charts)
        keys = [row[0] for row in rows]
        want = _keys(r, group) + ([] if group == "cluster" else ["(unallocated)"])
        assert keys == want, slug
    assert len(sections["hosts"][0]) == 3  # the per-host charts as they were


def test_markdown_has_a_section_per_grouping() -> None:
    md = to_markdown(_report())
    for heading in ("Accounts", "Partitions", "QOS", "Namespaces", "Pod label label\\_team"):
        assert f"## {heading} (and what no job was charged)" in md, heading
    assert "## Clusters\n" in md


def test_costs_csv_holds_every_grouping_and_adds_up() -> None:
    r = _report()
    rows = list(csv.DictReader(io.StringIO(to_csv(r)["costs.csv"], newline="")))
    by: dict[str, float] = defaultdict(float)
    for row in rows:
        by[row["group"]] += float(row["total_cost"])
    fleet_cost = r.fleet.total_cost
    for group in JOB_GROUPINGS:
        assert by[group] + by[UNALLOCATED] == pytest.approx(fleet_cost), group
    assert by["cluster"] == pytest.approx(fleet_cost)
    assert {row["key"] for row in rows if row["group"] == "account"} == {"chem", "physics", NONE}


@pytest.mark.integration
def test_chromium_shows_each_grouping_with_its_chart(browser: tuple[WebDriver, Path]) -> None:
    driver = show(browser, "groupings.html", to_html(_report()))
    from selenium.webdriver.common.by import By

    for slug in SLUGS.values():
        section = driver.find_element(By.ID, slug)
        assert section.is_displayed(), slug
        (chart,) = section.find_elements(By.CSS_SELECTOR, "svg")
        assert chart.size["width"] > 50 and chart.size["height"] > 50, slug
        assert len(chart.find_elements(By.CSS_SELECTOR, "rect")) >= 3, slug  # a bar per key at least
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    assert [e for e in logs if e.get("level") == "SEVERE"] == []


# ---------------------------------------------------------------- /metrics


def _many_accounts(n: int) -> WeekData:
    """``n`` GPUs, each held by one job of its own account (account i costs more with i)."""
    gpus = tuple(
        gpu_week(
            f"GPU-{i:03d}",
            "n1",
            gpu=str(i % 10),
            allocated_h=168.0,
            allocated_idle_h=0.0,
            energy_kwh=80.0,
            cluster="east",
        )
        for i in range(n)
    )
    jobs = tuple(
        job_week(
            uuid=g.uuid,
            job_id=str(i),
            user=f"u{i % 3}",
            held_h=10 + i,
            busy_h=0.6 * (10 + i),
            energy_kwh=(10 + i) * 0.3,
            account=f"acct{i:03d}",
        )
        for i, g in enumerate(gpus)
    )
    return WeekData(WEEK, "t", gpus, jobs)


def _samples(r: Report, top_n: int) -> Iterator[tuple[str, dict[str, str], float]]:
    metrics: list[Metric] = list(ReportCollector(lambda: {"week": r}, CostModel(), "UTC", top_n=top_n).collect())
    for m in metrics:
        for s in m.samples:
            yield s.name, s.labels, s.value


def test_metrics_export_the_top_n_and_one_other_row_that_add_up() -> None:
    r = _report(_many_accounts(30))
    costs = [(lab, v) for name, lab, v in _samples(r, 5) if name == "gpuledger_report_cost" and lab["kind"] == "total"]
    accounts = {lab["key"]: v for lab, v in costs if lab["group"] == "account"}
    top = sorted(r.group("account"), key=lambda x: -x.total_cost)[:5]
    assert set(accounts) == {x.key for x in top} | {OTHER}
    assert sum(accounts.values()) == pytest.approx(total(r.group("account"), "total_cost"))
    (rest,) = [v for lab, v in costs if lab["group"] == UNALLOCATED]
    assert sum(accounts.values()) + rest == pytest.approx(r.fleet.total_cost)
    users = {lab["key"] for lab, _ in costs if lab["group"] == "user"}
    assert users == {"u0", "u1", "u2"}  # within the bound: no other row
    assert {lab["group"] for lab, _ in costs} >= {"fleet", "host", "model", "cluster", UNALLOCATED}
    assert not {lab["group"] for lab, _ in costs} & {"gpu", "job"}


def test_the_other_row_recomputes_its_ratios() -> None:
    r = bounded(_report(_many_accounts(12)), top_n=3)
    (other,) = [x for x in r.group("account") if x.key == OTHER]
    assert other.utilization == pytest.approx(other.busy_gpu_hours / other.sampled_gpu_hours)
    assert other.cost_per_useful_gpu_hour == pytest.approx(other.total_cost / other.useful_gpu_hours)
    assert len(r.group("account")) == 4
    assert bounded(r, top_n=20) is r  # within the bound: as it is
    # under [cost] min_useful_gpu_hours useful hours, no cost per useful GPU-hour: as for any row
    few = other.useful_gpu_hours
    (low,) = [x for x in bounded(_report(_many_accounts(12)), 3, few + 1).group("account") if x.key == OTHER]
    assert low.cost_per_useful_gpu_hour is None and low.total_cost == pytest.approx(other.total_cost)
    (at,) = [x for x in bounded(_report(_many_accounts(12)), 3, few).group("account") if x.key == OTHER]
    assert at.cost_per_useful_gpu_hour == pytest.approx(other.cost_per_useful_gpu_hour)


# ---------------------------------------------------------------- property

NAMES = st.sampled_from(["", "a", "b", "c"])


@st.composite
def week_data(draw: st.DrawFn) -> WeekData:
    n = draw(st.integers(1, 6))
    gpus = tuple(
        gpu_week(
            f"GPU-{i}",
            f"n{i % 2}",
            gpu=str(i),
            cluster=draw(st.sampled_from(["", "east", "west"])),  # drawn before the busy hours
            busy_h=draw(st.floats(0, 168)),
            allocated_h=168.0,
            allocated_idle_h=0.0,
            energy_kwh=80.0,
        )
        for i in range(n)
    )
    jobs = []
    for k in range(draw(st.integers(0, 10))):
        held = draw(st.floats(0, 200))
        jobs.append(
            job_week(
                uuid=f"GPU-{draw(st.integers(0, n - 1))}",
                job_id=str(k),
                user=draw(NAMES),
                held_h=held,
                busy_h=0.6 * held,
                energy_kwh=held * 0.3,
                charged_h=draw(st.none() | st.floats(0, 200)),
                namespace=draw(NAMES),
                pod=draw(NAMES),
                account=draw(NAMES),
                partition=draw(NAMES),
                qos=draw(NAMES),
                labels=team_labels(draw(NAMES)),
            )
        )
    return WeekData(WEEK, "t", gpus, tuple(jobs))


@settings(max_examples=150, deadline=None)
@given(week_data(), st.integers(1, 3))
def test_every_grouping_adds_up_whatever_the_attributes(data: WeekData, top_n: int) -> None:
    r = _report(data)
    present = tuple(g for g in JOB_GROUPINGS if r.group(g))
    assert_conserves(r, groups=(*present, "job"))
    for group in ("account", "partition", "qos", "namespace", TEAM):
        keys = _keys(r, group)
        assert keys == [] or keys != [NONE], group  # a grouping nobody has: no rows
        assert NONE not in keys[:-1], group  # (none) last
    if any(g.cluster for g in data.gpus):
        assert total(r.group("cluster"), "total_cost") == pytest.approx(r.fleet.total_cost, abs=1e-6)
    else:
        assert r.group("cluster") == []
    cut = bounded(r, top_n)
    for group in (*present, "cluster"):
        rows = cut.group(group)
        assert len(rows) <= top_n + 1
        assert total(rows, "total_cost") == pytest.approx(total(r.group(group), "total_cost"), abs=1e-6)
