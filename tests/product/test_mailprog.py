"""The end-of-job summary in Slurm's job mail (issue 24): deploy/slurm/gpuledger-mailprog as the
test Slurm's MailProg, a job with --mail-type=BEGIN,END, and a mailer that keeps what it is given.
The END mail carries `gpuledger job`'s summary of that job (from an embedded history holding its
minutes); the BEGIN mail has no summary; a job gpuledger has no figures for still gets its mail,
with the one-line reason in it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.jobs import JobKey
from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow
from tests.support.paths import REPO
from tests.support.slurm import SlurmCluster
from tests.support.wait import wait_until

SCRIPT = REPO / "deploy" / "slurm" / "gpuledger-mailprog"


def _mails(box: Path) -> list[str]:
    """The mails delivered (a mail is written to a .tmp file, then moved: only whole ones count)."""
    return sorted(p.read_text() for p in box.glob("mail-*") if p.suffix != ".tmp") if box.exists() else []


@pytest.fixture
def slurm_with_mail(tmp_path: Path) -> Iterator[tuple[SlurmCluster, Path, Path]]:
    """A test Slurm whose MailProg is gpuledger's, set up as /etc/default would (a wrapper here:
    slurmctld passes MailProg only the job's environment), and a mailer writing each mail to a file."""
    box, hist = tmp_path / "mailbox", tmp_path / "history.db"
    box.mkdir()
    mailer = tmp_path / "mailer"
    mailer.write_text(f'#!/bin/sh\nf={box}/mail-$$\n{{ echo "args: $*"; cat; }} > "$f.tmp" && mv "$f.tmp" "$f"\n')
    config = tmp_path / "gpuledger.toml"
    config.write_text(f'[analytics]\nsource = "embedded"\nhistory = "{hist}"\n[cost]\ncurrency = "EUR"\n')
    defaults = tmp_path / "defaults"
    gpuledger = tmp_path / "gpuledger"
    gpuledger.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m gpuledger "$@"\n')
    defaults.write_text(f"GPULEDGER={gpuledger}\nGPULEDGER_CONFIG={config}\nGPULEDGER_MAILER={mailer}\n")
    wrapper = tmp_path / "mailprog"
    wrapper.write_text(f'#!/bin/sh\nGPULEDGER_MAILPROG_DEFAULTS={defaults} exec {SCRIPT} "$@"\n')
    for f in (mailer, gpuledger, wrapper):
        f.chmod(0o755)
    (tmp_path / "slurm").mkdir()
    c = SlurmCluster(tmp_path / "slurm", mail_prog=str(wrapper))
    try:
        yield c, box, hist
    finally:
        c.stop()


def _history(path: Path, job: str) -> None:
    """Ten minutes of job ``job`` of root's on one H200, half busy, ending now."""
    dev = DeviceInfo(0, "GPU-mail-0", "NVIDIA H200", "0000:01:00.0")
    end = int(time.time()) // 60 * 60
    base = dict.fromkeys(ROLLUP_FIELDS, None) | {"sampled_seconds": 60.0, "busy_seconds": 30.0, "energy_joules": 2.4e4}
    rows: list[MinuteRow | JobMinuteRow] = []
    for k in range(10):
        m = end - 600 + 60 * k
        rows += [MinuteRow(m, dev, base), JobMinuteRow(m, dev.uuid, JobKey(job, "root"), 60.0, 30.0, 2.4e4, 60.0)]
    w = history.HistoryWriter(path, hostname="node1")
    w.submit(rows)
    w.stop()


@pytest.mark.integration
def test_the_end_mail_carries_the_jobs_summary(slurm_with_mail: tuple[SlurmCluster, Path, Path]) -> None:
    c, box, hist = slurm_with_mail
    job = c.sbatch("-n", "1", "--mail-type=BEGIN,END", "--mail-user=root", "--wrap", "sleep 3")
    _history(hist, job)
    assert wait_until(lambda: len(_mails(box)) >= 2, 60), _mails(box)
    began = next(m for m in _mails(box) if "Began" in m)
    ended = next(m for m in _mails(box) if "Ended" in m)
    assert began.splitlines()[0].startswith("args: -s Slurm Job_id=") and began.rstrip().endswith("root")
    assert "GPU-hours held" not in began  # no summary before the job ran
    assert f"Job: {job}" in ended and "GPU-hours held: 0.2 h" in ended and "Busy: 50.0 %" in ended
    assert "Cost:" in ended and "EUR" in ended


@pytest.mark.integration
def test_a_job_without_figures_still_gets_its_mail(slurm_with_mail: tuple[SlurmCluster, Path, Path]) -> None:
    c, box, _ = slurm_with_mail
    job = c.sbatch("-n", "1", "--mail-type=END", "--mail-user=root", "--wrap", "true")
    assert wait_until(lambda: len(_mails(box)) >= 1, 60)
    (mail,) = _mails(box)
    assert "Ended" in mail.splitlines()[0] and job in mail
    body = mail.splitlines()[1:]
    assert len(body) == 1 and body[0].startswith("gpuledger job:"), mail  # the reason, one line
