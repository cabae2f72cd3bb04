"""A MIG slice on the bill, end to end: fake GPUs (one in MIG mode, one whole) -> the sampler ->
the history -> the embedded source -> the report, ``gpuledger job``, statements, budgets and FOCUS.

A job alone on a ``1g.10gb`` slice holds 1/7 of its GPU (shared/DESIGN.md, "A slice is a share"), so
for the same hours on GPUs of the same price it costs 1/7 of a job alone on a whole GPU; the slices
no job held (an empty 2g.20gb instance and the slice in no instance) are the unallocated row's; every
grouping still adds up to the fleet, and the MIG GPU's row says its busy time is its instances' SM
activity."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from analytics import budgets
from analytics.config import FullSettings
from analytics.report.build import build
from analytics.report.focus import to_focus
from analytics.report.markdown import to_markdown
from analytics.report.model import UNALLOCATED, CostRow, Report
from analytics.sources.embedded import EmbeddedSource
from analytics.statements.job import job_figures
from analytics.statements.render import job_text
from analytics.statements.statement import statement
from domain.week import WeekData, Window, iso_week
from exporter import history
from exporter.attribution.attributor import Attribution
from exporter.readers import GpmActivity, Process
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.snapshot import JobMinuteRow, MinuteRow
from gpuledger.cli import main
from tests.support.conservation import assert_conserves
from tests.support.metrics import parse_metrics
from tests.support.procfs import make_proc
from tests.support.sampling import make_sampler
from tests.support.settings import H200_COST, analytics_settings

WEEK = iso_week("2026-W47")
START = int(WEEK.start) + 3600  # the exporter runs from Monday 01:00 UTC
MINUTES = 5
SPAN = Window(START, START + 60 * MINUTES, "mig-span")  # exactly the minutes the exporter ran
AFTER = WEEK.end + 3600
LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb")  # 6 of the H100's 7 compute slices; the 2g.20gb stays empty
SLICE_JOB, BIG_JOB, WHOLE_JOB = "101", "102", "200"  # on the 1g.10gb, on the 3g.40gb, on the whole GPU 1
ACTIVE = 0.6  # the 1g.10gb instance's SM activity, and the whole GPU's utilisation: the same work
POWER = 400.0


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five minutes of one-second rounds over two fake GPUs: GPU 0 in MIG mode (``LAYOUT``), job 101
    alone on its 1g.10gb and job 102 on its 3g.40gb; GPU 1 whole, job 200 alone on it."""
    tmp = tmp_path_factory.mktemp("mig-bill")
    proc, passwd = tmp / "proc", tmp / "passwd"
    passwd.write_text("ann:x:1001:1001::/:/bin/sh\nbob:x:1002:1002::/:/bin/sh\ncy:x:1003:1003::/:/bin/sh\n")
    for pid, job, uid in ((500, SLICE_JOB, 1001), (501, BIG_JOB, 1002), (600, WHOLE_JOB, 1003)):
        make_proc(proc, pid, uid=uid, cgroup=f"0::/system.slice/slurmstepd.scope/job_{job}/step_batch/user/task_0\n")
    r = FakeReader(2, mig={0: LAYOUT})
    big, _empty_2g, one_g = r.gpus[0].mig or []
    one_g.processes, one_g.memory_used_bytes = [Process(500, 1 << 30)], 1 << 30
    one_g.gpm = GpmActivity(sm=ACTIVE, tensor=0.3, dram=0.2, sm_occupancy=0.4)
    big.processes, big.memory_used_bytes = [Process(501, 4 << 30)], 4 << 30
    big.gpm = GpmActivity(sm=0.9, tensor=0.5, dram=0.4, sm_occupancy=0.7)
    whole = r.gpus[1]
    whole.util, whole.processes, whole.memory_used_bytes = ACTIVE, [Process(600, 1 << 30)], 1 << 30
    for g in r.gpus:
        g.model, g.power_watts = "NVIDIA H200", POWER  # the same price: [cost] rules match "H200"
    rows: list[MinuteRow | JobMinuteRow] = []
    wall = [float(START - 1)]  # the baseline round; the first covered round is at START
    s = make_sampler(r)
    s.attribution = Attribution(proc, passwd)
    s._minute_sink = rows.extend
    s._wall = lambda: wall[0]
    s.tick()
    s.slow_tick()
    for _ in range(60 * MINUTES):
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
        s.slow_tick()
    (tmp / "metrics.prom").write_bytes(render.render(s.snapshot))  # what Prometheus would scrape last
    s.stop()
    w = history.HistoryWriter(tmp / "history.db", hostname="mig-node")
    w.submit(rows)
    w.stop()
    return tmp


