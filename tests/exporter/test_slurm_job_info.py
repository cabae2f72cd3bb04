"""``gpuledger_slurm_job_info``: the scheduler's own record of each running and recently finished
job (user, account, partition, QOS from squeue, then from its finished record), hostile values,
retention on a fake clock, the series cap, and a real single-node Slurm."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from pydantic import ValidationError

from domain import states
from exporter.config import MAX_LABEL_VALUE, SlurmSettings
from exporter.scrape import render
from exporter.scrape.collector import SnapshotCollector
from exporter.slurm import parse
from exporter.slurm.jobinfo import JobInfo
from exporter.slurm.watcher import QueueSnapshot, SlurmWatcher
from exporter.snapshot import EMPTY, Snapshot, by_type
from tests.support.metrics import parse_metrics
from tests.support.slurm import SlurmCluster
from tests.support.tools import require_binary
from tests.support.wait import wait_until

T = 1_800_000_000.0  # the fake clock's start (2027-01-15 08:00 UTC)
HOSTILE_NAME = 'x\n"q" \\ <script> ü\x1b JobState=FAKE'
ESCAPED = 'pi "q" \\ ü'  # printable: kept as it is, escaped on the wire
NAME = "gpuledger_slurm_job_info"


def info_of(m: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> dict[str, tuple[str, str, str, str]]:
    """job id -> (user, account, partition, qos) of the series in a parsed exposition."""
    out = {}
    for key, v in m.get(NAME, {}).items():
        d = dict(key)
        assert v == 1.0 and set(d) == {"job_id", "user", "account", "partition", "qos"}
        out[d["job_id"]] = (d["user"], d["account"], d["partition"], d["qos"])
    return out


def snapshot_of(q: QueueSnapshot) -> Snapshot:
    return dataclasses.replace(EMPTY, parts=by_type([q]))


def exposition(w: SlurmWatcher) -> str:
    return render.render(snapshot_of(w.snapshot())).decode()


# --- parsing ----------------------------------------------------------------------------


def _job(job_id: int, state: str, **kw: Any) -> dict[str, Any]:
    """One job of ``squeue --json`` as 22.05 writes it."""
    base = dict(job_id=job_id, name="wrap", user_name="ada", account="pi-ada", partition="gpu", qos="")
    times = dict(submit_time=int(T) - 100, eligible_time=int(T) - 100, start_time=(int(T) - 50) * (state != "PENDING"))
    return {**base, **times, "job_state": state, "state_reason": "None", "restart_cnt": 0, "node_count": 1, **kw}


def test_squeue_json_gives_account_and_qos() -> None:
    old = _job(11, "RUNNING", name=HOSTILE_NAME, account=ESCAPED, qos="high")
    new = {  # 23.02's shapes: the state a list, numbers as {"set", "number"}
        **_job(12, "RUNNING"),
        "job_state": ["RUNNING"],
        "start_time": {"set": True, "infinite": False, "number": int(T)},
        "account": None,
        "qos": "normal",
    }
    a, b = parse.squeue_json(json.dumps({"jobs": [old, new]}))
    assert (a.job_id, a.user, a.account, a.qos, a.name) == ("11", "ada", ESCAPED, "high", HOSTILE_NAME)
    assert (b.job_id, b.account, b.qos, b.start) == ("12", "", "normal", T)


def record(job: str, state: str = "RUNNING", account: str = "pi-ada", qos: str = "(null)", name: str = "wrap") -> str:
    """One job as ``squeue -o parse.TEXT_FORMAT`` prints it (no escaping: a newline stays one)."""
    t = "2026-11-30T03:05:50"
    return "|".join([job, "gpu", state, "None", t, t, "ada", "N/A", "1", account, qos, name, job])


def test_squeue_text_gives_account_and_qos_and_still_reads_the_older_format() -> None:
    text = record("21", qos="normal", name="a|b") + "\n" + record("22", account="(null)") + "\n"
    a, b = parse.squeue_text(text)
    assert (a.job_id, a.account, a.qos, a.name, a.state) == ("21", "pi-ada", "normal", "a|b", "RUNNING")
    assert (b.account, b.qos) == ("", "")  # squeue's "(null)": Slurm has none
    older = "12|gpu|PENDING|Priority|2026-11-30T03:05:50|N/A|carol|gres:gpu:2|3|a|b|c"
    (c,) = parse.squeue_text(older + "\n")
    assert (c.job_id, c.user, c.name, c.gpus, c.account, c.qos) == ("12", "carol", "a|b|c", 6, "", "")
    assert parse.TEXT_FORMAT.startswith("%A|%P|%T|%r|%V|%S|%u|%b|%D|")  # the older fields keep their places


FORGED_1 = record("1", account="evil", qos="high", name="n")  # a whole line for job 1, in someone's name


@pytest.mark.parametrize(
    ("hostile", "dropped"),
    [
        (record("4", name="x\n" + FORGED_1 + "\ny"), {"1", "4"}),  # claims job 1: 1 has two records
        (record("4", name="x\n" + FORGED_1.replace("1", "9") + "\ny"), {"4", "9"}),  # a job not listed
        (record("4", name="z|4\n" + record("4", account="evil")[:-2]), {"4"}),  # itself, twice
        (record("4", name="x\n1|gpu|RUNNING"), {"1", "4"}),  # a fragment naming job 1
        (record("4", account="pi\nnl"), {"4"}),  # an account with a newline (Slurm without slurmdbd takes it)
    ],
)
def test_a_newline_in_a_name_or_account_forges_no_record(hostile: str, dropped: set[str]) -> None:
    text = "\n".join([record("1"), hostile, record("2", account=ESCAPED), record("3", state="PENDING")]) + "\n"
    jobs, gone = parse.squeue_checked(text, "1\n4\n2\n3\n")
    assert gone == dropped
    real = {"1": ("pi-ada", ""), "2": (ESCAPED, ""), "3": ("pi-ada", "")}
    assert {j.job_id: (j.account, j.qos) for j in jobs} == {k: v for k, v in real.items() if k not in dropped}


def test_squeue_checked_keeps_whole_listed_records_only() -> None:
    text = record("1") + "\n" + record("5") + "\n"
    assert [j.job_id for j in parse.squeue_checked(text, "1\n5\n")[0]] == ["1", "5"]
    jobs, gone = parse.squeue_checked(text, "1\n")  # 5 left between the two listings: not sure, dropped
    assert [j.job_id for j in jobs] == ["1"] and gone == {"5"}
    assert parse.squeue_checked("", "") == ([], set())


# as slurmctld 22.05 wrote them for: -J 'n JobId=999 UserId=eve(5)' --wckey 'wk Account=evil QOS=high'
SPELLED = (
    "JobId=1 UserId=root(0) GroupId=root(0) Name=n JobId=999 UserId=eve(5) JobState=COMPLETED Partition=gpu "
    "TimeLimit=UNLIMITED StartTime=2026-12-03T17:21:19 EndTime=2026-12-03T17:21:19 NodeList=node1 NodeCnt=1 "
    "ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,mem=1000M,node=1,billing=1 Account=pi-a QOS= "
    "WcKey=wk account=evil qos=high Cluster=unknown SubmitTime=2026-12-03T17:21:17 EligibleTime=2026-12-03T17:21:17 "
    "DerivedExitCode=0:0 ExitCode=0:0 "
)


def test_a_job_name_in_the_jobcomp_file_spells_no_job_id_or_user() -> None:
    j = parse.jobcomp_line(SPELLED)
    assert j is not None and (j.job_id, j.user, j.name, j.account, j.qos) == ("1", "root", "n", "pi-a", "")


# --- the watcher on a fake clock ----------------------------------------------------------


class FakeSlurm:
    """A squeue that prints what the test says (JSON, or text with --json refused), a jobcomp file
    the test appends to, and the watcher's clock."""

    def __init__(self, tmp_path: Path, text: bool = False) -> None:
        self.dir = tmp_path
        self.jobcomp = tmp_path / "jobcomp.txt"
        self.now = T
        squeue = tmp_path / "squeue"
        d = tmp_path
        refuse = "echo \"squeue: unrecognized option '--json'\" >&2; exit 1" if text else f"cat {d}/text"
        squeue.write_text(
            f'#!/bin/sh\ncase "$*" in *--json*) {refuse};; *"-o %A") cat {d}/ids;; *) cat {d}/text;; esac\n'
        )
        squeue.chmod(0o755)
        self.squeue(json.dumps({"jobs": []}))
        self.settings = SlurmSettings(
            enabled=True, squeue=str(squeue), accounting="jobcomp", jobcomp_file=self.jobcomp, interval=15
        )

    def watcher(self, **kw: Any) -> SlurmWatcher:
        return SlurmWatcher(self.settings, None, lambda: self.now, **kw)

    def squeue(self, text: str, ids: str = "") -> None:
        (self.dir / "text").write_text(text)
        (self.dir / "ids").write_text(ids)

    def queue(self, *jobs: dict[str, Any]) -> None:
        self.squeue(json.dumps({"jobs": list(jobs)}))

    def ended(self, job: str, account: str, qos: str, end: float, start: float | None = None) -> None:
        def t(x: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(x))

        start = end - 60 if start is None else start
        nodes = "node1" if start < end else "(null)"
        with self.jobcomp.open("a") as f:
            f.write(
                f"JobId={job} UserId=ada(1001) GroupId=ada(1001) Name=wrap JobState=COMPLETED Partition=gpu "
                f"TimeLimit=UNLIMITED StartTime={t(start)} EndTime={t(end)} NodeList={nodes} NodeCnt=1 ProcCnt=1 "
                f"WorkDir=/tmp ReservationName= Tres=cpu=1,node=1 Account={account} QOS={qos} WcKey= "
                f"Cluster=unknown SubmitTime={t(start - 10)} EligibleTime={t(start - 10)} DerivedExitCode=0:0 "
                "ExitCode=0:0 \n"
            )


