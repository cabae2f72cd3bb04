"""Find the Slurm job and the Kubernetes pod of a process from its ``/proc/PID/cgroup``.

Layouts recognised (v1 lines are ``ID:controllers:path``, v2 is ``0::path``):

- Slurm, cgroup v1 (task/cgroup): ``/slurm/uid_1000/job_4242/step_0/task_0``
- Slurm, cgroup v2 (22.05+): ``/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0``
- Kubernetes, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (v1 and v2;
  guaranteed pods sit directly under ``/kubepods``)
- Kubernetes, systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`` (also ``docker-``,
  ``crio-``; v1 and v2)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SLURM_JOB = re.compile(r"(?:^|/)(?:slurm(?:_[^/]*)?|slurmstepd\.scope)/(?:[^/]+/)*?job_(\d+)(?:/|$)")
_K8S_CGROUPFS = re.compile(
    r"(?:^|/)kubepods(?:/(?:burstable|besteffort|guaranteed))?/pod([0-9a-fA-F-]{8,})(?:/([0-9a-f]{12,}))?"
)
_K8S_SYSTEMD = re.compile(
    r"kubepods(?:-(?:burstable|besteffort|guaranteed))?-pod([0-9a-fA-F_]{8,})\.slice"
    r"(?:/(?:cri-containerd|docker|crio|containerd)-([0-9a-f]{12,})\.scope)?"
)


@dataclass(frozen=True, slots=True)
class CgroupFacts:
    job_id: str = ""
    pod_uid: str = ""
    container_id: str = ""


def paths(text: str) -> list[str]:
    """The cgroup paths of a ``/proc/PID/cgroup`` file, v2's first."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0] != "0", parts[2]))
    return [p for _, p in sorted(out, key=lambda x: x[0])]


def facts(text: str) -> CgroupFacts:
    job = pod = container = ""
    for path in paths(text):
        if not job and (m := _SLURM_JOB.search(path)):
            job = m.group(1)
        if not pod and (m := _K8S_SYSTEMD.search(path)):
            pod, container = m.group(1).replace("_", "-"), m.group(2) or ""
        elif not pod and (m := _K8S_CGROUPFS.search(path)):
            pod, container = m.group(1), m.group(2) or ""
    return CgroupFacts(job_id=job, pod_uid=pod, container_id=container)