@pytest.fixture(scope="module")
def settings(hist: Path) -> FullSettings:
    return analytics_settings(hist, cost=H200_COST)


@pytest.fixture(scope="module")
def week(hist: Path) -> WeekData:
    return EmbeddedSource(hist / "history.db").week(SPAN)


@pytest.fixture(scope="module")
def report(week: WeekData, settings: FullSettings) -> Report:
    return build(week, settings.cost, now=AFTER)


def _row(r: Report, group: str, key: str) -> CostRow:
    (row,) = [x for x in r.rows if x.group == group and (x.key == key or x.key.endswith(" " + key))]
    return row


def _uuids() -> tuple[str, str]:
    """The MIG GPU's UUID and the whole one's (the fake's, by index)."""
    gpus = FakeReader(2).gpus
    return gpus[0].uuid, gpus[1].uuid


def test_the_history_holds_share_scaled_job_seconds(hist: Path) -> None:
    mig_gpu, whole_gpu = _uuids()
    db = history.connect(hist / "history.db", readonly=True)
    totals = {(t.uuid, t.job.job_id): t for t in history.job_totals(db, START, START + 3600)}
    hours = {h.uuid: h.values for h in history.gpu_hours(db, START, START + 3600)}
    db.close()
    sampled = hours[mig_gpu]["sampled_seconds"]
    assert sampled is not None
    assert sampled == pytest.approx(60.0 * MINUTES) and hours[whole_gpu]["sampled_seconds"] == pytest.approx(sampled)
    assert hours[mig_gpu]["mig_sampled_seconds"] == pytest.approx(sampled)  # every second of it under MIG
    assert hours[whole_gpu]["mig_sampled_seconds"] is None  # never in MIG mode: not measured, not zero
    # the GPU's busy time under MIG: the instances' SM activity x their shares (the empty 2g is idle)
    assert hours[mig_gpu]["busy_seconds"] == pytest.approx(sampled * (ACTIVE / 7 + 0.9 * 3 / 7))
    one_g, big, whole = totals[(mig_gpu, SLICE_JOB)], totals[(mig_gpu, BIG_JOB)], totals[(whole_gpu, WHOLE_JOB)]
    assert one_g.sampled_seconds == pytest.approx(sampled)  # held the whole time ...
    assert one_g.charged_seconds == pytest.approx(sampled / 7)  # ... charged its slice: 1/7
    assert big.charged_seconds == pytest.approx(sampled * 3 / 7)
    assert whole.charged_seconds == pytest.approx(sampled)
    assert one_g.busy_seconds == pytest.approx(whole.busy_seconds / 7)  # the same work on 1/7 of a GPU
    assert one_g.energy_joules == pytest.approx(whole.energy_joules / 7, rel=1e-6)
    # its SM-active time is its instance's, not the MIG GPU's activity spread over its jobs
    assert one_g.sm_active_seconds == pytest.approx(one_g.busy_seconds) == pytest.approx(sampled * ACTIVE / 7)
    assert big.sm_active_seconds == pytest.approx(sampled * 0.9 * 3 / 7)
    assert whole.sm_active_seconds is None  # the whole fake GPU has no GPM


def test_the_series_the_prometheus_source_reads_carry_the_share(hist: Path) -> None:
    """The Prometheus source prices gpuledger_job_gpu_charged_seconds_total: the slice job's grows at
    1/7 of the GPU's rate, its held time (sampled) at the whole rate."""
    m = parse_metrics((hist / "metrics.prom").read_text())

    def of(name: str, job: str) -> float:
        (v,) = [v for k, v in m[name].items() if dict(k)["job_id"] == job]
        return v

    charged = "gpuledger_job_gpu_charged_seconds_total"
    held = "gpuledger_job_gpu_sampled_seconds_total"
    assert of(charged, SLICE_JOB) == pytest.approx(of(charged, WHOLE_JOB) / 7)
    assert of(charged, BIG_JOB) == pytest.approx(of(charged, WHOLE_JOB) * 3 / 7)
    assert of(held, SLICE_JOB) == pytest.approx(of(held, WHOLE_JOB))
    (mig_s,) = m["gpuledger_gpu_mig_sampled_seconds_total"].values()  # only the MIG GPU has the series
    (unallocated,) = m["gpuledger_gpu_mig_unallocated_ratio"].values()
    assert mig_s == pytest.approx(of(held, WHOLE_JOB)) and unallocated == pytest.approx(1 / 7)


