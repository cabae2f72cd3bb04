"""Idle Slurm jobs acted on (issue 24, opt-in ``[slurm] idle_action``): which jobs are idle comes
from the sampler's own per-job counters (fake GPUs, a fabricated /proc); the actions run the real
Slurm commands against the test suite's Slurm: a sleeping job is notified, then cancelled where its
partition is allowed, and refused where it is not; every action counted on /metrics."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from exporter.attribution.attributor import Attribution
from exporter.config import SlurmSettings
from exporter.readers import Process
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.slurm import commands
from exporter.slurm.idle import IdleJobs, IdlePolicy, idle_jobs
from exporter.snapshot import EMPTY, by_type
from tests.support.metrics import parse_metrics
from tests.support.procfs import make_proc
from tests.support.sampling import make_sampler
from tests.support.slurm import SlurmCluster
from tests.support.wait import wait_until


def test_a_job_is_idle_when_every_gpu_it_holds_here_is(tmp_path: Path) -> None:
    """Job 7 holds GPUs 0 and 1, job 8 GPU 2: 7 is idle only while both its GPUs are."""
    proc, passwd = tmp_path / "proc", tmp_path / "passwd"
    passwd.write_text("ann:x:1001:1001::/:/bin/sh\n")
    for pid, job in ((500, "7"), (501, "7"), (502, "8")):
        make_proc(proc, pid, uid=1001, cgroup=f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n")
    r = FakeReader(3)
    for i, g in enumerate(r.gpus):
        g.processes, g.util = [Process(500 + i, 1 << 30)], 0.0
    s = make_sampler(r)
    s.attribution = Attribution(proc, passwd)
    s.tick()
    r.advance(1.0)
    s.tick()
    first = s.snapshot
    assert idle_jobs(first, None, 0.05) == {}  # no interval yet
    r.gpus[1].util = 0.5  # one of job 7's GPUs works
    r.advance(1.0)
    s.tick()
    second = s.snapshot
    assert idle_jobs(second, first, 0.05) == {"7": False, "8": True}
    r.gpus[1].util = 0.01
    r.advance(1.0)
    s.tick()
    assert idle_jobs(s.snapshot, second, 0.05) == {"7": True, "8": True}
    s.stop()


def test_the_settings_refuse_a_cancel_without_an_allow_list_or_before_the_warning() -> None:
    with pytest.raises(ValidationError, match="needs idle_cancel_partitions"):
        SlurmSettings(idle_action="cancel")
    with pytest.raises(ValidationError, match="must be at least idle_warn_after"):
        SlurmSettings(idle_warn_after=600, idle_cancel_after=60)
    assert SlurmSettings().idle_action == "off"  # off by default


def _actions(idle: IdleJobs) -> dict[str, float]:
    text = render.render(dataclasses.replace(EMPTY, parts=by_type([idle.snapshot()]))).decode()
    return {dict(k)["action"]: v for k, v in parse_metrics(text)["gpuledger_idle_job_actions_total"].items()}


def _state(c: SlurmCluster, job: str) -> str:
    return c.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()


@pytest.mark.integration
@pytest.mark.parametrize("allowed", [True, False], ids=["allowed", "partition-not-allowed"])
def test_a_sleeping_job_is_warned_then_cancelled_or_refused(cluster: SlurmCluster, allowed: bool) -> None:
    c = cluster
    job = c.sbatch("-n", "1", "--wrap", "sleep 300")
    assert wait_until(lambda: _state(c, job) == "RUNNING", 30)
    policy = IdlePolicy("cancel", 600.0, 1800.0, frozenset({"gpu" if allowed else "debug"}), 0.05)
    idle = IdleJobs(policy, lambda argv: commands.run(argv, 10.0, c.env), "squeue", "scontrol", "scancel")
    try:
        t0 = 1_000.0
        idle.observe({job: True}, t0)
        idle.observe({job: True}, t0 + 599)
        idle.wait()
        assert _actions(idle) == {"warned": 0, "cancelled": 0, "refused": 0, "failed": 0}
        idle.observe({job: True}, t0 + 600)  # warned once
        idle.observe({job: True}, t0 + 601)
        idle.wait()
        assert _actions(idle)["warned"] == 1 and _state(c, job) == "RUNNING"
        idle.observe({job: True}, t0 + 1800)
        idle.observe({job: True}, t0 + 1801)  # acted on once per streak
        idle.wait()
        if allowed:
            assert _actions(idle) == {"warned": 1, "cancelled": 1, "refused": 0, "failed": 0}
            assert wait_until(lambda: _state(c, job) in ("", "CANCELLED", "COMPLETING"), 30)
        else:
            assert _actions(idle) == {"warned": 1, "cancelled": 0, "refused": 1, "failed": 0}
            time.sleep(1)
            assert _state(c, job) == "RUNNING"
            c.run("scancel", job)
    finally:
        idle.stop()


@pytest.mark.integration
def test_work_resets_the_streak_and_a_gone_job_fails_nothing(cluster: SlurmCluster) -> None:
    c = cluster
    job = c.sbatch("-n", "1", "--wrap", "sleep 300")
    assert wait_until(lambda: _state(c, job) == "RUNNING", 30)
    policy = IdlePolicy("cancel", 60.0, 120.0, frozenset({"gpu"}), 0.05)
    idle = IdleJobs(policy, lambda argv: commands.run(argv, 10.0, c.env), "squeue", "scontrol", "scancel")
    try:
        idle.observe({job: True}, 0.0)
        idle.observe({job: False}, 100.0)  # it worked: the streak starts again
        idle.observe({job: True}, 110.0)
        idle.observe({job: True}, 200.0)  # 90 s idle: warned, not cancelled
        idle.wait()
        assert _actions(idle)["warned"] == 1 and _actions(idle)["cancelled"] == 0
        c.run("scancel", job)
        assert wait_until(lambda: _state(c, job) in ("", "CANCELLED"), 30)
        idle.observe({job: True}, 300.0)  # the scheduler no longer lists it running: refused, not failed
        idle.wait()
        assert _actions(idle)["refused"] == 1 and _actions(idle)["failed"] == 0
    finally:
        idle.stop()


@pytest.mark.parametrize(
    ("listed", "cancelled"),
    [
        ("gpu|RUNNING|alice|1\n", True),
        ("gpu|RUNNING|alice|2\n", False),  # idle here, maybe working on the other node: never cancelled here
        ("gpu|RUNNING|alice|\n", False),  # a node count the scheduler did not give: not acted on
        ("gpu|RUNNING|alice\n", False),  # an older answer's shape
    ],
)
def test_a_job_on_more_than_one_node_is_refused_not_cancelled(listed: str, cancelled: bool) -> None:
    """Each node's exporter sees only its own GPUs: a job idle here may be busy on its other nodes.
    The scheduler's node count (squeue %D, as the real Slurm test above answers it for a one-node
    job) decides; only a one-node job is cancelled."""
    ran: list[list[str]] = []

    def run(argv: list[str]) -> str:
        ran.append(argv)
        return listed if argv[0] == "squeue" else ""

    idle = IdleJobs(IdlePolicy("cancel", 60.0, 120.0, frozenset({"gpu"}), 0.05), run, "squeue", "scontrol", "scancel")
    try:
        idle.observe({"77": True}, 0.0)
        idle.observe({"77": True}, 120.0)
        idle.wait()
    finally:
        idle.stop()
    assert ["squeue", "-h", "-j", "77", "-o", "%P|%T|%u|%D"] in ran
    assert (["scancel", "77"] in ran) is cancelled
    assert _actions(idle) == {"warned": 1, "cancelled": int(cancelled), "refused": int(not cancelled), "failed": 0}
