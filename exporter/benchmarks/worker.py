"""One benchmark rank: ``python -m exporter.benchmarks.worker --plan PLAN.json``.

Started by ``exporter.benchmarks.launch`` (one node) or torchrun (several), which set RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Rank 0 writes one event per line to stdout,
prefixed ``@gpuledger``; everything else goes to stderr. Tears down explicitly before exiting.

Test hook: ``GPULEDGER_BENCH_TEST_HANG_RANK=N`` makes global rank N ignore SIGTERM and sleep
before its first collective, so only SIGKILL ends it and the other ranks wait in that collective
(tests/exporter/test_bench_multinode.py). Unset, as everywhere outside tests, it does nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from exporter.benchmarks import allreduce, device, train
from exporter.benchmarks.context import Ctx
from exporter.benchmarks.plan import Plan
from exporter.benchmarks.results import AllreduceResult, plain

TEST_HANG_RANK = "GPULEDGER_BENCH_TEST_HANG_RANK"


def _setup(plan: Plan) -> Ctx:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if world != plan.world_size:
        raise SystemExit(f"worker: WORLD_SIZE {world} but the plan says {plan.world_size}")
    if plan.device == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(plan.backend, timeout=datetime.timedelta(seconds=plan.collective_timeout))
    return Ctx(plan=plan, rank=rank, world=world, local_rank=local, device=dev)


def _run_one(ctx: Ctx, bench: str, sweep: AllreduceResult | None) -> Any:
    if bench == "allreduce":
        return allreduce.run(ctx)
    if bench == "train":
        return train.run(ctx, sweep)
    if bench == "matmul":
        return device.matmul(ctx)
    if bench == "memcpy":
        return device.memcpy(ctx)
    raise ValueError(f"unknown benchmark {bench!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    plan = Plan.load(ap.parse_args(argv).plan)
    ctx = _setup(plan)
    name = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    ctx.emit({"event": "start", "device": name, "world_size": ctx.world, "torch": torch.__version__})
    if os.environ.get(TEST_HANG_RANK) == str(ctx.rank):  # test hook (see the docstring)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(10**6)
    if plan.inject.hang and ctx.rank == ctx.world - 1:
        time.sleep(10**6)  # the other ranks wait for this one in their first collective
    if plan.inject.crash and ctx.rank == ctx.world - 1:
        os._exit(3)  # dies without a word, as a segfaulting rank would
    code = 0
    sweep: AllreduceResult | None = None
    for bench in plan.benches:
        ctx.emit({"event": "begin", "bench": bench})
        try:
            result = _run_one(ctx, bench, sweep)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            ctx.emit({"event": "error", "bench": bench, "message": f"{type(e).__name__}: {e}"})
            code = 1
            break  # a failed collective can leave the group unusable
        if isinstance(result, AllreduceResult):
            sweep = result
        if ctx.rank == 0:
            ctx.emit({"event": "result", "bench": bench, "data": plain(result)})
    try:
        if code == 0:
            ctx.barrier()
    finally:
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
