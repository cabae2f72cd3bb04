"""Start the ranks of a one-node benchmark round: ``python -m exporter.benchmarks.launch
--plan PLAN.json``. Torch-free and tiny.

Why not torchrun on one node: torchrun starts each worker in a session of its own, so killing
the launcher's process group would leave hung workers behind. Here every rank stays in the
launcher's process group, and the parent's ``killpg`` reaches them all. When one rank fails the
others are stopped at once instead of waiting out a collective timeout.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from exporter.benchmarks.plan import Plan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rank_env(plan: Plan, rank: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(plan.world_size),
        LOCAL_WORLD_SIZE=str(plan.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
        TORCH_NCCL_ASYNC_ERROR_HANDLING="1",  # a timed-out NCCL collective ends the process
    )
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // plan.world_size)))
    if plan.backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    path = ap.parse_args(argv).plan
    plan = Plan.load(path)
    port = free_port()
    cmd = [sys.executable, "-m", "exporter.benchmarks.worker", "--plan", path]
    procs = [
        subprocess.Popen(cmd, env=rank_env(plan, r, port), stdout=None if r == 0 else sys.stderr)
        for r in range(plan.world_size)
    ]

    def on_term(signum: int, frame: object) -> None:
        _stop(procs, 0.0)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            print(f"launch: a rank exited with {failed[0]}; stopping the others", file=sys.stderr)
            _stop(procs, 5.0)
            return failed[0] if failed[0] > 0 else 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    end = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
