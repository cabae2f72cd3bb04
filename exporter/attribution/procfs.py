"""Who owns a GPU process: user, Slurm job, Kubernetes pod, read from /proc (or a copy of it).

``proc_root`` is configurable so tests can point at fabricated trees, and so a container can
read the host's /proc mounted elsewhere. A process that exits between reads yields None (retried
next round); answers are cached by (pid, start time), so a reused pid is never confused with the
process that had it before.
"""

from __future__ import annotations

import dataclasses
import math
import pwd
import threading
import time
from collections.abc import Callable, Mapping
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
    account: str = ""  # the Slurm job's account, partition and QOS, from its processes' environment
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


CLAIMS = ("job_id", "account", "partition", "qos")
"""What a process's environment claims of its Slurm job: the labels of
``gpuledger_job_attribute_conflicts_total``."""

RESCAN_SECONDS = 60.0
"""How often, at most, a node where no process was seen in a job cgroup is looked over again for one."""


@dataclass(frozen=True, slots=True)
class _Facts:
    """One read of ``/proc/PID`` (cached per process): who it is, the job its cgroup names, and what
    its environment claims. Which job it is billed to is decided at each call (``ProcReader.owner``)."""

    owner: Owner  # uid, user, pod, container
    cgroup_job: str
    env: slurmenv.SlurmEnv


class ProcReader:
    """Owners of processes. A process's job is the one its cgroup names; its environment
    (``SLURM_JOB_ID``) names it only on a node without job cgroups, where nothing better says which
    (a process outside every job cgroup, on a node that has them, is in no job, whatever it sets). A
    job's account, partition and QOS are the scheduler's where it knows them (``scheduled``: on the
    node that watches Slurm), else what the environment of the job's first process read that names
    them says, a process inside the job's cgroup beating one that only claims the job; the claims
    that contradict what is known are counted (``conflicts``, once per process and claim) and not
    believed."""

    def __init__(
        self, root: str | Path = "/proc", users: Users | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = Path(root)
        self.users = users or Users()
        self.clock = clock
        self._cache: dict[int, tuple[str, _Facts, set[str]]] = {}  # pid -> start, facts, claims counted
        # Slurm job -> (account, partition, qos), and whether a process inside the job's cgroup named them
        self._jobs: dict[str, tuple[tuple[str, str, str], bool]] = {}
        self._job_cgroups = False  # a process on this node was seen in a Slurm job cgroup: the node has them
        self._scanned_at = -math.inf
        self._lock = threading.Lock()  # guards _conflicts (read by the snapshot)
        self._conflicts = dict.fromkeys(CLAIMS, 0)
        # job -> the scheduler's (user, account, partition, qos), "" where it does not know
        self.scheduled: Mapping[str, tuple[str, ...]] = {}

    def owner(self, pid: int) -> Owner | None:
        """The owner of ``pid``, or None if it is gone (or was never there)."""
        start = self._start_time(pid)
        if start is None:
            self._cache.pop(pid, None)
            return None
        hit = self._cache.get(pid)
        if hit is not None and hit[0] == start:
            return self._owner(hit[1], hit[2])  # a process read before its job's attributes were
        f = self._read(pid)
        if f is None:
            return None
        if self._start_time(pid) != start:  # another process by now: not kept, not counted
            return self._owner(f, None)
        self._cache[pid] = (start, f, set())
        return self._owner(f, self._cache[pid][2])

    def conflicts(self) -> dict[str, int]:
        """Processes whose claim was not believed, by what they claimed (``CLAIMS``), since the start."""
        with self._lock:
            return dict(self._conflicts)

    def _owner(self, f: _Facts, counted: set[str] | None) -> Owner:
        """``f``'s owner with its job and the job's attributes; its conflicts are counted unless in
        ``counted`` (those of this process counted before; None: count none)."""
        env, job, inside = f.env, f.cgroup_job, True
        if job:
            self._job_cgroups = True
        elif env.job_id:
            job, inside = ("" if self._node_has_job_cgroups() else env.job_id), False
        wrong = ["job_id"] if env.job_id and env.job_id != job else []
        claims = (env.account, env.partition, env.qos) if env.job_id == job != "" else ("", "", "")
        attributes = self._job_attributes(job, claims, inside, wrong)
        new = [] if counted is None else [claim for claim in wrong if claim not in counted]
        if new:
            assert counted is not None
            counted.update(new)
            with self._lock:
                for claim in new:
                    self._conflicts[claim] += 1
        account, partition, qos = attributes
        return dataclasses.replace(f.owner, job_id=job, account=account, partition=partition, qos=qos)

    def _job_attributes(
        self, job: str, claims: tuple[str, str, str], inside: bool, wrong: list[str]
    ) -> tuple[str, str, str]:
        """The job's attributes: the scheduler's, where it knows them, else set by the first process
        that names any and does not contradict the scheduler (one inside the job's cgroup replaces
        one outside it); each claim of ``claims`` that differs from them is added to ``wrong``."""
        if not job:
            return ("", "", "")
        record = self.scheduled.get(job, ())
        word = record[1:4] if len(record) == 4 else ("", "", "")
        believable = all(not c or not w or c == w for c, w in zip(claims, word, strict=True))
        known = self._jobs.get(job)
        if any(claims) and believable and (known is None or (inside and not known[1])):
            self._jobs[job] = known = (claims, inside)
        found = ("", "", "") if known is None else known[0]
        out = tuple(w or v for w, v in zip(word, found, strict=True))
        for name, claim, value in zip(CLAIMS[1:], claims, out, strict=True):
            if claim and claim != value:
                wrong.append(name)
        return (out[0], out[1], out[2])

    def _node_has_job_cgroups(self) -> bool:
        """Whether any process on this node sits in a Slurm job cgroup (once seen, always: Slurm's
        cgroup plugin is not switched off under running jobs); looked for at most every
        ``RESCAN_SECONDS`` while none was seen."""
        if self._job_cgroups or self.clock() - self._scanned_at < RESCAN_SECONDS:
            return self._job_cgroups
        self._scanned_at = self.clock()
        try:
            pids = [d for d in self.root.iterdir() if d.name.isdigit()]
        except OSError:
            return False
        for d in pids:
            try:
                text = (d / "cgroup").read_text()
            except OSError:
                continue  # gone, or not ours to read
            if facts(text).job_id:
                self._job_cgroups = True
                break
        return self._job_cgroups

    def forget_except(self, live: set[int]) -> None:
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]
        jobs = {f.cgroup_job or f.env.job_id for _, f, _ in self._cache.values()}
        for job in [j for j in self._jobs if j not in jobs]:
            del self._jobs[job]

    def _start_time(self, pid: int) -> str | None:
        try:
            stat = (self.root / str(pid) / "stat").read_text()
        except OSError:
            return None
        fields = stat.rpartition(")")[2].split()
        return fields[19] if len(fields) > 19 else None

    def _read(self, pid: int) -> _Facts | None:
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
        return _Facts(
            Owner(
                uid=uid,
                user=self.users.name(uid) if uid is not None else "",
                pod_uid=f.pod_uid,
                container_id=f.container_id,
            ),
            f.job_id,
            slurmenv.read(base / "environ"),  # SLURM_JOB_ID too, for nodes without job cgroups
        )
