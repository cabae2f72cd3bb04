"""A job name cannot forge a finished-job record (issue 24): slurmctld writes the name raw into its
jobcomp line, so ``-J $'train\\nJobId=2002 UserId=bob(1002) ...'`` makes a line that reads as bob's
job. The split record is joined back where it can be (``parse.jobcomp_records``), and every record
is checked against squeue's listing (``exporter.slurm.verify``): unit cases, a hypothesis property,
the watcher on a fake clock, and a real single-node Slurm."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import states
from exporter.config import SlurmSettings
from exporter.slurm import parse, verify
from exporter.slurm.records import FinishedJob
from exporter.slurm.watcher import SlurmWatcher
from tests.support.slurm import SlurmCluster
from tests.support.wait import wait_until

T = 1_800_000_000.0  # the fake clock's start


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def tail(end: float, account: str, state: str = "COMPLETED", start: float | None = None) -> str:
    """What slurmctld writes after a job's name (jobcomp/filetxt, 22.05)."""
    start = end - 60 if start is None else start
    return (
        f"JobState={state} Partition=gpu TimeLimit=UNLIMITED StartTime={stamp(start)} EndTime={stamp(end)} "
        f"NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,node=1,billing=1,gres/gpu=1 "
        f"Account={account} QOS= WcKey= Cluster=unknown SubmitTime={stamp(start - 10)} "
        f"EligibleTime={stamp(start - 10)} DerivedExitCode=0:0 ExitCode=0:0 "
    )


def line(job: str, user: str, name: str, end: float, account: str, **kw: object) -> str:
    return f"JobId={job} UserId={user}(1001) GroupId={user}(1001) Name={name} " + tail(end, account, **kw)  # type: ignore[arg-type]


FORGED = "train\nJobId=2002 UserId=bob(1002) GroupId=bob(1002) Name=x"  # alice's job name


# --- joining a split record ---------------------------------------------------------------


def test_a_name_with_a_newline_keeps_its_record() -> None:
    data = (line("5", "ada", "a\nb c", T, "pi-ada") + "\n" + line("6", "ada", "n", T, "pi-b") + "\n").encode()
    records, used = parse.jobcomp_records(data)
    assert used == len(data)
    jobs = [parse.jobcomp_line(r) for r in records]
    assert [(j.job_id, j.name, j.account) for j in jobs if j] == [("5", "a\nb c", "pi-ada"), ("6", "n", "pi-b")]


def test_a_line_a_name_spells_is_a_record_of_its_own_and_the_head_it_cut_off_is_nothing() -> None:
    data = (line("2001", "alice", FORGED, T, "pi-alice") + "\n").encode()
    records, _ = parse.jobcomp_records(data)
    jobs = [parse.jobcomp_line(r) for r in records]
    assert jobs[0] is None  # alice's head: no EndTime
    forged = jobs[1]
    assert forged is not None and (forged.job_id, forged.user, forged.account) == ("2002", "bob", "pi-alice")


def test_a_head_whose_end_is_not_written_yet_waits_for_the_next_read() -> None:
    whole = line("7", "ada", "n", T, "pi") + "\n"
    head = "JobId=8 UserId=ada(1) GroupId=ada(1) Name=half\nof a name\n"
    records, used = parse.jobcomp_records((whole + head).encode())
    assert len(records) == 1 and used == len(whole.encode())
    rest = "more " + tail(T, "pi-8") + "\n"
    records, used = parse.jobcomp_records((head + rest).encode())
    (j,) = [parse.jobcomp_line(r) for r in records]
    assert j is not None and (j.job_id, j.name, j.account) == ("8", "half\nof a name\nmore", "pi-8")
    assert used == len((head + rest).encode())


def test_a_head_never_completed_is_given_up_after_its_lines() -> None:
    head = "JobId=9 UserId=ada(1) GroupId=ada(1) Name=x\n" + "y\n" * (parse.MAX_RECORD_LINES + 3)
    records, used = parse.jobcomp_records(head.encode())
    assert used == len(head) and [parse.jobcomp_line(r) for r in records] == [None] * len(records)


# --- the check against squeue --------------------------------------------------------------


def finished(job: str = "2002", user: str = "bob", end: float = T, submit: float | None = T - 100) -> FinishedJob:
    return FinishedJob("", job, "x", user, "gpu", "COMPLETED", submit, submit, end - 60, end, 1, "0:0", 0, "pi-x", "")


def listed(
    user: str = "bob", state: str = states.RUNNING, start: float | None = T - 500, at: float = T + 15
) -> verify.Listed:
    return verify.Listed(user, "pi-bob", "gpu", "normal", state, start, at)