def test_running_then_finished_then_gone_after_the_retention(tmp_path: Path) -> None:
    s = FakeSlurm(tmp_path)
    w = s.watcher()
    s.queue(
        _job(11, "RUNNING"),
        _job(12, "PENDING"),  # not started: no series
        _job(13, "RUNNING", name=HOSTILE_NAME, account=ESCAPED, qos="high"),
        _job(14, "RUNNING", account="pi\nnl", user_name="bo\x1bb"),  # no label a reader could take: ""
        _job(15, "COMPLETED"),  # squeue lists an ended job a while: its finished record speaks for it
        _job(16, "COMPLETING", partition="debug"),
        _job(17, "SUSPENDED", account=""),
    )
    w.poll()
    text = exposition(w)
    assert info_of(parse_metrics(text)) == {
        "11": ("ada", "pi-ada", "gpu", ""),
        "13": ("ada", ESCAPED, "gpu", "high"),
        "14": ("", "", "gpu", ""),
        "16": ("ada", "pi-ada", "debug", ""),
        "17": ("ada", "", "gpu", ""),
    }
    assert 'account="pi \\"q\\" \\\\ ü"' in text and "JobState=FAKE" not in text  # names are no label
    assert all(line.startswith(("#", "gpuledger_")) for line in text.split("\n")[:-1])  # nothing split a line

    s.now = T + 30  # 11 ended: slurmctld's record (QOS as slurmdbd would name it) replaces squeue's
    s.queue(
        _job(13, "RUNNING", account=ESCAPED, qos="high"),
        _job(16, "COMPLETING", partition="debug"),
        # squeue lists a job from its submission until MinJobAge after its end: 32 and 33 too
        _job(32, "CANCELLED", account="pi-never", start_time=0),
        _job(33, "COMPLETED", account="pi-quick"),
    )
    s.ended("11", "pi-ada", "normal", end=T + 20)
    s.ended("31", "pi-old", "", end=T - 3600)  # from before (the file read from its top): history only
    s.ended("32", "pi-never", "", end=T + 25, start=T + 25)  # cancelled while pending: never ran
    s.ended("33", "pi-quick", "", end=T + 28, start=T + 21)  # started and ended between two polls
    w.poll()
    got = dict(w.snapshot().job_info)
    assert got["11"] == ("ada", "pi-ada", "gpu", "normal") and got["33"] == ("ada", "pi-quick", "gpu", "")
    assert set(got) == {"11", "13", "14", "16", "17", "33"}

    s.now = T + 620  # 14, 17 last listed at T: gone; 11, 33 read at T + 30: kept until T + 630
    s.queue()
    w.poll()
    assert set(w.snapshot().job_info) == {"11", "13", "16", "33"}
    s.now = T + 630.5
    w.poll()
    assert w.snapshot().job_info == {}
    assert NAME not in exposition(w)
    s.queue(_job(15, "COMPLETED"))  # still listed as ended: does not come back
    w.poll()
    assert w.snapshot().job_info == {}


