"""``gpuledger scaling --history`` results in the weekly report (issue 23): the embedded history's
``scaling`` records of the window, the last run of each model name, a row per GPU count with the
run's own figures and verdict; a record that is not a scaling document is skipped; a user without
the fleet's totals does not see them (a run names no user)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.report.access import for_user
from analytics.report.build import build
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from analytics.report.model import Report
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.prometheus import PrometheusSource
from domain.week import iso_week
from exporter import history
from exporter.benchmarks.records import BenchRecord
from gpuledger.scaling_report import Result, Row
from gpuledger.scaling_report import to_json as scaling_json
from tests.support.prometheus import PrometheusServer

WEEK = iso_week("2026-W47")  # Monday 2026-11-16, UTC


def _result(name: str, t1: float, t2: float) -> str:
    """The --json document of a weak-scaling run at 1 and 2 GPUs, 0.1 s and 0.06 s a step (or t1, t2)."""
    res = Result(name, ["train.py"], "weak", "step timer", "GPUs", 3.6, "EUR", False, "not measured yet")
    res.rows = [Row(1, step_seconds=t1, samples_per_step=16.0), Row(2, step_seconds=t2, samples_per_step=32.0)]
    return json.dumps(scaling_json(res))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    path: Path = tmp_path_factory.mktemp("scaling") / "history.db"
    db = history.connect(path)
    day = 86400
    records = [
        BenchRecord(WEEK.start + day, "scaling", "ok", 60.0, "nccl", 2, _result("llama-ft", 0.1, 0.08)),
        BenchRecord(WEEK.start + 3 * day, "scaling", "ok", 60.0, "nccl", 2, _result("llama-ft", 0.1, 0.06)),  # last
        BenchRecord(WEEK.start + 2 * day, "scaling", "ok", 60.0, "nccl", 2, _result("resnet", 0.2, 0.19)),
        BenchRecord(WEEK.start + 2 * day, "scaling", "ok", 1.0, "nccl", 2, '{"rows": "not a list"}'),  # skipped
        BenchRecord(WEEK.end + day, "scaling", "ok", 60.0, "nccl", 2, _result("later", 0.1, 0.05)),  # after
    ]
    with history.transaction(db):
        history.insert_bench(db, records)
    db.close()
    return build(EmbeddedSource(path).week(WEEK), CostModel(), now=WEEK.end + 7200)


def test_the_last_run_of_each_model_with_its_figures(report: Report) -> None:
    rows = {(r.name, r.gpus): r for r in report.scaling}
    assert rows.keys() == {("llama-ft", 1), ("llama-ft", 2), ("resnet", 1), ("resnet", 2)}
    two = rows[("llama-ft", 2)]
    assert two.date == "2026-11-19" and two.step_seconds == pytest.approx(0.06)  # Thursday's run, not Tuesday's
    assert two.speedup == pytest.approx(2 * 0.1 / 0.06) and two.efficiency == pytest.approx(0.1 / 0.06)
    assert two.samples_per_second == pytest.approx(32 / 0.06)
    assert two.cost_per_1000_steps == pytest.approx(3.6 * 2 * 0.06 * 1000 / 3600) and two.currency == "EUR"
    assert two.verdict.startswith("3.33x faster") and rows[("llama-ft", 1)].verdict == ""
    assert rows[("resnet", 2)].speedup == pytest.approx(2 * 0.2 / 0.19)


def test_the_table_renders_and_round_trips(report: Report) -> None:
    md = to_markdown(report)
    assert "Your models: does multi-GPU pay?" in md and "llama-ft" in md and "3.33x" in md
    assert from_json(to_json(report)).scaling == report.scaling


def test_a_user_without_the_fleets_totals_does_not_see_them(report: Report) -> None:
    assert for_user(report, "ann", {}, fleet_totals=False).scaling == []
    assert for_user(report, "ann", {}, fleet_totals=True).scaling == report.scaling


def _openmetrics(path: Path) -> None:
    """What Prometheus scraped of an exporter serving two runs: llama-ft's of Thursday (replacing
    Tuesday's) and one from the week before (not this week's), every minute of the week."""
    node = 'instance="gpu-node-01:10044",job="gpuledger"'
    lines = []
    runs = (("llama-ft", WEEK.start + 3 * 86400, 0.06), ("old-model", WEEK.start - 86400, 0.05))
    for t in range(int(WEEK.start), int(WEEK.end), 60):
        for name, finished, t2 in runs:
            if t < finished:
                continue
            for n, step in ((1, 0.1), (2, t2)):
                lab = f'{node},name="{name}",scaling="weak",world_size="{n}"'
                lines.append(f"gpuledger_scaling_step_seconds{{{lab}}} {step} {t}")
                lines.append(f"gpuledger_scaling_speedup_ratio{{{lab}}} {n * 0.1 / step} {t}")
                lines.append(f"gpuledger_scaling_efficiency_ratio{{{lab}}} {0.1 / step} {t}")
                lines.append(f'gpuledger_scaling_cost_per_1000_steps{{{lab},currency="EUR"}} {2 * n * step} {t}')
            lines.append(f'gpuledger_scaling_last_run_timestamp_seconds{{{node},name="{name}"}} {finished} {t}')
    lines.sort(key=lambda x: (x.rsplit(" ", 2)[0], int(x.rsplit(" ", 1)[1])))  # each series' samples together
    path.write_text("\n".join(lines) + "\n# EOF\n")


@pytest.mark.integration
def test_prometheus_reads_the_runs_the_exporter_serves(tmp_path: Path) -> None:
    _openmetrics(tmp_path / "scaling.om")
    server = PrometheusServer.backfilled(tmp_path, tmp_path / "scaling.om")
    try:
        source = PrometheusSource(PrometheusSettings(url=server.url, kube_state_metrics=False))
        try:
            bench = source.bench(WEEK)
        finally:
            source.api.close()
    finally:
        server.stop()
    assert bench is not None
    (run,) = bench.scaling  # the week before's run is not this week's
    assert (run.name, run.finished, run.scaling, run.currency) == ("llama-ft", WEEK.start + 3 * 86400, "weak", "EUR")
    assert [(p.n, p.step_seconds, p.cost_per_1000_steps) for p in run.points] == [(1, 0.1, 0.2), (2, 0.06, 0.24)]
    assert run.points[1].speedup == pytest.approx(2 * 0.1 / 0.06)
