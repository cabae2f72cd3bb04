"""Fabricated /proc trees in the formats real kernels, Slurm and kubelets write."""

from __future__ import annotations

from pathlib import Path

# /proc/PID/cgroup as seen on real hosts (ids shortened only where the format allows any length)
SLURM_V1 = """12:memory:/slurm/uid_1001/job_4242/step_0/task_0
11:devices:/slurm/uid_1001/job_4242/step_0
10:freezer:/slurm/uid_1001/job_4242/step_0
4:cpuset:/slurm/uid_1001/job_4242/step_0
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
"""
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_977/step_batch/user/task_0\n"
K8S_SYSTEMD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f3d5c1e_1234_4a6b_9f1e_0a1b2c3d4e5f.slice/"
    "cri-containerd-4b1c9f0e2d3a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344.scope\n"
)
K8S_SYSTEMD_V1 = (
    "11:memory:/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9.slice/"
    "docker-aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899.scope\n"
    "1:name=systemd:/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9.slice/"
    "docker-aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899.scope\n"
)
K8S_CGROUPFS_V1 = (
    "12:memory:/kubepods/besteffort/pod5e6f7081-9a0b-4c1d-8e2f-30415263748a/"
    "1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef\n"
    "6:devices:/kubepods/besteffort/pod5e6f7081-9a0b-4c1d-8e2f-30415263748a/"
    "1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef\n"
)
K8S_CGROUPFS_V2_GUARANTEED = "0::/kubepods/podc0ffee00-1111-2222-3333-444455556666/fedcba9876543210fedcba98\n"
PLAIN_USER = "0::/user.slice/user-1002.slice/session-3.scope\n"


def make_proc(
    root: Path,
    pid: int,
    *,
    uid: int,
    cgroup: str,
    environ: dict[str, str] | None = None,
    start: int = 1000,
    status: bool = True,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    # the command name may hold spaces and parentheses: fields count from the last ')'
    (d / "stat").write_text(f"{pid} (python (x) y) S 1 {pid} {pid} 0 -1 4194560 " + "0 " * 12 + f"{start} 0 0\n")
    (d / "cgroup").write_text(cgroup)
    if status:
        (d / "status").write_text(
            f"Name:\tpython\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\n"
        )
    env = environ or {}
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
