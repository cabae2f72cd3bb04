"""A process's environment is its owner's to write: what it claims of its Slurm job (``SLURM_JOB_ID``,
``SLURM_JOB_ACCOUNT``, ``_PARTITION``, ``_QOS``) never moves another job, or that job's bill. The
cgroup says which job a process is in; a process outside every job cgroup, on a node that has them,
is in no job; the job's own processes, not the first claim read, give its attributes; and a claim
that contradicts them is counted (``gpuledger_job_attribute_conflicts_total``). Fabricated /proc
trees with hostile environments."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.attribution.attributor import Attribution
from exporter.attribution.procfs import RESCAN_SECONDS, Owner, ProcReader, Users
from exporter.attribution.shares import shares
from exporter.readers import Process
from tests.support.procfs import PLAIN_USER, SLURM_V1, make_proc

PASSWD = "alice:x:1001:1001::/:/bin/sh\nbob:x:1002:1002::/:/bin/sh\nmallory:x:1666:1666::/:/bin/sh\n"
BOB = {"SLURM_JOB_ID": "2002", "SLURM_JOB_ACCOUNT": "pi-bob", "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_QOS": "normal"}
FORGED = {"SLURM_JOB_ID": "2002", "SLURM_JOB_ACCOUNT": "x", "SLURM_JOB_PARTITION": "cheap", "SLURM_JOB_QOS": "high"}
NONE = {"job_id": 0, "account": 0, "partition": 0, "qos": 0}


def v2(job: str) -> str:
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


def _reader(root: Path, clock: list[float] | None = None) -> ProcReader:
    (root / "passwd").write_text(PASSWD)
    if clock is None:
        return ProcReader(root / "proc", Users(root / "passwd"))
    return ProcReader(root / "proc", Users(root / "passwd"), clock=lambda: clock[0])


def _job(o: Owner | None) -> tuple[str, str, str, str, str]:
    assert o is not None
    return (o.job_id, o.user, *o.slurm())


def test_a_process_outside_every_job_cgroup_cannot_join_bobs_job(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 500, uid=1666, cgroup=PLAIN_USER, environ=FORGED)  # mallory, read first
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ=BOB)  # bob's job, in its cgroup
    r = _reader(tmp_path)
    assert _job(r.owner(500)) == ("", "mallory", "", "", "")  # in no job: billed as mallory's own
    assert _job(r.owner(700)) == ("2002", "bob", "pi-bob", "gpu", "normal")  # bob's job keeps its account
    assert r.conflicts() == {**NONE, "job_id": 1}
    for _ in range(3):  # read again each round: counted once per process
        assert _job(r.owner(500)) == ("", "mallory", "", "", "")
    assert r.conflicts() == {**NONE, "job_id": 1}


def test_the_job_cgroups_of_other_jobs_are_enough_to_refuse_the_claim(tmp_path: Path) -> None:
    """Bob's job runs on another node; alice's job here is in its cgroup (and holds no GPU: it is never
    asked about): the node has job cgroups, so an environment alone names no job."""
    proc = tmp_path / "proc"
    make_proc(proc, 500, uid=1666, cgroup=PLAIN_USER, environ=FORGED)
    make_proc(proc, 800, uid=1001, cgroup=SLURM_V1)
    r = _reader(tmp_path)
    assert _job(r.owner(500)) == ("", "mallory", "", "", "")
    assert r.conflicts()["job_id"] == 1


def test_the_whole_gpu_round_bills_mallory_not_bob(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 500, uid=1666, cgroup=PLAIN_USER, environ=FORGED)
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ=BOB)
    (tmp_path / "passwd").write_text(PASSWD)
    a = Attribution(proc, tmp_path / "passwd")
    procs = [Process(500, 30 << 30), Process(700, 10 << 30)]
    held = shares(procs, a.owners([500, 700]), None, None)
    got = {(k.job_id, k.user, *k.slurm()): share for k, share in held.items()}
    assert got == {("", "mallory", "", "", ""): 0.75, ("2002", "bob", "pi-bob", "gpu", "normal"): 0.25}
    assert a.conflicts() == {**NONE, "job_id": 1}


def test_the_jobs_own_processes_give_its_attributes_and_other_claims_are_counted(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ=BOB)
    make_proc(proc, 701, uid=1002, cgroup=v2("2002"), environ={**BOB, "SLURM_JOB_ACCOUNT": "pi-other"})
    make_proc(proc, 702, uid=1002, cgroup=v2("2002"), environ={**FORGED})  # every attribute another
    make_proc(proc, 703, uid=1002, cgroup=v2("2002"), environ={"SLURM_JOB_ID": "2002"})  # names none: no conflict
    # in job 2002's cgroup, claiming job 4242 and its account: job 2002, the claim not used
    make_proc(proc, 704, uid=1002, cgroup=v2("2002"), environ={"SLURM_JOB_ID": "4242", "SLURM_JOB_ACCOUNT": "pi-a"})
    r = _reader(tmp_path)
    assert {_job(r.owner(pid)) for pid in (700, 701, 702, 703, 704)} == {("2002", "bob", "pi-bob", "gpu", "normal")}
    assert r.conflicts() == {"job_id": 1, "account": 2, "partition": 1, "qos": 1}


def test_a_process_read_before_its_jobs_own_gets_their_attributes(tmp_path: Path) -> None:
    """The first process read of a job names nothing; the next one does: the first learns them."""
    proc = tmp_path / "proc"
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ={"PATH": "/bin"})
    make_proc(proc, 701, uid=1002, cgroup=v2("2002"), environ=BOB)
    r = _reader(tmp_path)
    assert _job(r.owner(700)) == ("2002", "bob", "", "", "")
    assert _job(r.owner(701)) == ("2002", "bob", "pi-bob", "gpu", "normal")
    assert _job(r.owner(700)) == ("2002", "bob", "pi-bob", "gpu", "normal")
    assert r.conflicts() == NONE


def test_without_job_cgroups_the_environment_names_the_job_and_the_first_claim_holds(tmp_path: Path) -> None:
    """Slurm without its cgroup plugin (proctrack/linuxproc): nothing better names a job than its
    environment; the job's first process that names its attributes gives them, and later claims
    that differ are counted."""
    proc = tmp_path / "proc"
    make_proc(proc, 700, uid=1002, cgroup=PLAIN_USER, environ=BOB)
    make_proc(proc, 701, uid=1002, cgroup=PLAIN_USER, environ={**BOB, "SLURM_JOB_QOS": "high"})
    r = _reader(tmp_path)
    assert _job(r.owner(700)) == ("2002", "bob", "pi-bob", "gpu", "normal")
    assert _job(r.owner(701)) == ("2002", "bob", "pi-bob", "gpu", "normal")
    assert r.conflicts() == {**NONE, "qos": 1}


def test_a_node_is_looked_over_again_for_job_cgroups_by_its_clock(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    now = [1000.0]
    make_proc(proc, 500, uid=1666, cgroup=PLAIN_USER, environ=FORGED)
    r = _reader(tmp_path, now)
    assert _job(r.owner(500))[0] == "2002"  # no job cgroup anywhere: the environment is all there is
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ=BOB)  # a job in a cgroup (not read yet)
    now[0] += RESCAN_SECONDS - 1
    assert _job(r.owner(500))[0] == "2002"  # not looked over yet
    now[0] += 1
    assert _job(r.owner(500)) == ("", "mallory", "", "", "")  # now it is: the claim is refused
    assert _job(r.owner(700)) == ("2002", "bob", "pi-bob", "gpu", "normal")  # and bob's own give the attributes
    r.forget_except({700})
    assert set(r._jobs) == {"2002"}


def test_the_schedulers_record_beats_the_jobs_own_claims(tmp_path: Path) -> None:
    """On the node that watches Slurm: squeue's account and partition for job 2002 (its QOS unknown)."""
    proc = tmp_path / "proc"
    make_proc(
        proc, 700, uid=1002, cgroup=v2("2002"), environ={**BOB, "SLURM_JOB_ACCOUNT": "x", "SLURM_JOB_QOS": "high"}
    )
    make_proc(proc, 701, uid=1002, cgroup=v2("2002"), environ=BOB)
    (tmp_path / "passwd").write_text(PASSWD)
    record: dict[str, tuple[str, ...]] = {"2002": ("bob", "pi-bob", "gpu", "")}
    a = Attribution(proc, tmp_path / "passwd", scheduler=lambda: record)
    first = a.owners([700])[700]
    # the account is squeue's; the QOS of a process that lied about the account is not taken
    assert _job(first) == ("2002", "bob", "pi-bob", "gpu", "")
    a.owners([700, 701])  # 701 names a QOS, and contradicts nothing: it fills what squeue does not say
    owners = a.owners([700, 701])
    assert {_job(o) for o in owners.values()} == {("2002", "bob", "pi-bob", "gpu", "normal")}
    assert a.conflicts() == {**NONE, "account": 1, "qos": 1}  # 700's account; then its QOS, once known


