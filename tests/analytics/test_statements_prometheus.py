"""``gpuledger job ID`` and ``gpuledger statement`` through a real Prometheus: a synthetic week
(2 GPUs, 72 jobs) backfilled as the exporter's series (its ``gpuledger_job_info`` naming each
job's partition), and the same week as the embedded history. A job's figures equal the embedded
source's and the truth within one scrape (60 s) of held time per GPU (what ``increase()`` over a
series that begins and ends inside the window may add); its first and last minute exactly; a
statement's totals are the report's user row."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpuledger.statements
from analytics import pipeline, synthetic, synthetic_om
from analytics.config import FullSettings
from analytics.report.build import job_key
from analytics.sources import Source
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.prometheus import PrometheusSource
from analytics.statements.job import JobFigures, job_figures
from analytics.statements.read import read
from analytics.statements.render import job_text
from analytics.statements.statement import statement
from analytics.synthetic import Fleet
from domain.jobs import JobKey
from domain.week import iso_week
from gpuledger.cli import main
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.integration  # starts a real Prometheus

WEEK = "2026-W47"
AFTER = iso_week(WEEK).end + 86400  # "now" for the job command: the week is past, within its lookback
STEP = 60.0  # the synthetic scrape interval
COST = {"currency": "EUR", "energy_price_per_kwh": 0.2, "pue": 1.4,
        "rules": [{"match_model": "H200", "purchase_price": 30000, "depreciation_years": 5}]}  # fmt: skip
CONFIG = """[cost]
currency = "EUR"
energy_price_per_kwh = 0.2
pue = 1.4
[[cost.rules]]
match_model = "H200"
purchase_price = 30000
depreciation_years = 5
"""
ONE_SCRAPE_KWH = STEP * 1000 * COST["pue"] / 3.6e6  # type: ignore[operator]  # a scrape at 1 kW, with PUE


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return synthetic.generate(iso_week(WEEK), hosts=1, gpus_per_host=2, seed=11)


def job_info_lines(f: Fleet) -> list[str]:
    """Each job's ``gpuledger_job_info`` on its GPU's host, naming its partition, from its start to
    its end (as the exporter exposes it while the job's processes run)."""
    host = {d.uuid: h for h, d in f.devices}
    out = []
    for j in f.jobs:
        if j.start is None:
            continue
        labels = f'account="",instance="{host[j.uuid]}:10044",job="gpuledger",job_id="{j.job_id}",'
        labels += f'partition="{j.partition}",qos="",user="{j.user}"'
        t = int(j.start)
        while t <= j.end:
            out.append(f"gpuledger_job_info{{{labels}}} 1 {t}\n")
            t += int(STEP)
    return out


@pytest.fixture(scope="module")
def prometheus_url(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prom")
    om = folder / "fleet.om"
    synthetic_om.write(fleet, om)
    lines = [x for x in om.read_text().splitlines(keepends=True) if not x.startswith("# EOF")]
    om.write_text("".join([*lines, *job_info_lines(fleet), "# EOF\n"]))
    server = PrometheusServer.backfilled(folder, om)
    om.unlink()
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "gpuledger.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The commands in this process: their "now" (the job command looks 35 days back from it)
    fixed, not the wall clock's; the sources they open closed after (a one-shot command leaves
    that to its exit)."""
    monkeypatch.setattr(gpuledger.statements, "time", types.SimpleNamespace(time=lambda: AFTER))
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    opened: list[Source] = []

    def make_source(s: FullSettings) -> Source:
        opened.append(pipeline.make_source(s))
        return opened[-1]

    monkeypatch.setattr(gpuledger.statements, "make_source", make_source)
    yield
    for source in opened:
        source.close()


def settings(url: str | None = None) -> FullSettings:
    """Prometheus at ``url``, else the embedded history (each source is given its own path here)."""
    if url is None:
        return FullSettings(cost=COST)
    return FullSettings(analytics={"source": "prometheus"}, prometheus={"url": url}, cost=COST)


def prom_figures(url: str, job: str) -> JobFigures:
    source = PrometheusSource(settings(url).prometheus)
    try:
        return job_figures(source, job, settings(url), AFTER)
    finally:
        source.api.close()


def chosen(f: Fleet) -> list[str]:
    """Each user's first completed job of at least an hour inside the week, and one that crosses
    midnight UTC (the source's days split it)."""
    w = f.window
    long = [
        j
        for j in f.jobs
        if j.state == "COMPLETED" and j.start is not None and w.start < j.start and j.start + 3600 <= j.end < w.end
    ]
    first = {j.user: j for j in reversed(long)}
    midnight = next(j for j in long if (j.start or 0) // 86400 != j.end // 86400)
    return sorted({*(j.job_id for j in first.values()), midnight.job_id})


def test_a_job_s_figures_equal_the_embedded_source_s_and_the_truth(
    fleet: Fleet, prometheus_url: str, hist: Path
) -> None:
    jobs = chosen(fleet)
    assert len(jobs) >= 6
    by_id = {j.job_id: j for j in fleet.jobs}
    for job in jobs:
        j = by_id[job]
        held_s, busy_s, _ = fleet.truth.job[(j.uuid, JobKey(j.job_id, j.user))]
        p, e = prom_figures(prometheus_url, job), job_figures(EmbeddedSource(hist), job, settings(), AFTER)
        assert (
            (p.job, p.user, p.partition, p.gpus)
            == (e.job, e.user, e.partition, e.gpus)
            == (job, j.user, j.partition, 1)
        )
        assert (p.start, p.end) == (e.start, e.end) == (j.start, j.end), job  # its first minute to its last's end
        assert p.window == e.window
        a, b = p.row, e.row
        assert a.allocated_gpu_hours is not None and abs(a.allocated_gpu_hours * 3600 - held_s) <= STEP
        assert abs(a.sampled_gpu_hours * 3600 - held_s) <= STEP, job  # charged: alone on its GPU
        assert abs(a.busy_gpu_hours * 3600 - busy_s) <= STEP, job
        assert a.energy_kwh is not None and b.energy_kwh is not None
        assert abs(a.energy_kwh - b.energy_kwh) <= ONE_SCRAPE_KWH, job
        assert b.total_cost > 0 and abs(a.total_cost - b.total_cost) <= b.total_cost * STEP / held_s, job
        assert abs(a.hardware_cost - b.hardware_cost) <= b.hardware_cost * STEP / held_s, job


def test_the_job_command_prints_them(
    fleet: Fleet, prometheus_url: str, config: Path, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    job = chosen(fleet)[0]
    args = ["job", job, "--config", str(config), "--source", "prometheus", "--prometheus-url", prometheus_url]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out == job_text(prom_figures(prometheus_url, job)) + "\n"
    j = next(x for x in fleet.jobs if x.job_id == job)
    assert f"Job: {job}\nUser: {j.user}   Partition: {j.partition}\n" in out and "\nGPUs: 1\n" in out
    assert re.search(r"\nCost: [0-9.,]+ EUR \(hardware [0-9.,]+ EUR, energy [0-9.,]+ EUR\)", out), out


def test_an_unknown_job_is_one_line_and_exit_1(
    prometheus_url: str, config: Path, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for job in ("424242", "ml/no-such-pod", 'a"b\\c'):
        args = ["job", job, "--config", str(config), "--source", "prometheus", "--prometheus-url", prometheus_url]
        assert main(args) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and f"no job {job!r}" in captured.err


def test_a_statement_s_totals_are_the_report_s_user_row(
    fleet: Fleet,
    prometheus_url: str,
    hist: Path,
    config: Path,
    tmp_path: Path,
    cli: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = "alice"
    week = iso_week(WEEK)
    source = PrometheusSource(settings(prometheus_url).prometheus)
    try:
        got = read(source, week, settings(prometheus_url), now=AFTER)
        st = statement(source, "user", user, week, settings(prometheus_url), now=AFTER)
    finally:
        source.api.close()
    row = next(r for r in got.report.group("user") if r.key == user)
    mine = {job_key(j) for j in got.data.jobs if j.job.user == user}
    assert {x.job for x in st.jobs} == mine and len(mine) > 3
    t = st.totals
    assert t.jobs == len(mine)
    assert t.total_cost == pytest.approx(row.total_cost, rel=1e-9) and t.idle_cost == pytest.approx(row.idle_cost)
    assert t.charged_gpu_hours == pytest.approx(row.sampled_gpu_hours) and t.busy_gpu_hours == pytest.approx(
        row.busy_gpu_hours
    )
    assert t.failed_cost is None  # Prometheus has no job's final state: said, not guessed
    # the embedded history's user row: within a scrape of held time per job
    embedded = read(EmbeddedSource(hist), week, settings(), now=AFTER).report
    e_row = next(r for r in embedded.group("user") if r.key == user)
    assert abs(row.sampled_gpu_hours - e_row.sampled_gpu_hours) * 3600 <= STEP * len(mine)
    assert row.total_cost == pytest.approx(e_row.total_cost, rel=0.01)
    # the command: the same totals, one line, and its files
    args = ["statement", "--user", user, "--week", WEEK, "--config", str(config), "--source", "prometheus"]
    assert main([*args, "--prometheus-url", prometheus_url, "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"user {user}, {WEEK}: {len(mine)} jobs, {row.sampled_gpu_hours:,.1f} GPU-hours, "
        f"total {row.total_cost:,.2f} EUR, idle {row.idle_cost:,.2f}, failed jobs —"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"statement-user-{user}-{WEEK}.{x}" for x in ("csv", "html", "md")
    ]
