"""A grouping is one row of analytics.report.groupings: two rows added at test time (a job grouping
``cluster-and-partition``, with statements, and ``node``, the host re-registered as a GPU grouping)
reach the builder, JSON, CSV, Markdown, HTML, the served FOCUS files, FOCUS, statements (the
function, the CLI flag and [statements] by), budgets (config and figures), group_by and /metrics,
without touching any other code; without the rows nothing knows them. And the table's own checks."""

from __future__ import annotations

import csv
import functools
import io
from collections import defaultdict
from pathlib import Path

import pytest

from analytics import budgets
from analytics.config import FullSettings
from analytics.cost import CostModel
from analytics.metrics import OTHER, bounded
from analytics.report import served
from analytics.report.build import build
from analytics.report.csvio import to_csv
from analytics.report.focus import to_focus
from analytics.report.groupings import TABLE, Grouping
from analytics.report.html import to_html
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from analytics.report.model import UNALLOCATED, Report
from analytics.statements import render
from analytics.statements.read import Read
from analytics.statements.statement import keys, statement, statement_of
from domain.week import WeekData, Window
from gpuledger.cli import main
from tests.support.conservation import COST_COLUMNS, assert_conserves, total
from tests.support.groupings import AFTER, ALL, WEEK, grouped_week
from tests.support.report_pages import page_sections
from tests.support.sources import StubSource