def test_a_claim_found_wrong_later_is_counted_then_once(tmp_path: Path) -> None:
    """The process is read before squeue lists its job; its claim stands until the record comes."""
    proc = tmp_path / "proc"
    make_proc(proc, 700, uid=1002, cgroup=v2("2002"), environ={**BOB, "SLURM_JOB_ACCOUNT": "x"})
    (tmp_path / "passwd").write_text(PASSWD)
    record: dict[str, tuple[str, ...]] = {}
    a = Attribution(proc, tmp_path / "passwd", scheduler=lambda: record)
    assert _job(a.owners([700])[700])[2] == "x"
    assert a.conflicts() == NONE
    record["2002"] = ("bob", "pi-bob", "gpu", "normal")
    for _ in range(3):
        assert _job(a.owners([700])[700]) == ("2002", "bob", "pi-bob", "gpu", "normal")
    assert a.conflicts() == {**NONE, "account": 1}


@settings(max_examples=40, deadline=None)
@given(
    claims=st.lists(
        st.tuples(
            st.sampled_from(["2002", "4242", "9", ""]),
            st.sampled_from(["x", "pi-bob", "pi-alice", ""]),
            st.booleans(),  # inside the cgroup of the job it claims (else outside every job cgroup)
        ),
        max_size=6,
    ),
    order=st.randoms(use_true_random=False),
)
def test_no_claim_moves_a_job_or_its_account(claims: list[tuple[str, str, bool]], order: random.Random) -> None:
    """Jobs 2002 (bob, pi-bob) and 4242 (alice, pi-alice), each a process in its cgroup, and
    mallory's processes claiming any job and account, inside that job's cgroup or outside every
    one, read in any order: every job keeps its own account (a claim from inside a job's cgroup is
    its own process's, and counts only after the job's first), and no one outside joins a job."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc = root / "proc"
        for pid, uid, job, account in ((700, 1002, "2002", "pi-bob"), (800, 1001, "4242", "pi-alice")):
            make_proc(proc, pid, uid=uid, cgroup=v2(job), environ={"SLURM_JOB_ID": job, "SLURM_JOB_ACCOUNT": account})
        hostile: dict[int, tuple[str, bool]] = {}
        for i, (job, account, inside) in enumerate(claims):
            env = {k: v for k, v in (("SLURM_JOB_ID", job), ("SLURM_JOB_ACCOUNT", account)) if v}
            cgroup = v2(job) if inside and job else PLAIN_USER
            make_proc(proc, 900 + i, uid=1666, cgroup=cgroup, environ=env)
            hostile[900 + i] = (job, inside)
        pids = [700, 800, *hostile]
        order.shuffle(pids)
        r = _reader(root)
        owners = {pid: r.owner(pid) for pid in pids}
        owners.update({pid: r.owner(pid) for pid in pids})  # a second round: what is known by then
        true = {"2002": "pi-bob", "4242": "pi-alice", "9": None}
        first_inside: dict[str, bool] = {}  # job -> whether a job's own (bob's, alice's) process was read first
        for pid in pids:
            job = {700: "2002", 800: "4242"}.get(pid) or (hostile[pid][0] if hostile[pid][1] else "")
            first_inside.setdefault(job, pid in (700, 800))
        for pid, o in owners.items():
            assert o is not None
            if pid in hostile:
                job, inside = hostile[pid]
                assert o.job_id == (job if inside else ""), (pid, o)  # only a job's cgroup puts it in the job
            if o.job_id in ("2002", "4242") and first_inside[o.job_id]:
                assert o.account == true[o.job_id], (pid, o)
        outside = sum(1 for job, inside in hostile.values() if job and not inside)
        assert r.conflicts()["job_id"] == outside
