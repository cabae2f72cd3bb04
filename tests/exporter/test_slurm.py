"""The Slurm watcher against a real single-node Slurm: jobs that wait, fail, get cancelled while
pending and requeued; and against commands that are missing or hang."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import history
from exporter.app import Exporter
from exporter.config import SlurmSettings, load
from exporter.readers.fake import FakeReader
from exporter.slurm.watcher import SlurmWatcher
from tests.support.http import http_get
from tests.support.metrics import one, parse_metrics
from tests.support.slurm import SlurmCluster
from tests.support.tools import require_binary
from tests.support.wait import wait_until

HOSTILE = 'first "q" \\ <script>x</script> ü'
GPU = (("partition", "gpu"),)  # the labels of the partition's series, as parse_metrics keys them


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    (tmp_path / "slurm").mkdir()
    c = SlurmCluster(tmp_path / "slurm")
    yield c
    c.stop()


def metrics(exp: Exporter) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    exp.sampler.tick()  # publish the watcher's latest state
    return parse_metrics(http_get(exp.url + "/metrics")[2].decode())


def state(c: SlurmCluster, job: str) -> str:
    return c.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()


@pytest.mark.integration
def test_queue_wait_failures_cancellations_and_requeues(cluster: SlurmCluster, tmp_path: Path) -> None:
    c = cluster
    settings = load(
        None,
        {
            "web": {"listen": "127.0.0.1:0"},
            "history": {"path": str(tmp_path / "h.db")},
            "exporter": {"sample_interval": 0.2},
            "slurm": {"enabled": True, "interval": 1, "conf": str(c.conf)},
        },
    )
    exp = Exporter(settings, reader=FakeReader(1))
    exp.start()
    try:
        submitted = time.time()
        a = c.sbatch("-n", str(c.cpus), "--job-name", HOSTILE, "--wrap", "sleep 6")
        b = c.sbatch("-n", str(c.cpus), "--wrap", "sleep 2")
        f = c.sbatch("-n", "1", "--wrap", "exit 3")
        x = c.sbatch("-n", str(c.cpus), "--wrap", "sleep 1")
        assert wait_until(lambda: state(c, a) == "RUNNING")
        time.sleep(2.5)  # the oldest job has waited a while
        # the watcher polls every second: wait for a poll that saw the queue as it is now
        assert wait_until(lambda: metrics(exp).get("gpuledger_queue_pending_jobs", {}).get(GPU) == 3.0)
        m = metrics(exp)
        assert one(m, "gpuledger_queue_source_up", source="squeue") == 1.0
        assert one(m, "gpuledger_queue_pending_jobs", partition="gpu") == 3.0  # b, f, x wait behind a
        assert one(m, "gpuledger_queue_running_jobs", partition="gpu") == 1.0
        oldest = one(m, "gpuledger_queue_oldest_pending_seconds", partition="gpu")
        assert 2.0 <= oldest <= time.time() - submitted + 1  # Slurm's times are whole seconds
        assert one(m, "gpuledger_queue_pending_gpus", partition="gpu") == 0.0  # no job asked for GPUs
        c.run("scancel", x, check=True)  # cancelled while pending: never a wait sample

        assert wait_until(lambda: c.jobcomp.exists() and len(c.jobcomp.read_text().splitlines()) >= 4, 60)
        finished = (("COMPLETED", 2.0), ("FAILED", 1.0), ("CANCELLED", 1.0))

        def all_finished() -> bool:
            counts = metrics(exp).get("gpuledger_jobs_finished_total", {})
            return all(counts.get((*GPU, ("state", s))) == n for s, n in finished)

        assert wait_until(all_finished)
        m = metrics(exp)
        assert one(m, "gpuledger_jobs_finished_total", partition="gpu", state="COMPLETED") == 2.0
        assert one(m, "gpuledger_jobs_finished_total", partition="gpu", state="FAILED") == 1.0
        assert one(m, "gpuledger_jobs_finished_total", partition="gpu", state="CANCELLED") == 1.0
        assert one(m, "gpuledger_queue_source_up", source="jobcomp") == 1.0
        assert one(m, "gpuledger_queue_wait_seconds_count", partition="gpu") == 3.0  # a, b, f started
        waits = m["gpuledger_queue_wait_seconds_sum"]

        # the history holds every finished job; its times give the waits the histogram summed
        assert exp.history is not None
        exp.history.stop()  # flush, then read what it wrote
        exp.history = None
        db = history.connect(tmp_path / "h.db", readonly=True)
        jobs = {j.job_id: j for j in history.finished_jobs(db, 0, 10**10)}
        assert set(jobs) == {a, b, f, x}
        assert jobs[a].name == HOSTILE and jobs[a].user == "root" and jobs[a].state == "COMPLETED"
        assert jobs[f].state == "FAILED" and jobs[f].exit_code.startswith("3:")
        assert jobs[x].state == "CANCELLED" and jobs[x].start is None
        started = [jobs[k] for k in (a, b, f)]
        expected = sum(j.start - j.submit for j in started if j.start is not None and j.submit is not None)
        assert sum(waits.values()) == pytest.approx(expected)
        wait_b = (jobs[b].start or 0) - (jobs[b].submit or 0)
        assert 6 - 1 <= wait_b  # b waited for a's 6 s
        assert (jobs[b].start or 0) >= jobs[a].end  # and started once a ended

        r = c.sbatch("-n", "1", "--requeue", "--wrap", "sleep 30")
        assert wait_until(lambda: state(c, r) == "RUNNING")
        time.sleep(1.5)
        c.run("scontrol", "requeue", r, check=True)
        assert wait_until(lambda: one(metrics(exp), "gpuledger_jobs_requeued_total", partition="gpu") == 1.0)
        c.run("scancel", r)

        text = http_get(exp.url + "/metrics")[2].decode()
        res = subprocess.run(
            [require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        exp.stop()


def test_missing_or_hanging_commands_set_source_up_0_and_the_watcher_carries_on(tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    missing = SlurmWatcher(SlurmSettings(squeue="/no/such/squeue", sacct="/no/sacct", scontrol="/no/scontrol"), None)
    missing.poll()
    assert missing.snapshot().sources == {"squeue": False, "accounting": False}
    stuck = SlurmWatcher(SlurmSettings(squeue=str(hang), sacct=str(hang), scontrol=str(hang), command_timeout=1), None)
    polled = threading.Thread(target=stuck.poll)
    polled.start()
    # three 1 s timeouts, not three 30 s hangs: done well before the first hang would end
    assert wait_until(lambda: not polled.is_alive(), 25)
    assert stuck.snapshot().sources["squeue"] is False
    stuck.poll()  # and again next time: nothing broke
    assert stuck.snapshot().pending_jobs == {}


def test_accounting_jobcomp_without_a_file_asks_slurm_conf_for_it(
    cluster: SlurmCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``accounting = "jobcomp"`` and no ``jobcomp_file``: the file is slurm.conf's JobCompLoc
    (once asserted on every poll, a traceback each 15 s and no finished jobs)."""
    c = cluster
    job = c.sbatch("--wrap", "true")
    assert wait_until(lambda: c.jobcomp.exists() and job in c.jobcomp.read_text(), 60)
    kept: list[str] = []
    w = SlurmWatcher(
        SlurmSettings(enabled=True, conf=c.conf, accounting="jobcomp"), lambda js: kept.extend(j.job_id for j in js)
    )
    w.poll()
    assert job in kept and w.snapshot().sources.get("jobcomp") is True
    # a slurm.conf without jobcomp/filetxt: accounting down, one ERROR line over polls, no traceback
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'JobCompType             = (null)'\n")
    scontrol.chmod(0o755)
    bare = SlurmWatcher(SlurmSettings(enabled=True, conf=c.conf, accounting="jobcomp", scontrol=str(scontrol)), None)
    with caplog.at_level("DEBUG", logger="exporter.slurm.watcher"):
        for _ in range(3):
            bare.poll()
    assert bare.snapshot().sources["accounting"] is False
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert (
        len(errors) == 1
        and "no jobcomp/filetxt" in errors[0].getMessage()
        and not any(r.exc_info for r in caplog.records)
    )
