"""What every workload needs inside a benchmark worker: rank, device, timing, reductions, events.

This module and the workloads import torch; they run only in benchmark child processes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from exporter.benchmarks.plan import EVENT_PREFIX, Plan


@dataclass
class Ctx:
    plan: Plan
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def emit(self, event: dict[str, Any]) -> None:
        """Send an event to the parent (rank 0 speaks for the round)."""
        if self.rank == 0:
            sys.stdout.write(EVENT_PREFIX + json.dumps(event) + "\n")
            sys.stdout.flush()

    def progress(self, bench: str, done: int, total: int) -> None:
        self.emit({"event": "progress", "bench": bench, "done": done, "total": total})

    def barrier(self) -> None:
        """A barrier that names this rank's GPU, so NCCL need not guess which device to use."""
        if self.cuda:
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def time_loop(self, fn: Callable[[], object], iters: int) -> float:
        """Seconds per call of ``fn`` over ``iters`` calls, device-synchronised (CUDA events on GPU)."""
        self.sync()
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters

    def iterations(self, fn: Callable[[], object], budget: float, lo: int, hi: int, group: Any = None) -> int:
        """How many calls fit the time budget (the same number on every rank of ``group``)."""
        one = self.time_loop(fn, 1)
        n = max(lo, min(hi, int(budget / max(one, 1e-9))))
        return int(self.reduce_max(float(n), group))

    def reduce_max(self, x: float, group: Any = None) -> float:
        t = torch.tensor([x], dtype=torch.float64 if not self.cuda else torch.float32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t.item())

    def reduce_sum(self, x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64 if not self.cuda else torch.float32, device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def gather(self, x: float) -> list[float]:
        t = torch.tensor([x], dtype=torch.float32, device=self.device)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return [float(o.item()) for o in out]