def test_the_slice_job_costs_a_seventh_of_a_whole_gpu_job(report: Report) -> None:
    one_g, whole = _row(report, "job", SLICE_JOB), _row(report, "job", WHOLE_JOB)
    assert one_g.sampled_gpu_hours == pytest.approx(whole.sampled_gpu_hours / 7)
    assert one_g.hardware_cost == pytest.approx(whole.hardware_cost / 7)
    assert one_g.energy_cost == pytest.approx(whole.energy_cost / 7, rel=1e-6)
    assert one_g.total_cost == pytest.approx(whole.total_cost / 7, rel=1e-6)
    assert one_g.total_cost > 0
    assert _row(report, "job", BIG_JOB).hardware_cost == pytest.approx(3 * one_g.hardware_cost)


def test_the_slices_no_job_held_are_unallocated_and_everything_conserves(week: WeekData, report: Report) -> None:
    mig_gpu, _ = _uuids()
    gpu = _row(report, "gpu", mig_gpu)
    (rest,) = report.group(UNALLOCATED)
    # the empty 2g.20gb and the slice in no instance: 3 of GPU 0's 7 slices; GPU 1 was all job 200's
    assert rest.hardware_cost == pytest.approx(gpu.hardware_cost * 3 / 7)
    assert rest.sampled_gpu_hours == pytest.approx(gpu.sampled_gpu_hours * 3 / 7)
    jobs_on_mig = [_row(report, "job", j) for j in (SLICE_JOB, BIG_JOB)]
    assert sum(j.hardware_cost for j in jobs_on_mig) + rest.hardware_cost == pytest.approx(gpu.hardware_cost)
    assert_conserves(report)


def test_the_mig_gpu_row_says_its_busy_time_is_its_instances_activity(week: WeekData, report: Report) -> None:
    mig_gpu, whole_gpu = _uuids()
    measures = {g.uuid: g.busy_measure for g in week.gpus}
    assert measures == {mig_gpu: "mig_sm_active", whole_gpu: ""}
    assert _row(report, "gpu", mig_gpu).busy_measure == "mig_sm_active"
    assert _row(report, "gpu", whole_gpu).busy_measure == "utilization"
    assert _row(report, "host", "mig-node").busy_measure == "mixed"
    assert "instances' SM activity (MIG)" in to_markdown(report)


def test_gpuledger_job_charges_the_slice(
    hist: Path, settings: FullSettings, capsys: pytest.CaptureFixture[str], report: Report
) -> None:
    source = EmbeddedSource(hist / "history.db")
    one_g, whole = job_figures(source, SLICE_JOB, settings, AFTER), job_figures(source, WHOLE_JOB, settings, AFTER)
    source.close()
    assert one_g.gpus == whole.gpus == 1
    assert one_g.row.total_cost == pytest.approx(whole.row.total_cost / 7, rel=1e-6)
    assert one_g.row.total_cost == pytest.approx(_row(report, "job", SLICE_JOB).total_cost, rel=1e-9)
    text = job_text(one_g)
    assert f"{one_g.row.total_cost:.2f}" in text or f"{one_g.row.total_cost:,.2f}" in text, text
    config = hist / "cost.toml"
    config.write_text(
        '[cost]\ncurrency = "EUR"\nenergy_price_per_kwh = 0.2\npue = 1.4\n'
        '[[cost.rules]]\nmatch_model = "H200"\npurchase_price = 30000\ndepreciation_years = 5\n'
    )
    assert main(["job", SLICE_JOB, "--config", str(config), "--history", str(hist / "history.db")]) == 0
    out = capsys.readouterr().out
    assert SLICE_JOB in out and "EUR" in out, out


def test_statements_budgets_and_focus_conserve_the_slices(hist: Path, settings: FullSettings, report: Report) -> None:
    source = EmbeddedSource(hist / "history.db")
    st = statement(source, "user", "ann", WEEK, settings, now=AFTER)  # ann ran job 101 on the 1g.10gb
    source.close()
    (line,) = st.jobs
    assert line.row.total_cost == pytest.approx(_row(report, "job", SLICE_JOB).total_cost)
    assert st.totals.total_cost == pytest.approx(_row(report, "user", "ann").total_cost)
    s = FullSettings(
        cost=H200_COST,
        budgets={"rules": [{"group": "user", "key": "ann", "currency": 1.0}]},
        analytics=settings.analytics,
    )
    (spent,) = budgets.figures(s, (report, AFTER))
    assert spent.spent == pytest.approx(_row(report, "user", "ann").total_cost)
    files = to_focus([report], WEEK)
    for name in ("user.csv", "job.csv"):
        cells = list(csv.DictReader(io.StringIO(files[name], newline="")))
        assert sum(float(c["BilledCost"]) for c in cells) == pytest.approx(report.fleet.total_cost), name
        assert sum("what no job was charged" in c["ChargeDescription"] for c in cells) == 1, name
