"""Parsing what Slurm says, from lines in the formats Slurm 22.05 and 23.02 write."""

from __future__ import annotations

import json
import time

import pytest

from exporter.slurm import parse

HOSTILE = 'first "q" \\ <script>x</script> ü JobState=FAKE'
JOBCOMP = (
    "JobId=1 UserId=alice(1001) GroupId=alice(1001) Name={name} JobState=COMPLETED Partition=gpu "
    "TimeLimit=UNLIMITED StartTime=2026-11-30T03:05:52 EndTime=2026-11-30T03:05:58 NodeList=node1 NodeCnt=1 "
    "ProcCnt=2 WorkDir=/home/alice/my dir ReservationName= Tres=cpu=2,mem=1000M,node=1,billing=2,gres/gpu=4 "
    "Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-30T03:05:50 EligibleTime=2026-11-30T03:05:51 "
    "DerivedExitCode=0:0 ExitCode=0:0 \n"
)
CANCELLED_PENDING = (
    "JobId=4 UserId=root(0) GroupId=root(0) Name=wrap JobState=CANCELLED Partition=gpu TimeLimit=UNLIMITED "
    "StartTime=2026-11-30T03:05:51 EndTime=2026-11-30T03:05:51 NodeList=(null) NodeCnt=0 ProcCnt=0 WorkDir=/tmp "
    "ReservationName= Tres=cpu=2,mem=1000M,node=1,billing=2 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-30T03:05:50 EligibleTime=2026-11-30T03:05:50 DerivedExitCode=0:0 ExitCode=0:0 \n"
)


def t(s: str) -> float:
    return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))


def test_jobcomp_lines_with_a_hostile_name() -> None:
    j = parse.jobcomp_line(JOBCOMP.format(name=HOSTILE))
    assert j is not None
    assert (j.job_id, j.user, j.partition, j.state) == ("1", "alice", "gpu", "COMPLETED")
    assert j.name == 'first "q" \\ <script>x</script> ü'  # a spelled-out key cuts the name, not the record
    assert (j.submit, j.eligible, j.start, j.end) == (
        t("2026-11-30T03:05:50"),
        t("2026-11-30T03:05:51"),
        t("2026-11-30T03:05:52"),
        t("2026-11-30T03:05:58"),
    )
    assert j.gpus == 4 and j.exit_code == "0:0" and j.cluster == ""
    assert parse.jobcomp_fields(JOBCOMP.format(name="x"))["WorkDir"] == "/home/alice/my dir"


def test_a_job_cancelled_while_pending_never_started() -> None:
    j = parse.jobcomp_line(CANCELLED_PENDING)
    assert j is not None and j.state == "CANCELLED" and j.start is None


def test_squeue_json_of_22_05_and_23_02() -> None:
    old = {
        "jobs": [
            {
                "job_id": 5,
                "name": "n",
                "user_name": "bob",
                "partition": "gpu",
                "job_state": "PENDING",
                "state_reason": "Resources",
                "submit_time": 100,
                "eligible_time": 110,
                "start_time": 0,
                "tres_req_str": "cpu=8,gres/gpu=2",
                "restart_cnt": 0,
                "node_count": 1,
            }
        ]
    }
    new = {
        "jobs": [
            {
                "job_id": 6,
                "name": "m",
                "user_name": "eve",
                "partition": "gpu",
                "job_state": ["RUNNING"],
                "state_reason": "None",
                "submit_time": {"set": True, "infinite": False, "number": 200},
                "eligible_time": {"set": True, "number": 200},
                "start_time": {"set": True, "number": 260},
                "tres_per_node": "gres:gpu:a100:4",
                "node_count": {"set": True, "number": 2},
                "restart_cnt": {"set": True, "number": 1},
            }
        ]
    }
    a = parse.squeue_json(json.dumps(old))[0]
    b = parse.squeue_json(json.dumps(new))[0]
    assert (a.state, a.submit, a.eligible, a.start, a.gpus, a.restarts) == ("PENDING", 100.0, 110.0, None, 2, 0)
    assert (b.state, b.submit, b.start, b.gpus, b.restarts) == ("RUNNING", 200.0, 260.0, 8, 1)


def test_squeue_text_fallback() -> None:
    line = "12|gpu|PENDING|Priority|2026-11-30T03:05:50|N/A|carol|gres:gpu:2|3|a|b|c"
    j = parse.squeue_text(line + "\n")[0]
    assert (j.job_id, j.user, j.state, j.start, j.gpus, j.name) == ("12", "carol", "PENDING", None, 6, "a|b|c")
    assert j.submit == t("2026-11-30T03:05:50")


def test_sacct_with_its_own_separator() -> None:
    sep = parse.SACCT_SEP
    rows = [
        sep.join(
            [
                "7",
                "c1",
                "dave",
                "gpu",
                "CANCELLED by 1001",
                "2026-11-30T01:00:00",
                "2026-11-30T01:00:00",
                "2026-11-30T01:00:05",
                "2026-11-30T02:00:00",
                "billing=1,gres/gpu=1",
                "0:15",
                "2",
                "pi-dave",
                "normal",
                "a|b",
            ]
        ),
        sep.join(
            [
                "7.batch",
                "c1",
                "",
                "",
                "CANCELLED",
                "Unknown",
                "Unknown",
                "Unknown",
                "Unknown",
                "",
                "0:15",
                "0",
                "pi-dave",
                "normal",
                "batch",
            ]
        ),
        sep.join(
            [
                "8",
                "c1",
                "erin",
                "gpu",
                "RUNNING",
                "2026-11-30T01:00:00",
                "2026-11-30T01:00:00",
                "2026-11-30T01:00:05",
                "Unknown",
                "",
                "0:0",
                "0",
                "pi-erin",
                "",
                "x",
            ]
        ),
    ]
    jobs = parse.sacct("\n".join(rows))
    assert len(jobs) == 1
    j = jobs[0]
    assert (j.job_id, j.state, j.name, j.gpus, j.restarts, j.cluster) == ("7", "CANCELLED", "a|b", 1, 2, "c1")
    assert j.start == t("2026-11-30T01:00:05")
    assert (j.account, j.qos) == ("pi-dave", "normal")


@pytest.mark.parametrize(
    ("args", "gpus"),
    [
        (("cpu=4,gres/gpu=3",), 3),
        (("cpu=4,gres/gpu:h100=2",), 2),
        (("", "gres:gpu:4"), 4),
        (("", "", "gres:gpu:h100:2", 3), 6),
        (("cpu=4",), 0),
        (("", "", "gres:gpu:2(S:0)", 1), 2),
    ],
)
def test_gpus_requested(args: tuple[object, ...], gpus: int) -> None:
    assert parse.gpus_requested(*args) == gpus  # type: ignore[arg-type]
