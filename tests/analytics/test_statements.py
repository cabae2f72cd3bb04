"""``gpuledger job`` and ``gpuledger statement``: a job's figures are its row of the report, a
statement's totals the sum of its group's job rows, the scaling advice from measured efficiency,
file names safe whatever the key, and the daemon's monthly statements on the 1st."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.config import FullSettings
from analytics.cost import CostModel
from analytics.daemon import Analytics
from analytics.report.build import build
from analytics.report.model import Report
from analytics.sources.embedded import EmbeddedSource
from analytics.statements import render
from analytics.statements.advice import efficiencies, scaling_advice
from analytics.statements.job import job_figures, verdict
from analytics.statements.read import read
from analytics.statements.statement import keys, month, previous_month, statement, statement_of, statements_of
from analytics.synthetic import Fleet
from domain.jobs import JobKey
from domain.states import FAILED
from domain.week import BenchWeek, JobWeek, WeekData, Window, iso_week
from gpuledger.cli import main
from tests.support.fleet import WEEK
from tests.support.settings import H200_COST, analytics_settings
from tests.support.weeks import KWH, H, gpu_week

AFTER = iso_week(WEEK).end + 86400  # "now": the week is past


@pytest.fixture(scope="module")
def week_report(hist: Path) -> Report:
    return read(
        EmbeddedSource(hist),
        iso_week(WEEK),
        analytics_settings(
            hist.parent,
            analytics={"reports_dir": hist.parent / "r"},
            cost=H200_COST,
            statements={"dir": hist.parent / "statements"},
        ),
        now=AFTER,
    ).report


def _ran(fleet: Fleet) -> list[str]:
    return [j.job_id for j in fleet.jobs if j.start is not None]


def test_job_is_its_report_row(fleet: Fleet, hist: Path, week_report: Report) -> None:
    rows = {r.key: r for r in week_report.group("job")}
    job = next(j for j in fleet.jobs if j.start is not None and j.state == "COMPLETED" and j.job_id in rows)
    f = job_figures(
        EmbeddedSource(hist),
        job.job_id,
        analytics_settings(
            hist.parent,
            analytics={"reports_dir": hist.parent / "r"},
            cost=H200_COST,
            statements={"dir": hist.parent / "statements"},
        ),
        now=AFTER,
    )
    row = rows[job.job_id]
    held_s, busy_s, _ = fleet.truth.job[(job.uuid, JobKey(job.job_id, job.user))]
    assert f.gpus == 1 and f.user == job.user and f.partition == job.partition
    assert f.row.sampled_gpu_hours == pytest.approx(row.sampled_gpu_hours) == pytest.approx(held_s / 3600)
    assert f.row.busy_gpu_hours == pytest.approx(busy_s / 3600)
    assert f.row.total_cost == pytest.approx(row.total_cost, rel=1e-9) and f.row.total_cost > 0
    assert f.row.idle_cost == pytest.approx(row.idle_cost, rel=1e-9)
    assert f.start == job.start and f.end == pytest.approx(job.end)  # first minute to the end of the last
    assert f.verdict == verdict(row)


def test_job_command_prints_the_row(
    fleet: Fleet, hist: Path, week_report: Report, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {r.key: r for r in week_report.group("job")}
    job = next(j for j in _ran(fleet) if j in rows)
    assert main(["job", job, "--source", "embedded", "--history", str(hist)]) == 0
    out = capsys.readouterr().out
    assert f"Job: {job}" in out and "Efficiency: " in out
    assert f"charged: {rows[job].sampled_gpu_hours:,.1f} h" in out


def test_unknown_job_is_one_line_and_exit_1(hist: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "no-such-job", "--source", "embedded", "--history", str(hist)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no job 'no-such-job'" in err


def test_verdicts_in_plain_words() -> None:
    w = Window(0, 3600, "t")
    busy_stalled = ((500, None), (3000, 1200 / H), (3400, None))  # seconds of the hour; g1 stalled 1200 s
    gpus = tuple(
        gpu_week(
            f"g{i}",
            "h1",
            gpu=str(i),
            sampled_h=1,
            busy_h=busy / H,
            allocated_h=1,
            allocated_idle_h=0.0,
            energy_kwh=1e6 / KWH,
            stalled_h=stalled,
        )
        for i, (busy, stalled) in enumerate(busy_stalled)
    )
    data = WeekData(w, "t", gpus)
    rows = {r.key.split()[-1]: r for r in build(data, _cost(), now=7200).group("gpu")}
    assert verdict(rows["g0"]).startswith("mostly idle: busy 14 %")
    assert verdict(rows["g1"]).startswith("stalled 33 %") and "a hang or a spin-wait" in verdict(rows["g1"])
    assert verdict(rows["g2"]) == "kept its GPUs busy (94 %)"


def test_statement_totals_are_the_sum_of_the_group_job_rows(fleet: Fleet, hist: Path, week_report: Report) -> None:
    st = statement(
        EmbeddedSource(hist),
        "user",
        "alice",
        iso_week(WEEK),
        analytics_settings(
            hist.parent,
            analytics={"reports_dir": hist.parent / "r"},
            cost=H200_COST,
            statements={"dir": hist.parent / "statements"},
        ),
        now=AFTER,
    )
    rows = {r.key: r for r in week_report.group("job")}
    mine = {j.job_id for j in fleet.jobs if j.user == "alice" and j.job_id in rows}
    assert {x.job for x in st.jobs} == mine and len(mine) > 3
    t = st.totals
    assert t.total_cost == pytest.approx(sum(rows[k].total_cost for k in mine))
    assert t.idle_cost == pytest.approx(sum(rows[k].idle_cost for k in mine))
    assert t.charged_gpu_hours == pytest.approx(sum(rows[k].sampled_gpu_hours for k in mine))
    user = next(r for r in week_report.group("user") if r.key == "alice")  # the report's own sum
    assert t.total_cost == pytest.approx(user.total_cost) and t.busy_gpu_hours == pytest.approx(user.busy_gpu_hours)
    failed = {j.job_id for j in fleet.jobs if j.job_id in mine and j.state in FAILED}
    assert failed and t.failed_cost == pytest.approx(sum(rows[k].total_cost for k in failed))


def test_statement_command_writes_three_formats(hist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["statement", "--user", "bob", "--week", WEEK, "--source", "embedded", "--history", str(hist)]
    assert main([*args, "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"statement-user-bob-{WEEK}.{x}" for x in ("csv", "html", "md")]
    html = (tmp_path / f"statement-user-bob-{WEEK}.html").read_text()
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")  # self-contained
    csv_rows = (tmp_path / f"statement-user-bob-{WEEK}.csv").read_text().splitlines()
    assert csv_rows[-1].startswith("(total),") and len(csv_rows) > 3
    capsys.readouterr()
    bad = ["statement", "--user", "bob", "--month", "2026-13", "--source", "embedded", "--history", str(hist)]
    assert main([*bad, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2026-13" in err


def _cost() -> CostModel:
    return FullSettings(cost=H200_COST).cost


def _account_week(bench: BenchWeek | None = None) -> tuple[WeekData, Report]:
    """Eight GPUs: an 8-GPU job of grant-a, two 1-GPU jobs of grant-b and one without an account."""
    w = Window(0, 7200, "t")
    gpus = tuple(
        gpu_week(
            f"GPU-{i}",
            "h1",
            gpu=str(i),
            sampled_h=2,
            busy_h=6000 / H,
            allocated_h=2,
            allocated_idle_h=0.0,
            energy_kwh=1e6 / KWH,
        )
        for i in range(8)
    )
    jobs = tuple(JobWeek(f"GPU-{i}", "h1", JobKey("10", "ann"), 7200, 6000, 9e5, account="grant-a") for i in range(8))
    jobs += (
        JobWeek("GPU-0", "h1", JobKey("11", "bo"), 0, 0, 0, account="grant-b"),
        JobWeek("GPU-1", "h1", JobKey("12", "bo"), 0, 0, 0, account="grant-b"),
        JobWeek("GPU-2", "h1", JobKey("13", "cy"), 0, 0, 0),
    )
    data = WeekData(w, "t", gpus, jobs, bench=bench)
    return data, build(data, FullSettings(cost=H200_COST).cost, now=7200)


def test_account_statement_from_week_data() -> None:
    data, r = _account_week()
    rows = {x.key: x for x in r.group("job")}
    a = statement_of(data.jobs, r, "account", "grant-a", None)
    assert [x.job for x in a.jobs] == ["10"] and a.jobs[0].row.gpus == 8
    assert a.totals.total_cost == pytest.approx(rows["10"].total_cost) and a.totals.failed_cost is None
    assert any("failed-job cost not known" in n for n in a.notes)
    b = statement_of(data.jobs, r, "account", "grant-b", None)
    assert [x.job for x in b.jobs] == ["11", "12"]
    assert [x.job for x in statement_of(data.jobs, r, "account", "(none)", None).jobs] == ["13"]
    assert statement_of(data.jobs, r, "account", "grant-z", None).totals.jobs == 0


_NAMES = st.sampled_from(["", "ann", "bo", "(none)", "../x", "ü"])


@st.composite
def _jobs(draw: st.DrawFn) -> tuple[WeekData, Report]:
    """Up to 30 job rows on 4 GPUs: Slurm jobs and pods, users, accounts and namespaces drawn from
    a few names (empty ones too, and one that is a grouping's none key), some jobs on two GPUs,
    some GPUs shared, a job's later rows naming another partition (a job's user and account are
    its own on every row, as a scheduler's are)."""
    w = Window(0, 7200, "t")
    gpus = tuple(gpu_week(f"GPU-{i}", "h1", gpu=str(i), sampled_h=2, busy_h=1, allocated_h=2) for i in range(4))
    users, accounts = (draw(st.lists(_NAMES, min_size=13, max_size=13)) for _ in range(2))  # one per job id
    rows = []
    for n in range(draw(st.integers(0, 30))):
        pod = draw(st.booleans())
        i = n + 13 if pod else draw(st.integers(1, 12))
        key = JobKey("" if pod else str(i), users[i % 13], f"p{n}" if pod else "", draw(_NAMES) if pod else "")
        held = draw(st.floats(0, 7200))
        rows.append(
            JobWeek(
                f"GPU-{draw(st.integers(0, 3))}",
                "h1",
                key,
                held,
                held * draw(st.floats(0, 1)),
                held * 300.0,
                account=accounts[i % 13],
                partition=draw(st.sampled_from(["", "gpu", "long"])),
            )
        )
    data = WeekData(w, "t", gpus, tuple(rows))
    return data, build(data, _cost(), now=7200)


@settings(max_examples=60, deadline=None)
@given(_jobs(), st.sampled_from(["user", "account", "namespace"]), st.booleans())
def test_statements_made_in_one_pass_are_each_keys_statement(
    week: tuple[WeekData, Report], grouping: str, states_known: bool
) -> None:
    """The monthly statements come from one pass over the jobs (``statements_of``, each yielded as
    made): the same statements, in the same order, as one ``statement_of`` per key."""
    data, r = week
    states = {j.job.job_id: "FAILED" for j in data.jobs[::2] if j.job.job_id} if states_known else None
    one_pass = list(statements_of(data.jobs, r, grouping, states))
    assert [x.key for x in one_pass] == keys(data.jobs, grouping)
    assert one_pass == [statement_of(data.jobs, r, grouping, k, states) for k in keys(data.jobs, grouping)]
    # every job row of the report is in exactly one statement (where the grouping has any key)
    if one_pass:
        assert sum(x.totals.jobs for x in one_pass) == len(r.group("job"))


def test_a_users_jobs_come_worst_waste_first() -> None:
    """ann's jobs: a 2-GPU-hour job nearly always busy, and a cheaper one that held its GPU an hour
    and did nothing. The idle one leads her statement though it cost less: its hours were wasted."""
    w = Window(0, 7200, "t")
    gpus = (gpu_week("GPU-0", "h1", sampled_h=2, busy_h=1.9), gpu_week("GPU-1", "h1", gpu="1", sampled_h=2, busy_h=0))
    jobs = (
        JobWeek("GPU-0", "h1", JobKey("20", "ann"), 7200, 1.9 * H, 0.0),
        JobWeek("GPU-1", "h1", JobKey("21", "ann"), 3600, 0.0, 0.0),
    )
    r = build(WeekData(w, "t", gpus, jobs), FullSettings(cost=H200_COST).cost, now=7200)
    rows = {x.key: x for x in r.group("job")}
    assert rows["20"].total_cost > rows["21"].total_cost and rows["21"].idle_cost > rows["20"].idle_cost
    st = statement_of(jobs, r, "user", "ann", None)
    assert [x.job for x in st.jobs] == ["21", "20"]


def test_scaling_advice_from_measured_efficiency() -> None:
    bench = BenchWeek(speedup={1: 1.0, 4: 3.06, 8: 4.96}, efficiency={4: 0.765, 8: 0.62}, throughput_1=100.0)
    data, r = _account_week(bench)
    eff = efficiencies(r)
    assert eff == {1: 1.0, 4: 0.765, 8: 0.62}
    said = "your 8-GPU jobs ran at a measured 62 % efficiency; on 4 GPUs they would have cost about 19 % less"
    assert scaling_advice(8, eff, many=True) == said
    assert statement_of(data.jobs, r, "account", "grant-a", None).advice == [said]  # 0.62 / 0.765 = 0.81
    assert scaling_advice(4, eff).startswith("your 4-GPU job ran at a measured 76 % efficiency; on 1 GPU")
    assert scaling_advice(16, eff) == "" and scaling_advice(1, eff) == ""  # not measured: no advice
    assert efficiencies(_account_week()[1]) == {}
    assert "cost about the same" in scaling_advice(2, {1: 1.0, 2: 0.98})


HOSTILE = ["../../etc/passwd", "a/b", "a_b", "", ".", "..", ".hidden", "x" * 300, "=cmd|' /C calc'!A0", "ü\n\x00"]


def test_file_names_are_safe_for_hostile_keys(tmp_path: Path) -> None:
    data, r = _account_week()
    out = tmp_path / "out"
    stems = set()
    for key in HOSTILE:
        st = statement_of(data.jobs, r, "user", key, None)
        files = render.write(st, ["html", "md", "csv"], out)
        assert all(f.parent == out for f in files)
        stems.add(render.stem(st))
    assert len(stems) == len(HOSTILE)  # never two keys in one file
    names = [p.name for p in out.iterdir()]
    assert len(names) == 3 * len(HOSTILE) and not list(tmp_path.glob("etc*"))
    for name in names:
        assert re.fullmatch(r"statement-user-[A-Za-z0-9_][A-Za-z0-9_.-]*-t\.(html|md|csv)", name), name
        assert ".." not in name and len(name) < 100
    csv_text = (out / f"{render.stem(statement_of(data.jobs, r, 'user', HOSTILE[8], None))}.csv").read_text()
    assert "=cmd" not in csv_text.splitlines()[0]


def test_month_windows() -> None:
    nov = month("2026-11", "Europe/Berlin")
    tz = zoneinfo.ZoneInfo("Europe/Berlin")
    assert dt.datetime.fromtimestamp(nov.start, tz) == dt.datetime(2026, 11, 1, tzinfo=tz)
    assert dt.datetime.fromtimestamp(nov.end, tz) == dt.datetime(2026, 12, 1, tzinfo=tz)
    assert previous_month(month("2027-01").start + 3600).label == "2026-12"
    with pytest.raises(ValueError):
        month("2026-13")


def test_daemon_writes_last_months_statements_on_the_first(fleet: Fleet, hist: Path) -> None:
    first_of_december = dt.datetime(2026, 12, 1, 0, 30, tzinfo=dt.UTC).timestamp()
    s = analytics_settings(
        hist.parent,
        analytics={"reports_dir": hist.parent / "r"},
        cost=H200_COST,
        statements={"dir": hist.parent / "statements", "enabled": True, "by": ["user", "account"]},
    )
    a = Analytics(s, clock=lambda: first_of_december)
    try:
        a.start(catch_up=False)
        job = a.scheduler.get_job("statements")
        assert job is not None
        fake_now = dt.datetime(2026, 11, 17, 9, 0, tzinfo=dt.UTC)  # a fake clock, not the wall's
        fire = job.trigger.get_next_fire_time(None, fake_now)
        assert (fire.year, fire.month, fire.day, fire.hour, fire.minute) == (2026, 12, 1, 0, 30)
        files = a.statements()
    finally:
        a.stop()
    users = sorted({j.user for j in fleet.jobs if j.start is not None})
    # no job has an account: that grouping has no data and no statements
    assert sorted(p.name for p in files) == sorted(
        f"statement-user-{u}-2026-11.{x}" for u in users for x in ("html", "md", "csv")
    )
    assert all(p.parent == s.statements.dir for p in files)
    assert a.run_state()[0][("statements", "ok")] == 1
    off = Analytics(
        analytics_settings(
            hist.parent,
            analytics={"reports_dir": hist.parent / "r"},
            cost=H200_COST,
            statements={"dir": hist.parent / "statements"},
        ),
        clock=lambda: first_of_december,
    )
    try:
        off.start(catch_up=False)
        assert off.scheduler.get_job("statements") is None  # [statements] enabled = false
    finally:
        off.stop()