PARTS = "cluster-and-partition"
CLUSTER_PARTITION = Grouping(
    name=PARTS,
    job=lambda j: ":".join(x for x in (j.cluster, j.partition) if x),
    slug="cluster-partitions",
    title="Cluster partitions",
    column="Cluster partition",
    per="cluster partition",
    statement="the jobs of a cluster's partition",
)
NODE = Grouping(name="node", gpu=lambda g: g.host, slug="nodes", title="Nodes", column="Node", per="node")
BY = (*ALL, PARTS, "node")
FOCUS = f"gpuledger-{WEEK.label}-focus"


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two rows, in the table: the only change."""
    monkeypatch.setattr("analytics.report.groupings.TABLE", (*TABLE, CLUSTER_PARTITION, NODE))


def _report() -> Report:
    return build(grouped_week(), CostModel(), now=AFTER, group_by=BY)


def _keys(r: Report, group: str) -> list[str]:
    return [x.key for x in r.group(group)]


def test_without_the_rows_nothing_knows_them() -> None:
    with pytest.raises(ValueError, match=f"unknown grouping '{PARTS}'"):
        _report()
    with pytest.raises(ValueError, match="unknown grouping 'node'"):
        FullSettings(analytics={"group_by": ["node"]})
    with pytest.raises(ValueError, match=f"unknown grouping '{PARTS}'"):
        FullSettings(budgets={"rules": [{"group": PARTS, "key": "x", "currency": 1}]})
    with pytest.raises(ValueError, match=f"unknown grouping '{PARTS}'"):
        FullSettings(statements={"by": [PARTS]})
    with pytest.raises(ValueError, match=f"unknown grouping '{PARTS}'"):
        statement_of(grouped_week().jobs, build(grouped_week(), CostModel(), now=AFTER), PARTS, "east:gpu", None)
    assert served.content_type(f"{FOCUS}/{PARTS}.csv") is None
    assert served.content_type(f"{FOCUS}/node.csv") is None


@pytest.mark.usefixtures("added")
def test_the_builder_keys_and_sums_them() -> None:
    r = _report()
    assert _keys(r, PARTS) == ["debug", "east", "east:gpu", "west", "(none)"]  # (none) last, as any grouping's
    assert_conserves(r, groups=(PARTS, "job"))  # a job grouping: + unallocated = the fleet
    for column in COST_COLUMNS:  # a GPU grouping: alone = the fleet, as the hosts it re-registers
        assert total(r.group("node"), column) == pytest.approx(getattr(r.fleet, column)), column
    assert [(x.key, x.total_cost) for x in r.group("node")] == [(x.key, x.total_cost) for x in r.group("host")]
    groups = list(dict.fromkeys(x.group for x in r.rows))  # the job groupings after the jobs, the GPU ones last
    assert groups[groups.index("job") :] == ["job", "account", "partition", "qos", "label:label_team", PARTS,
                                             "cluster", "node", UNALLOCATED]  # fmt: skip
    assert from_json(to_json(r)) == r
    rows = list(csv.DictReader(io.StringIO(to_csv(r)["costs.csv"], newline="")))
    by: dict[str, float] = defaultdict(float)
    for row in rows:
        by[row["group"]] += float(row["total_cost"])
    assert by[PARTS] + by[UNALLOCATED] == pytest.approx(r.fleet.total_cost)
    assert by["node"] == pytest.approx(r.fleet.total_cost)


@pytest.mark.usefixtures("added")
def test_every_renderer_shows_them() -> None:
    r = _report()
    sections = page_sections(to_html(r))
    charts, rows = sections["cluster-partitions"]
    assert charts == ["Total cost per cluster partition"]
    assert [row[0] for row in rows] == [*_keys(r, PARTS), "(unallocated)"]
    charts, rows = sections["nodes"]
    assert charts == ["Total cost per node"]
    assert [row[0] for row in rows] == _keys(r, "node")  # a GPU grouping's table has no unallocated row
    md = to_markdown(r)
    assert "## Cluster partitions (and what no job was charged)\n\n| Cluster partition |" in md
    assert "## Nodes\n\n| Node |" in md


@pytest.mark.usefixtures("added")
def test_focus_writes_them_and_reports_serves_them(tmp_path: Path) -> None:
    r = _report()
    files = to_focus([r], WEEK)
    folder = tmp_path / FOCUS
    folder.mkdir()
    for name in (f"{PARTS}.csv", "node.csv"):
        (folder / name).write_text(files[name])
        got = served.read(tmp_path, f"{FOCUS}/{name}")
        assert got == (files[name].encode(), "text/csv; charset=utf-8"), name
        cells = list(csv.DictReader(io.StringIO(files[name], newline="")))
        assert sum(float(c["BilledCost"]) for c in cells) == pytest.approx(r.fleet.total_cost), name
    parts = list(csv.DictReader(io.StringIO(files[f"{PARTS}.csv"], newline="")))
    assert sum("what no job was charged" in c["ChargeDescription"] for c in parts) == 1
    node = list(csv.DictReader(io.StringIO(files["node.csv"], newline="")))
    assert not any("what no job was charged" in c["ChargeDescription"] for c in node)


class _Source(StubSource):
    """Never read: the statement's read is the test's."""


@pytest.mark.usefixtures("added")
def test_statements_take_the_job_grouping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, r = grouped_week(), _report()
    assert keys(data.jobs, PARTS) == ["(none)", "debug", "east", "east:gpu", "west"]
    st = statement_of(data.jobs, r, PARTS, "east:gpu", None)
    assert [x.job for x in st.jobs] == ["east:101", "east:102"]
    assert st.totals.total_cost == pytest.approx(next(x.total_cost for x in r.group(PARTS) if x.key == "east:gpu"))
    assert "cluster-and-partition east:gpu" in render.to_markdown(st)
    with pytest.raises(ValueError, match="unknown grouping 'node'; choose from user, namespace, account, " + PARTS):
        statement(_Source(), "node", "n1", WEEK, FullSettings())
    assert FullSettings(statements={"by": ["user", PARTS]}).statements.by == ["user", PARTS]
    with pytest.raises(ValueError, match="unknown grouping 'node'"):
        FullSettings(statements={"by": ["node"]})  # a GPU grouping keys no job: no statement
    # the CLI's flag: gpuledger statement --cluster-and-partition KEY, on the fake source's read
    monkeypatch.setattr("gpuledger.statements.make_source", lambda s: _Source())
    monkeypatch.setattr("gpuledger.statements.read", lambda source, window, s: Read(_day(data, window), r))
    monkeypatch.setattr("gpuledger.statements.job_states", lambda source, start, end: None)
    assert main(["statement", f"--{PARTS}", "east:gpu", "--week", WEEK.label, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"{PARTS} east:gpu, {WEEK.label}: 2 jobs,")
    assert len(list(tmp_path.glob(f"statement-{PARTS}-east_gpu-*-{WEEK.label}.*"))) == 3


def _day(data: WeekData, window: Window) -> WeekData:
    assert window.label == WEEK.label
    return data


@pytest.mark.usefixtures("added")
def test_budgets_group_by_and_metrics_take_them() -> None:
    rules = [{"group": PARTS, "key": "east:gpu", "currency": 100.0}, {"group": "node", "key": "n2", "gpu_hours": 9.0}]
    s = FullSettings(budgets={"rules": rules}, analytics={"group_by": [PARTS, "node"]})
    assert s.analytics.group_by == [PARTS, "node"]
    month = build(grouped_week(), CostModel(), now=AFTER, group_by=[r.group for r in s.budgets.rules])
    spent = {(f.group, f.key): f.spent for f in budgets.figures(s, (month, AFTER))}
    (parts,) = [x.total_cost for x in month.group(PARTS) if x.key == "east:gpu"]
    (node,) = [x.sampled_gpu_hours for x in month.group("node") if x.key == "n2"]
    assert spent == {(PARTS, "east:gpu"): pytest.approx(parts), ("node", "n2"): pytest.approx(node)}
    cut = bounded(_report(), top_n=1)  # /metrics: the top key of each grouping and one (other) row
    for group in (PARTS, "node"):
        assert len(cut.group(group)) == 2 and cut.group(group)[-1].key == OTHER, group
        assert total(cut.group(group), "total_cost") == pytest.approx(total(_report().group(group), "total_cost"))


def test_a_row_keys_jobs_or_gpus_and_only_a_job_grouping_has_statements() -> None:
    row = functools.partial(Grouping, name="x", slug="x", title="X", column="X", per="x")
    with pytest.raises(ValueError, match=r"give one of job= .* or gpu="):
        row()
    with pytest.raises(ValueError, match=r"give one of job= .* or gpu="):
        row(job=lambda j: "", gpu=lambda g: "")
    with pytest.raises(ValueError, match="a job grouping only"):
        row(gpu=lambda g: "", statement="the x's jobs")