@pytest.mark.parametrize(
    ("record", "seen", "since", "why"),
    [
        (finished(user="mallory"), listed(), T - 1000, verify.NOT_THEIRS),
        (finished(), listed(), T - 1000, verify.STILL_RUNNING),  # bob's job runs on after the record's end
        (finished(), None, T - 1000, verify.NEVER_LISTED),  # submitted while squeue answered, never listed
        (finished(), listed(state=states.COMPLETED), T - 1000, ""),  # ended: squeue agrees
        (finished(), listed(start=T + 5), T - 1000, ""),  # requeued: started again after that end
        (finished(), listed(at=T), T - 1000, ""),  # listed before the end: it may have ended since
        (finished(), None, T, ""),  # submitted before the watcher looked: nothing can check it
        (finished(), None, None, ""),  # squeue fails now: nothing can check it
        (finished(submit=None), None, T - 1000, verify.NEVER_LISTED),  # submit unknown: its start counts
        (finished(), verify.Listed("", "", "", "", "", None, T + 15), T - 1000, ""),  # a split squeue record
    ],
)
def test_a_record_is_checked_against_squeue(
    record: FinishedJob, seen: verify.Listed | None, since: float | None, why: str
) -> None:
    backed, reason = verify.check(record, seen, since)
    assert reason == why and (backed is None) == bool(why)


def test_the_schedulers_labels_win_over_the_records() -> None:
    backed, _ = verify.check(finished(), listed(state=states.COMPLETED), T - 1000)
    assert backed is not None and (backed.user, backed.account, backed.partition, backed.qos) == (
        "bob",
        "pi-bob",
        "gpu",
        "normal",
    )
    assert (backed.state, backed.end) == ("COMPLETED", T)  # times and state stay the record's


users = st.sampled_from(["alice", "bob", ""])
times = st.floats(T - 3600, T + 3600)


@settings(max_examples=300, deadline=None)
@given(
    job_user=users.filter(bool),
    seen_user=users,
    state=st.sampled_from([states.RUNNING, states.PENDING, states.COMPLETED, states.CANCELLED, ""]),
    start=st.none() | times,
    end=times,
    at=times,
    submit=st.none() | times,
    since=st.none() | times,
    is_listed=st.booleans(),
)
def test_a_record_that_passes_carries_the_schedulers_user_and_one_squeue_backs_always_passes(
    job_user: str,
    seen_user: str,
    state: str,
    start: float | None,
    end: float,
    at: float,
    submit: float | None,
    since: float | None,
    is_listed: bool,
) -> None:
    record = dataclasses.replace(finished(user=job_user, end=end, submit=submit), start=end - 60)
    seen = verify.Listed(seen_user, "pi-s", "gpu", "", state, start, at) if is_listed else None
    backed, why = verify.check(record, seen, since)
    assert (backed is None) == bool(why) and why in ("", *verify.REASONS)
    if backed is not None and seen is not None and seen.user:
        assert backed.user == seen.user and backed.account == "pi-s"
    consistent = seen is not None and seen.user in ("", job_user) and state != states.RUNNING
    if consistent:
        assert backed is not None  # what squeue backs is never refused
    if seen is None and since is not None and submit is not None and submit <= since:
        assert backed is not None  # before the watcher looked: kept as written


# --- the watcher on a fake clock -----------------------------------------------------------


def squeue_job(job_id: int, user: str, account: str, state: str, start: float) -> dict[str, object]:
    return {
        "job_id": job_id,
        "name": "wrap",
        "user_name": user,
        "account": account,
        "partition": "gpu",
        "qos": "",
        "submit_time": int(start) - 10,
        "eligible_time": int(start) - 10,
        "start_time": int(start) if state != "PENDING" else 0,
        "job_state": state,
        "state_reason": "None",
        "restart_cnt": 0,
        "node_count": 1,
    }


class Fake:
    def __init__(self, tmp_path: Path) -> None:
        self.dir, self.now = tmp_path, T
        self.jobcomp = tmp_path / "jobcomp.txt"
        self.jobcomp.write_text("")
        squeue = tmp_path / "squeue"
        squeue.write_text(f"#!/bin/sh\ncat {tmp_path}/queue\n")
        squeue.chmod(0o755)
        self.queue()
        self.kept: list[FinishedJob] = []
        s = SlurmSettings(enabled=True, squeue=str(squeue), accounting="jobcomp", jobcomp_file=self.jobcomp)
        self.w = SlurmWatcher(s, self.kept.extend, lambda: self.now)

    def queue(self, *jobs: dict[str, object]) -> None:
        (self.dir / "queue").write_text(json.dumps({"jobs": list(jobs)}))

    def write(self, text: str) -> None:
        with self.jobcomp.open("a") as f:
            f.write(text + "\n")


