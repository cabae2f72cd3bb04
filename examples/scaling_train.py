"""A small data-parallel training script with a known cost, for ``gpuledger scaling``.

    gpuledger scaling --gpus 1,2 -- examples/scaling_train.py --steps {steps}
    gpuledger scaling --gpus 1,2 -- examples/scaling_train.py --helper

It sleeps ``--startup`` seconds before its loop (imports, data loading, compilation stand-ins),
then each step runs a small MLP forward and backward, all-reduces the gradients (gloo on CPU, NCCL
on GPUs, when the world size is above 1) and sleeps ``--step-seconds`` (the compute of this rank's
batch). With ``--strong`` the global batch is fixed and split: each rank sleeps
``--step-seconds / world size``. So the truth is known: the steady step time is about
``--step-seconds`` (weak) or ``--step-seconds / N`` (strong), plus a few milliseconds.

``--comm-seconds`` adds that long to each step's all-reduce (a slower link, exposed: nothing
overlaps it). With ``--helper`` the script hands the step timer a ``no_sync`` that skips the
all-reduce, as a DDP model's ``model.no_sync`` does, so ``gpuledger scaling`` measures the exposed
all-reduce time: about ``--comm-seconds`` plus gloo's own few milliseconds.

``--fail-at N`` and ``--hang-at N`` make the run at world size N fail or hang (for the tests).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps")
    ap.add_argument("--helper", action="store_true", help="time the steps with gpuledger.steptimer")
    ap.add_argument("--startup", type=float, default=1.5, help="seconds of start-up before the loop")
    ap.add_argument("--step-seconds", type=float, default=0.05, help="compute per step of one rank's batch")
    ap.add_argument("--strong", action="store_true", help="a fixed global batch split over the ranks")
    ap.add_argument("--batch", type=int, default=16, help="per-rank batch (weak) or global batch (strong)")
    ap.add_argument("--comm-seconds", type=float, default=0.0, help="added to each step's all-reduce")
    ap.add_argument("--fail-at", type=int, help="exit 3 at this world size, after the start-up")
    ap.add_argument("--hang-at", type=int, help="hang at this world size, after the start-up")
    ap.add_argument("--tag", default="", help="ignored: lets a test find this run's processes")
    args = ap.parse_args()

    torch.set_num_threads(1)  # a tiny model: more threads only fight the other ranks for the cores
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu")
    if world > 1:
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if cuda else "gloo")
    time.sleep(args.startup)
    if args.fail_at == world:
        print(f"scaling_train: failing on purpose at world size {world}", file=sys.stderr)
        return 3
    if args.hang_at == world:
        time.sleep(3600)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    per_rank = max(1, args.batch // world) if args.strong else args.batch
    compute = args.step_seconds / world if args.strong else args.step_seconds
    n_params = sum(p.numel() for p in model.parameters())
    syncing = [True]

    @contextmanager
    def no_sync() -> Iterator[None]:  # what DDP's model.no_sync does: the step's gradients stay local
        syncing[0] = False
        try:
            yield
        finally:
            syncing[0] = True

    loop: Iterable[int] = range(args.steps)
    if args.helper:
        from gpuledger.steptimer import steps

        loop = steps(range(args.steps), samples_per_step=per_rank, grad_bytes=4 * n_params, no_sync=no_sync)
    for _ in loop:
        x = torch.randn(per_rank, 64, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if world > 1 and syncing[0]:
            flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            dist.all_reduce(flat)
            time.sleep(args.comm_seconds)
        opt.step()
        time.sleep(compute)
        loss.item()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print(f"scaling_train: {args.steps} steps at world size {world} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
