"""Slurm account, partition and QOS: from a job's environment (attribution) and its finished record
(jobcomp, sacct) through the exposition and the history to the report's sources and job rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.model import UNALLOCATED
from analytics.sources.base import GpuFigures, JobRecords
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.promapi import Series
from analytics.sources.promql import PromQLSource
from domain.jobs import JobKey
from domain.week import JobWeek, WeekData, Window
from exporter import history
from exporter.attribution import slurmenv
from exporter.attribution.attributor import Attribution
from exporter.attribution.procfs import ProcReader
from exporter.attribution.shares import GpuJobs
from exporter.config import SlurmSettings
from exporter.readers import Process
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.slurm import parse
from exporter.slurm.records import FinishedJob
from exporter.slurm.watcher import SlurmWatcher
from exporter.snapshot import JobMinuteRow, MinuteRow
from tests.support.metrics import parse_metrics
from tests.support.procfs import PLAIN_USER, SLURM_V1, make_proc
from tests.support.sampling import make_sampler
from tests.support.slurm import SlurmCluster
from tests.support.wait import wait_until


def env(**items: str) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in items.items())


def v2(job: str) -> str:
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


# --- the environment ---------------------------------------------------------------------


def test_the_environment_names_the_job() -> None:
    e = env(
        HOME="/home/ada",
        SLURM_JOB_ID="4242",
        SLURM_JOB_ACCOUNT="pi-lovelace",
        SLURM_JOB_PARTITION="gpu",
        SLURM_JOB_QOS="normal",
    )
    assert slurmenv.parse(e) == slurmenv.SlurmEnv("4242", "pi-lovelace", "gpu", "normal")
    assert slurmenv.parse(b"") == slurmenv.SlurmEnv()
    # the first of a name wins (as getenv answers); an item without '=' is no variable
    assert slurmenv.parse(env(SLURM_JOB_ACCOUNT="a") + env(SLURM_JOB_ACCOUNT="b") + b"SLURM_JOB_QOS\0").account == "a"


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (b"pi-ada", "pi-ada"),
        ("pi-müller".encode(), "pi-müller"),  # UTF-8 is a name Slurm could hold
        (b'pi"a\\b<c>', 'pi"a\\b<c>'),  # printable: kept, and escaped in the exposition
        (b"pi\nada", ""),  # a newline
        (b"pi\tada", ""),
        (b"pi\x1bada", ""),
        (b" pi-ada", ""),
        (b"pi-\xff\xfe", ""),  # not UTF-8
        (b"a" * slurmenv.MAX_VALUE, "a" * slurmenv.MAX_VALUE),
        (b"a" * (slurmenv.MAX_VALUE + 1), ""),  # never cut short
        (b"x" * 100_000, ""),
        (b"", ""),
    ],
)
def test_a_hostile_value_is_dropped_never_repaired(raw: bytes, kept: str) -> None:
    e = b"SLURM_JOB_ID=7\0SLURM_JOB_ACCOUNT=" + raw + b"\0SLURM_JOB_QOS=" + raw + b"\0"
    got = slurmenv.parse(e)
    assert (got.job_id, got.account, got.qos) == ("7", kept, kept)


@pytest.mark.parametrize("job", ["４２", "42 ", "-1", "4e3", "42\n"])
def test_a_job_id_is_ascii_digits(job: str) -> None:
    assert slurmenv.parse(env(SLURM_JOB_ID=job)).job_id == ""


def test_an_environ_past_the_read_limit_is_not_searched(tmp_path: Path) -> None:
    path = tmp_path / "environ"
    path.write_bytes(b"PAD=" + b"x" * slurmenv.MAX_ENVIRON + b"\0" + env(SLURM_JOB_ACCOUNT="late"))
    assert slurmenv.read(path) == slurmenv.SlurmEnv()
    assert slurmenv.read(tmp_path / "absent") == slurmenv.SlurmEnv()


def test_the_environment_counts_only_for_the_cgroup_s_job(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 10, uid=0, cgroup=SLURM_V1, environ={"SLURM_JOB_ID": "4242", "SLURM_JOB_ACCOUNT": "pi-a"})
    make_proc(proc, 11, uid=0, cgroup=SLURM_V1, environ={"SLURM_JOB_ID": "9999", "SLURM_JOB_ACCOUNT": "pi-x"})
    make_proc(proc, 12, uid=0, cgroup=PLAIN_USER, environ={"SLURM_JOB_ID": "77", "SLURM_JOB_PARTITION": "debug"})
    make_proc(proc, 13, uid=0, cgroup=PLAIN_USER, environ={"SLURM_JOB_ACCOUNT": "pi-none"})  # no job: no account
    r = ProcReader(proc)
    owners = {pid: r.owner(pid) for pid in (11, 10, 12, 13)}
    got = {pid: (o.job_id, *o.slurm()) for pid, o in owners.items() if o is not None}
    assert got == {
        11: ("4242", "", "", ""),  # the environment speaks of another job: not believed
        10: ("4242", "pi-a", "", ""),
        12: ("", "", "", ""),  # outside every job cgroup on a node that has them: in no job (issue 24)
        13: ("", "", "", ""),
    }
    again = r.owner(11)  # now the job's attributes are known: every process of it has them
    assert again is not None and again.account == "pi-a"


def test_a_job_s_first_process_that_names_them_sets_its_attributes(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 20, uid=0, cgroup=v2("977"), environ={"PATH": "/bin"})  # read before anything names them
    r = ProcReader(proc)
    first = r.owner(20)
    assert first is not None and first.slurm() == ("", "", "")
    make_proc(proc, 21, uid=0, cgroup=v2("977"), environ={"SLURM_JOB_ID": "977", "SLURM_JOB_ACCOUNT": "pi-a"})
    make_proc(proc, 22, uid=0, cgroup=v2("977"), environ={"SLURM_JOB_ID": "977", "SLURM_JOB_ACCOUNT": "pi-forged"})
    assert [o.account for o in (r.owner(21), r.owner(22), r.owner(20)) if o is not None] == ["pi-a"] * 3
    r.forget_except(set())
    assert r._jobs == {}  # the job left: its attributes go with it (bounded)


def test_a_job_first_seen_unnamed_is_kept_under_its_named_key() -> None:
    jobs = GpuJobs()
    bare, named = JobKey("5", "ada"), JobKey("5", "ada", account="pi-a", partition="gpu", qos="high")
    assert bare == named and hash(bare) == hash(named)  # the same job, whatever its environment says
    jobs.integrate({bare: 1.0}, dt=1.0, busy=1.0, power=100.0, now=1.0, energy_from_power=True)
    jobs.integrate({named: 1.0}, dt=1.0, busy=0.5, power=100.0, now=2.0, energy_from_power=True)
    jobs.integrate({bare: 1.0}, dt=1.0, busy=0.0, power=100.0, now=3.0, energy_from_power=True)
    ((key, c),) = jobs.jobs.items()
    assert key.slurm() == ("pi-a", "gpu", "high") and c.sampled_seconds == 3.0 and c.busy_seconds == 1.5


# --- the exposition and the history ------------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> tuple[FakeReader, Attribution]:
    """Job 4242 (ada, pi-lovelace) on both GPUs, job 4300 (bob, a hostile account) and a plain user on GPU 1."""
    proc = tmp_path / "proc"
    (tmp_path / "passwd").write_text("ada:x:1001:1001::/:/bin/sh\nbob:x:1002:1002::/:/bin/sh\n")
    lovelace = {"SLURM_JOB_ID": "4242", "SLURM_JOB_ACCOUNT": "pi-lovelace", "SLURM_JOB_PARTITION": "gpu"}
    make_proc(proc, 300, uid=1001, cgroup=SLURM_V1, environ={**lovelace, "SLURM_JOB_QOS": "normal"})
    make_proc(proc, 301, uid=1001, cgroup=SLURM_V1, environ=lovelace)
    make_proc(proc, 302, uid=1002, cgroup=v2("4300"), environ={"SLURM_JOB_ID": "4300", "SLURM_JOB_ACCOUNT": 'p"i\\ü'})
    make_proc(proc, 303, uid=1002, cgroup=PLAIN_USER)
    r = FakeReader(2)
    r.gpus[0].util, r.gpus[1].util = 0.8, 0.4
    r.gpus[0].processes = [Process(300, 2 << 30)]
    r.gpus[1].processes = [Process(301, 1 << 30), Process(302, 1 << 30), Process(303, 1 << 30)]
    return r, Attribution(proc, tmp_path / "passwd")


def test_one_info_series_per_slurm_job_and_the_counters_keep_their_labels(node: tuple[FakeReader, Attribution]) -> None:
    r, attribution = node
    s = make_sampler(r)
    s.attribution = attribution
    for _ in range(3):
        r.advance(1.0)
        s.tick()
    text = render.render(s.snapshot).decode()
    m = parse_metrics(text)
    info = {tuple(v for _, v in k): val for k, val in m["gpuledger_job_info"].items()}
    # labels in name order: account, job_id, partition, qos, user
    assert info == {("pi-lovelace", "4242", "gpu", "normal", "ada"): 1.0, ('p"i\\ü', "4300", "", "", "bob"): 1.0}
    assert 'account="p\\"i\\\\ü"' in text  # escaped on the wire
    for name in ("gpuledger_job_gpu_charged_seconds_total", "gpuledger_gpu_job_info"):
        assert {frozenset(dict(k)) for k in m[name]} == {
            frozenset({"gpu", "uuid", "job_id", "user", "pod", "namespace", "container"})
        }
    assert len(m["gpuledger_job_gpu_charged_seconds_total"]) == 4  # 4242 twice, 4300, bob's own


def sampled_history(r: FakeReader, attribution: Attribution, path: Path, start: float, minutes: int) -> None:
    """The sampler over ``minutes`` of wall time from ``start``, its minutes written to ``path``."""
    rows: list[MinuteRow | JobMinuteRow] = []
    wall = [start]
    s = make_sampler(r)
    s.attribution = attribution
    s._minute_sink = rows.extend
    s._wall = lambda: wall[0]
    s.tick()
    for _ in range(minutes * 60):
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
        s.slow_tick()
    s.stop()
    w = history.HistoryWriter(path, hostname="node1")
    w.submit(rows)
    w.stop()


T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
WINDOW = Window(T0, T0 + 3 * 3600, "test")


def job_attrs(data: WeekData) -> dict[str, tuple[str, str, str]]:
    return {j.job.job_id or j.job.user: (j.account, j.partition, j.qos) for j in data.jobs}


def test_the_embedded_source_names_running_and_finished_jobs(
    node: tuple[FakeReader, Attribution], tmp_path: Path
) -> None:
    r, attribution = node
    path = tmp_path / "h.sqlite"
    sampled_history(r, attribution, path, T0, 3)
    db = history.connect(path)
    assert {k: (a.account, a.partition, a.qos) for k, a in history.job_attributes(db, 0, 10**10).items()} == {
        "4242": ("pi-lovelace", "gpu", "normal"),
        "4300": ('p"i\\ü', "", ""),
    }
    running = EmbeddedSource(path).week(WINDOW)
    assert job_attrs(running) == {
        "4242": ("pi-lovelace", "gpu", "normal"),
        "4300": ('p"i\\ü', "", ""),
        "bob": ("", "", ""),
    }
    # 4242 ends: slurmctld's record wins where it names them (no QOS in it: the environment's stays)
    ended = FinishedJob("c", "4242", "train", "ada", "gpu-long", "COMPLETED", T0, T0, T0, T0 + 200, 2, "0:0", 0)
    with history.transaction(db):
        history.insert_jobs(db, [FinishedJob(**{**ended.__dict__, "account": "pi-lovelace-2"})])
    db.close()
    finished = EmbeddedSource(path).week(WINDOW)
    assert job_attrs(finished)["4242"] == ("pi-lovelace-2", "gpu-long", "normal")
    assert job_attrs(finished)["4300"] == ('p"i\\ü', "", "")


def by_account(data: WeekData) -> dict[str, str]:
    """Job row key (the report's) -> account, for the Slurm jobs."""
    return {j.job.job_id: j.account or "(none)" for j in data.jobs if j.job.job_id}


def test_a_report_s_job_rows_add_up_per_account(node: tuple[FakeReader, Attribution], tmp_path: Path) -> None:
    r, attribution = node
    path = tmp_path / "h.sqlite"
    sampled_history(r, attribution, path, T0, 5)
    data = EmbeddedSource(path).week(WINDOW)
    report = build(data, CostModel(), now=WINDOW.end)
    accounts = by_account(data)
    per_account: dict[str, float] = defaultdict(float)
    for row in report.group("job"):
        per_account[accounts.get(row.key, "(none)")] += row.total_cost
    assert set(per_account) == {"pi-lovelace", 'p"i\\ü', "(none)"}
    assert all(v > 0 for v in per_account.values())
    (rest,) = report.group(UNALLOCATED)
    assert sum(per_account.values()) + rest.total_cost == pytest.approx(report.fleet.total_cost, rel=1e-9)
    # 4242 holds GPU 0 alone and a third of GPU 1; 4300 a third of GPU 1 (equal memory shares)
    jobs = {row.key: row for row in report.group("job")}
    assert jobs["4242"].hardware_cost == pytest.approx(jobs["4300"].hardware_cost * 4, rel=1e-6)


# --- finished jobs: jobcomp and sacct ------------------------------------------------------

JOBCOMP = (
    "JobId=81 UserId=ada(1001) GroupId=ada(1001) Name=train JobState=COMPLETED Partition=gpu TimeLimit=UNLIMITED "
    "StartTime=2027-01-15T08:00:13 EndTime=2027-01-15T08:30:14 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/home/ada "
    "ReservationName= Tres=cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2 Account=pi-lovelace QOS=normal WcKey= "
    "Cluster=test SubmitTime=2027-01-15T08:00:11 EligibleTime=2027-01-15T08:00:11 DerivedExitCode=0:0 ExitCode=0:0 \n"
)


def test_jobcomp_lines_carry_account_and_qos() -> None:
    """The line as slurmctld 22.05 writes it with slurmdbd (QOS named); without, QOS= is empty."""
    j = parse.jobcomp_line(JOBCOMP)
    assert j is not None and (j.job_id, j.account, j.qos, j.partition, j.gpus) == (
        "81",
        "pi-lovelace",
        "normal",
        "gpu",
        2,
    )
    bare = parse.jobcomp_line(JOBCOMP.replace("Account=pi-lovelace QOS=normal", "Account= QOS="))
    assert bare is not None and (bare.account, bare.qos) == ("", "")
    assert parse.SACCT_FIELDS.split(",")[-3:] == ["Account", "QOS", "JobName"]  # JobName last: it may hold anything


@pytest.mark.integration
def test_real_slurm_accounts_reach_the_history_and_the_report(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Real jobs with --account (no slurmdbd: accounts are taken as given, QOS is not kept): their
    own environment (as slurmstepd set it) attributes their fabricated GPU processes, their jobcomp
    lines reach the history through the watcher, and the report's job rows carry the accounts."""
    c = cluster
    out = tmp_path / "env"
    out.mkdir()
    ids = {
        account: c.sbatch(
            f"--account={account}", "--qos=high", "--wrap", f"cat /proc/self/environ > {out}/$SLURM_JOB_ID"
        )
        for account in ("pi-lovelace", "pi-hopper")
    }
    assert wait_until(lambda: len(c.jobcomp.read_text().splitlines()) == 2 if c.jobcomp.exists() else False, 60)
    path = tmp_path / "h.sqlite"
    writer = history.HistoryWriter(path, hostname="node1")
    watcher = SlurmWatcher(SlurmSettings(enabled=True, conf=c.conf, jobcomp_file=c.jobcomp), writer.submit, lambda: 0.0)
    watcher.poll()
    writer.stop()
    db = history.connect(path)
    finished = {j.job_id: j for j in history.finished_jobs(db, 0, 10**12)}
    db.close()
    assert {k: (j.account, j.qos, j.partition) for k, j in finished.items()} == {
        ids["pi-lovelace"]: ("pi-lovelace", "", "gpu"),
        ids["pi-hopper"]: ("pi-hopper", "", "gpu"),
    }
    # the jobs' real environments on two fabricated GPU processes, sampled from the first job's start
    proc = tmp_path / "proc"
    for pid, job in enumerate(ids.values(), start=500):
        make_proc(proc, pid, uid=0, cgroup=v2(job))
        (proc / str(pid) / "environ").write_bytes((out / job).read_bytes())
        assert slurmenv.read(proc / str(pid) / "environ").job_id == job
    r = FakeReader(2)
    r.gpus[0].util = r.gpus[1].util = 0.5
    r.gpus[0].processes, r.gpus[1].processes = [Process(500, 1 << 30)], [Process(501, 1 << 30)]
    start = min(j.start or j.end for j in finished.values()) // 60 * 60
    sampled_history(r, Attribution(proc), path, start, 2)
    data = EmbeddedSource(path).week(Window(start - 60, start + 3600, "slurm"))
    assert {j.job.job_id: (j.account, j.partition, j.qos) for j in data.jobs} == {
        ids["pi-lovelace"]: ("pi-lovelace", "gpu", ""),
        ids["pi-hopper"]: ("pi-hopper", "gpu", ""),
    }
    report = build(data, CostModel(), now=start + 3600)
    accounts = {j.job.job_id: j.account for j in data.jobs}
    rows = {accounts[row.key]: row.total_cost for row in report.group("job")}
    assert set(rows) == {"pi-lovelace", "pi-hopper"} and rows["pi-lovelace"] == pytest.approx(rows["pi-hopper"])
    assert isinstance(data.jobs[0], JobWeek)


class _InfoAPI:
    """Answers the job records' queries: fixed ``gpuledger_job_info`` series (the claims), no
    ``gpuledger_slurm_job_info`` (the scheduler's)."""

    def __init__(self, series: list[dict[str, str]]) -> None:
        self.series = series
        self.asked: list[tuple[str, float]] = []

    def query(self, expr: str, at: float) -> list[Series]:
        self.asked.append((expr, at))
        return [Series(labels, 1.0) for labels in self.series] if "gpuledger_job_info" in expr else []

    def query_many(self, queries: list[tuple[str, float]]) -> list[list[Series]]:
        return [self.query(expr, at) for expr, at in queries]


def _records(api: _InfoAPI, cluster_label: str = "") -> JobRecords:
    settings = PrometheusSettings(cluster_label=cluster_label)
    return PromQLSource(settings, api, ()).job_records(WINDOW, GpuFigures(()))  # type: ignore[arg-type]


def test_the_prometheus_source_joins_the_info_series_on_the_job() -> None:
    series = [
        {"job_id": "7", "user": "ada", "account": "", "partition": "gpu", "qos": ""},  # before the environment was read
        {"job_id": "7", "user": "ada", "account": "pi-a", "partition": "gpu", "qos": ""},
        {"job_id": "8", "user": "bo", "account": "pi-z", "partition": "", "qos": ""},
        {"job_id": "8", "user": "bo", "account": "pi-b", "partition": "", "qos": ""},  # two hosts disagree: label order
        {"job_id": "", "user": "cy", "account": "pi-none", "partition": "", "qos": ""},
    ]
    for order in (series, series[::-1]):
        api = _InfoAPI(order)
        got = _records(api)
        assert dict(got.claims_by_cluster) == {
            ("", "7", "ada"): ("pi-a", "gpu", ""),
            ("", "8", "bo"): ("pi-b", "", ""),
        }
        assert got.claim("", "", JobKey("7", "ada")) == ("pi-a", "gpu", "")
        assert got.claim("", "", JobKey("7", "eve")) == ("", "", "")  # another user's job 7: not this one
        assert got.claim("site-b", "", JobKey("7", "ada")) == ("", "", "")  # another cluster's job 7
        assert (
            "max by (instance, job_id, user, account, partition, qos) (last_over_time(gpuledger_job_info[10800s]))",
            WINDOW.end,
        ) in api.asked
    assert "max by (kube_cluster, instance, job_id," in _asked(series, "kube_cluster")


def _asked(series: list[dict[str, str]], cluster_label: str) -> str:
    api = _InfoAPI(series)
    _records(api, cluster_label)
    return next(q for q, _ in api.asked if "gpuledger_job_info" in q)