def test_alices_job_name_cannot_end_bobs_job_or_move_it_to_her_account(tmp_path: Path) -> None:
    f = Fake(tmp_path)
    bob = squeue_job(2002, "bob", "pi-bob", "RUNNING", T - 600)
    alice = squeue_job(2001, "alice", "pi-alice", "RUNNING", T - 300)
    f.queue(bob, alice)
    f.w.poll()
    f.now = T + 30
    f.write(line("2001", "alice", FORGED, T + 20, "pi-alice"))  # alice's job ends at T + 20
    f.queue(bob, {**alice, "job_state": "COMPLETED"})
    f.w.poll()
    snap = f.w.snapshot()
    assert snap.job_info["2002"] == ("bob", "pi-bob", "gpu", "")  # bob's job: still running, still his account
    assert snap.refused == {verify.STILL_RUNNING: 1}
    assert [j.job_id for j in f.kept] == []  # the forged record is not stored; alice's head is nothing
    assert snap.finished == {}


def test_a_record_of_a_job_squeue_never_listed_or_of_another_user_is_refused(tmp_path: Path) -> None:
    f = Fake(tmp_path)
    f.queue(squeue_job(7, "carol", "pi-carol", "RUNNING", T - 600))
    f.w.poll()
    f.now = T + 30
    f.queue(squeue_job(7, "carol", "pi-carol", "COMPLETED", T - 600))
    f.write(line("7", "bob", "n", T + 20, "pi-bob"))  # carol's job claimed by bob
    f.write(line("4242", "bob", "n", T + 20, "pi-bob", start=T + 15))  # submitted at T + 5: while squeue answered
    f.write(line("8", "ada", "n", T + 25, "pi-ada", start=T - 7200))  # submitted before: cannot be checked, kept
    f.w.poll()
    assert f.w.snapshot().refused == {verify.NOT_THEIRS: 1, verify.NEVER_LISTED: 1}
    assert [(j.job_id, j.user, j.account) for j in f.kept] == [("8", "ada", "pi-ada")]


def test_a_record_squeue_backs_takes_the_schedulers_account(tmp_path: Path) -> None:
    f = Fake(tmp_path)
    f.queue(squeue_job(11, "ada", "pi-ada", "RUNNING", T - 600))
    f.w.poll()
    f.now = T + 30
    f.queue(squeue_job(11, "ada", "pi-ada", "COMPLETED", T - 600))
    f.write(line("11", "ada", "n Account=pi-cheap", T + 20, "pi-ada"))
    f.write(line("11", "ada", "n", T + 20, "pi-other"))  # a record saying another account: squeue's wins
    f.w.poll()
    assert {(j.job_id, j.account) for j in f.kept} == {("11", "pi-ada")}
    assert f.w.snapshot().refused == {}


# --- a real Slurm --------------------------------------------------------------------------


@pytest.mark.integration
def test_real_slurm_a_job_name_with_a_newline_forges_nothing(cluster: SlurmCluster) -> None:
    """slurmctld writes the attacker's name raw (the line splits); the watcher refuses the forged
    record, the victim's job keeps its account until it ends, and then its real record is kept."""
    c = cluster
    kept: list[FinishedJob] = []
    w = SlurmWatcher(SlurmSettings(enabled=True, conf=c.conf, interval=1, finished_info_seconds=600), kept.extend)
    victim = c.sbatch("-n", "1", "--account", "pi-victim", "-J", "train", "--wrap", "sleep 14")

    def running() -> bool:
        w.poll()
        return victim in w.snapshot().job_info

    assert wait_until(running, 30)
    name = f"x\x1b\x07\nJobId={victim} UserId=root(0) GroupId=root(0) Name=y"
    attacker = c.sbatch("-n", "1", "--account", "pi-forger", "-J", name, "--wrap", "sleep 3")
    assert wait_until(lambda: c.jobcomp.exists() and f"\nJobId={victim} " in c.jobcomp.read_text(), 40)
    text = c.jobcomp.read_text()
    assert f"JobId={attacker} " in text and "Account=pi-forger" in text  # the split, as slurmctld wrote it
    time.sleep(3)  # squeue's next look comes well after the forged end
    w.poll()
    snap = w.snapshot()
    assert snap.refused == {verify.STILL_RUNNING: 1}, (snap.refused, text)
    assert snap.job_info[victim] == ("root", "pi-victim", "gpu", "")
    assert all(j.job_id != victim for j in kept)

    def victim_ended() -> bool:
        w.poll()
        return any(j.job_id == victim for j in kept)

    assert wait_until(victim_ended, 40)
    (real,) = [j for j in kept if j.job_id == victim]
    assert (real.user, real.account, real.state) == ("root", "pi-victim", "COMPLETED")
    assert w.snapshot().refused == {verify.STILL_RUNNING: 1}
