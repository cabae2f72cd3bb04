"""Who owns a GPU process: user, Slurm job, Kubernetes pod, read from /proc (or a copy of it).

``proc_root`` is configurable so tests can point at fabricated trees, and so a container can
read the host's /proc mounted elsewhere. A process that exits between reads yields None (retried
next round); answers are cached by (pid, start time), so a reused pid is never confused with the
process that had it before.
"""

from __future__ import annotations

import dataclasses
import pwd
from dataclasses import dataclass
from pathlib import Path

from exporter.attribution import slurmenv
from exporter.attribution.cgroup import facts


@dataclass(frozen=True, slots=True)
class Owner:
    """What a process belongs to. Empty strings where unknown or not applicable."""

    uid: int | None = None
    user: str = ""
    job_id: str = ""  # Slurm job
    pod_uid: str = ""
    container_id: str = ""
    account: str = ""  # the Slurm job's account, partition and QOS, from its environment
    partition: str = ""
    qos: str = ""

    def slurm(self) -> tuple[str, str, str]:
        return (self.account, self.partition, self.qos)


UNKNOWN = Owner()


class Users:
    """uid -> name, from a passwd file (e.g. the host's, mounted into a container) or the
    system's user database; the uid itself where the name is unknown."""

    def __init__(self, passwd_file: str | Path | None = None) -> None:
        self._names: dict[int, str] = {}
        self._file = Path(passwd_file) if passwd_file else None
        if self._file is not None:
            self._load()

    def _load(self) -> None:
        assert self._file is not None
        try:
            for line in self._file.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split(":")
                if len(parts) >= 3 and parts[2].isdigit():
                    self._names.setdefault(int(parts[2]), parts[0])
        except OSError:
            pass

    def name(self, uid: int) -> str:
        if uid not in self._names:
            if self._file is not None:
                self._names[uid] = str(uid)
            else:
                try:
                    self._names[uid] = pwd.getpwuid(uid).pw_name
                except KeyError:
                    self._names[uid] = str(uid)
        return self._names[uid]


class ProcReader:
    def __init__(self, root: str | Path = "/proc", users: Users | None = None) -> None:
        self.root = Path(root)
        self.users = users or Users()
        self._cache: dict[int, tuple[str, Owner]] = {}
        self._jobs: dict[str, tuple[str, str, str]] = {}  # Slurm job -> (account, partition, qos), first found

    def owner(self, pid: int) -> Owner | None:
        """The owner of ``pid``, or None if it is gone (or was never there)."""
        start = self._start_time(pid)
        if start is None:
            self._cache.pop(pid, None)
            return None
        hit = self._cache.get(pid)
        if hit is not None and hit[0] == start:
            return self._job_attributes(hit[1])  # a process read before its job's attributes were
        owner = self._read(pid)
        if owner is not None and self._start_time(pid) == start:  # still the same process
            owner = self._job_attributes(owner)
            self._cache[pid] = (start, owner)
        return owner

    def _job_attributes(self, owner: Owner) -> Owner:
        """The job's attributes as its first process that named any gave them."""
        if not owner.job_id:
            return owner
        known = self._jobs.get(owner.job_id)
        if known is None:
            if any(owner.slurm()):
                self._jobs[owner.job_id] = owner.slurm()
            return owner
        if owner.slurm() == known:
            return owner
        account, partition, qos = known
        return dataclasses.replace(owner, account=account, partition=partition, qos=qos)

    def forget_except(self, live: set[int]) -> None:
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]
        jobs = {o.job_id for _, o in self._cache.values()}
        for job in [j for j in self._jobs if j not in jobs]:
            del self._jobs[job]

    def _start_time(self, pid: int) -> str | None:
        try:
            stat = (self.root / str(pid) / "stat").read_text()
        except OSError:
            return None
        fields = stat.rpartition(")")[2].split()
        return fields[19] if len(fields) > 19 else None

    def _read(self, pid: int) -> Owner | None:
        base = self.root / str(pid)
        try:
            cgroup = (base / "cgroup").read_text()
            status = (base / "status").read_text()
        except OSError:
            return None  # exited mid-read, or not ours to read
        uid = None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])  # the real uid
                break
        f = facts(cgroup)
        env = slurmenv.read(base / "environ")  # SLURM_JOB_ID too, for set-ups without job cgroups
        job = f.job_id or env.job_id
        same = env.job_id == job != ""  # the environment speaks of this process's job
        return Owner(
            uid=uid,
            user=self.users.name(uid) if uid is not None else "",
            job_id=job,
            pod_uid=f.pod_uid,
            container_id=f.container_id,
            account=env.account if same else "",
            partition=env.partition if same else "",
            qos=env.qos if same else "",
        )