def test_a_line_a_job_name_split_off_loses_no_other_record(tmp_path: Path) -> None:
    """-J $'x\\n...' splits its jobcomp line; a fragment with no key at all once failed the whole read."""
    s = FakeSlurm(tmp_path)
    w = s.watcher()
    s.jobcomp.write_text('JobId=2 UserId=root(0) GroupId=root(0) Name=x\n"q" \\ ü\r\x1b|\n')
    s.ended("33", "pi-quick", "", end=T - 5)
    w.poll()
    assert dict(w.snapshot().job_info) == {"33": ("ada", "pi-quick", "gpu", "")}
    assert w.snapshot().finished == {("gpu", "COMPLETED"): 1}


def test_the_snapshot_holds_the_same_mapping_until_it_changes(tmp_path: Path) -> None:
    s = FakeSlurm(tmp_path)
    w = s.watcher()
    s.queue(_job(11, "RUNNING"))
    w.poll()
    first = w.snapshot().job_info
    assert w.snapshot().job_info is first  # no copy of 50,000 jobs per sampler tick
    w.poll()
    assert w.snapshot().job_info == first


def test_the_text_format_in_the_watcher(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = FakeSlurm(tmp_path, text=True)
    w = s.watcher()
    forger = record("4", name="x\n" + FORGED_1.replace("1", "9") + "\ny")
    s.squeue("\n".join([record("1", qos="normal"), forger, record("2", account="(null)")]) + "\n", "1\n4\n2\n")
    with caplog.at_level(logging.WARNING, logger="exporter.slurm.watcher"):
        w.poll()
        w.poll()
    assert dict(w.snapshot().job_info) == {"1": ("ada", "pi-ada", "gpu", "normal"), "2": ("ada", "", "gpu", "")}
    assert w.snapshot().running_jobs == {"gpu": 2}  # what was forged counts nowhere
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "4, 9" in warned[0]


def test_the_series_are_capped_and_the_cap_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = FakeSlurm(tmp_path)
    w = s.watcher(max_job_info=3)
    s.queue(*(_job(i, "RUNNING") for i in range(100, 105)))
    with caplog.at_level(logging.WARNING, logger="exporter.slurm.jobinfo"):
        w.poll()
        assert list(w.snapshot().job_info) == ["102", "103", "104"]  # the least recently seen went
        s.now += 15
        s.ended("90", "pi-late", "", end=s.now - 5)
        w.poll()
    assert list(w.snapshot().job_info) == ["103", "104", "90"]
    assert len(info_of(parse_metrics(exposition(w)))) == 3
    assert [r.getMessage().startswith("slurm watcher: more than 3") for r in caplog.records] == [True]


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("pi-ada", "pi-ada"),
        (ESCAPED, ESCAPED),
        ("pi-müller", "pi-müller"),
        ("a" * MAX_LABEL_VALUE, "a" * MAX_LABEL_VALUE),
        ("a" * (MAX_LABEL_VALUE + 1), ""),  # never cut short
        ("pi\nada", ""),
        ("pi\rada", ""),  # \r splits lines for prometheus_client's parser
        ("pi\x1bada", ""),
        ("pi\x00ada", ""),
        ("pi\u2028ada", ""),
        ("pi\ud800", ""),  # a lone surrogate (JSON can spell one) would fail the encoding of a scrape
        ("", ""),
    ],
)
def test_a_value_that_is_no_label_is_exported_as_unknown(value: str, kept: str) -> None:
    j = JobInfo(600.0)
    j.listed("7", "RUNNING", (value, value, "gpu", value), T)
    assert j.view()["7"] == (kept, kept, "gpu", kept)
    j.listed("x7", "RUNNING", ("a", "b", "c", "d"), T)  # a job id is a number
    assert set(j.view()) == {"7"}


