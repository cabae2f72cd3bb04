"""A real single-node Slurm (Debian's packages) started for tests, in a temp dir, as root.

munged, slurmctld and slurmd run in the foreground as children of the test; every client
command needs SLURM_CONF (``env``), or it goes looking for DNS SRV records.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from tests.support.http import free_port
from tests.support.tools import require_binary
from tests.support.wait import wait_until

BINARIES = ("munged", "slurmctld", "slurmd", "squeue", "sbatch", "scancel", "sinfo")


class SlurmCluster:
    def __init__(self, workdir: Path, mail_prog: str = "/bin/true") -> None:
        for b in BINARIES:
            require_binary(b)
        if os.geteuid() != 0:
            import pytest

            pytest.skip("a test Slurm needs root (slurmd); CI runs as root")
        self.dir = workdir
        self.jobcomp = workdir / "jobcomp.txt"
        self.conf = workdir / "slurm.conf"
        self.socket = workdir / "munge.socket"
        self.procs: list[subprocess.Popen[bytes]] = []
        for sub in ("state", "spool", "log"):
            (workdir / sub).mkdir()
        key = workdir / "munge.key"
        shutil.copy("/etc/munge/munge.key", key)
        key.chmod(0o400)
        ctld, d = free_port(), free_port()
        cpus = os.cpu_count() or 2
        self.cpus = cpus
        self.conf.write_text(
            f"""ClusterName=test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
SlurmctldPort={ctld}
SlurmdPort={d}
StateSaveLocation={workdir}/state
SlurmdSpoolDir={workdir}/spool
SlurmctldPidFile={workdir}/slurmctld.pid
SlurmdPidFile={workdir}/slurmd.pid
SlurmctldLogFile={workdir}/log/slurmctld.log
SlurmdLogFile={workdir}/log/slurmd.log
MailProg={mail_prog}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=gpu Nodes=node1 Default=YES MaxTime=INFINITE State=UP
"""
        )
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        log = self._log = (workdir / "log" / "daemons.log").open("w")
        self._start(
            [
                "munged",
                "-F",
                f"--socket={self.socket}",
                f"--key-file={key}",
                f"--pid-file={workdir}/munged.pid",
                f"--log-file={workdir}/log/munged.log",
                f"--seed-file={workdir}/munged.seed",
                "--force",
            ],
            log,
        )
        if not wait_until(self.socket.exists, 10):
            self.stop()
            raise AssertionError("munged did not start")
        self._start(["slurmctld", "-D", "-f", str(self.conf)], log)
        self._start(["slurmd", "-D", "-N", "node1", "-f", str(self.conf)], log)
        if not wait_until(lambda: self.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", 30):
            self.stop()
            raise AssertionError(
                f"slurm did not become idle:\n{(workdir / 'log' / 'slurmctld.log').read_text()[-3000:]}"
            )

    def _start(self, cmd: list[str], log: IO[str]) -> None:
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def run(self, *cmd: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def sbatch(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", *args, check=True)
        return out.stdout.strip().split(";")[0]

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._log.close()
        time.sleep(0.1)