def test_the_renderer_escapes_every_label_value() -> None:
    """The watcher never hands it a newline; the renderer escapes one anyway, with quotes and backslashes."""
    hostile = 'a\nb "c" \\d ü'
    q = QueueSnapshot(job_info={"7": (hostile, hostile, "gpu", ""), "8": ("bo", "", "", "")})
    snap = snapshot_of(q)
    text = render.render(snap).decode()
    assert (
        f'{NAME}{{account="a\\nb \\"c\\" \\\\d ü",job_id="7",partition="gpu",qos="",user="a\\nb \\"c\\" \\\\d ü"}} 1.0'
        in text
    )
    assert info_of(parse_metrics(text)) == {"7": (hostile, hostile, "gpu", ""), "8": ("bo", "", "", "")}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap))
    assert render.render(snap) == generate_latest(registry)


def test_finished_info_seconds_is_a_positive_setting() -> None:
    assert SlurmSettings().finished_info_seconds == 600.0
    assert SlurmSettings(finished_info_seconds=30).finished_info_seconds == 30.0
    for bad in (0, -1):
        with pytest.raises(ValidationError, match="finished_info_seconds"):
            SlurmSettings(finished_info_seconds=bad)


# --- a real Slurm -------------------------------------------------------------------------


@pytest.mark.integration
def test_real_slurm_running_finished_and_gone(cluster: SlurmCluster, tmp_path: Path) -> None:
    """22.05 without slurmdbd: --account is taken as given, --qos accepted and not kept (squeue's
    qos "", jobcomp's QOS= empty). A job named to forge another's text record forges nothing."""
    c = cluster
    shift = [0.0]

    def clock() -> float:
        return time.time() + shift[0]

    settings = SlurmSettings(enabled=True, conf=c.conf, interval=1, finished_info_seconds=600)
    w = SlurmWatcher(settings, None, clock)
    # the text format through a squeue that has no --json (Slurm before 22.05), against the same controller
    no_json = tmp_path / "squeue-text"
    no_json.write_text(
        '#!/bin/sh\n[ "$1" = --json ] && { echo "squeue: unrecognized option \'--json\'" >&2; exit 1; }\n'
        'exec squeue "$@"\n'
    )
    no_json.chmod(0o755)
    text_w = SlurmWatcher(settings.model_copy(update={"squeue": str(no_json)}), None, clock)

    name = 'a|b "q" \\ <script> ü JobState=FAKE'  # a | and a key in it, no newline: whole in the text format too
    job = c.sbatch("--account", "pi-ada", "--qos", "normal", "-n", "1", "-J", name, "--wrap", "sleep 6")
    forged = record("999999", account="evil", name="n").replace("ada", "root")
    forger = c.sbatch("-n", "1", "-J", "x\n" + forged + "\ny", "--account", "pi-forger", "--wrap", "sleep 6")
    listed = {str(j["job_id"]): j for j in json.loads(c.run("squeue", "--json", check=True).stdout)["jobs"]}
    assert (listed[job]["account"], listed[job]["qos"]) == ("pi-ada", "")  # what 22.05 keeps without slurmdbd

    def running() -> bool:
        w.poll()
        return job in w.snapshot().job_info

    assert wait_until(running, 30)
    seen_at = clock()  # w's last look at the job alive: no poll of w until it ended
    text = exposition(w)
    assert info_of(parse_metrics(text))[job] == ("root", "pi-ada", "gpu", "")
    text_w.poll()
    assert text_w.snapshot().job_info.get(job) == ("root", "pi-ada", "gpu", "")
    assert "999999" not in text_w.snapshot().job_info and "999999" not in w.snapshot().job_info
    promtool = require_binary("promtool")
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr

    # both ended: the forger's job, its record refused, would still be listed running by squeue at the last poll
    def both_ended() -> bool:
        listed = parse.squeue_json(c.run("squeue", "--json", check=True).stdout)
        active = {j.job_id for j in listed if j.state in states.ACTIVE}
        text = c.jobcomp.read_text() if c.jobcomp.exists() else ""
        return not active & {job, forger} and all(f"JobId={j} " in text for j in (job, forger))

    assert wait_until(both_ended, 60)
    line = next(x for x in c.jobcomp.read_text().splitlines() if x.startswith(f"JobId={job} "))
    ended = parse.jobcomp_line(line)
    assert ended is not None and (ended.account, ended.qos, ended.user) == ("pi-ada", "", "root")
    read_at = clock()
    assert read_at - seen_at > 3  # it ran 6 s
    w.poll()  # reads the finished record; squeue lists the job COMPLETED now, which adds nothing
    assert w.snapshot().sources.get("jobcomp") is True
    assert w.snapshot().job_info.get(job) == ("root", "pi-ada", "gpu", "")
    shift[0] += read_at + 598 - clock()
    w.poll()
    assert job in w.snapshot().job_info  # kept by the finished record, read 598 s ago (squeue's look: > 600 s)
    shift[0] += 20
    w.poll()
    assert job not in w.snapshot().job_info and NAME not in exposition(w)
