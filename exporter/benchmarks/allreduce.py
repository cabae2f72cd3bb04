"""All-reduce sweep with nccl-tests' definitions (child process only: imports torch).

For each power-of-two size: one reduction of a known pattern checked element by element
(``#wrong``, summed over ranks), then warm-up, then a timed loop sized to the plan's time budget.
The time of a size is the slowest rank's. torch.distributed's all_reduce works in place; the timed
loop reduces a zeroed buffer, so values stay finite and the data never changes the cost.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from exporter.benchmarks.context import Ctx
from exporter.benchmarks.results import AllreduceResult, allreduce_row

DTYPE = torch.float32


def _pattern(idx: torch.Tensor, rank: int) -> torch.Tensor:
    return ((idx + rank) % 7 + 1).to(DTYPE)


def run(ctx: Ctx) -> AllreduceResult:
    p = ctx.plan.allreduce
    sizes = p.sizes()
    elem = torch.tensor([], dtype=DTYPE).element_size()
    buf = torch.empty(sizes[-1] // elem, dtype=DTYPE, device=ctx.device)
    rows = []
    for i, size in enumerate(sizes):
        n = size // elem
        x = buf[:n]
        idx = torch.arange(n, dtype=torch.int32, device=ctx.device)
        x.copy_(_pattern(idx, ctx.rank))
        dist.all_reduce(x)
        if ctx.plan.inject.wrong_reduction and i == 0 and ctx.rank == 0:
            x[n // 2] += 1  # a corrupted element, as a broken link or driver would leave
        expected = torch.zeros_like(x)
        for r in range(ctx.world):
            expected += _pattern(idx, r)
        wrong = int(ctx.reduce_sum(float((x != expected).sum().item())))
        del idx, expected
        x.zero_()
        for _ in range(p.warmup):
            dist.all_reduce(x)

        def reduce(x: torch.Tensor = x) -> None:
            dist.all_reduce(x)

        iters = ctx.iterations(reduce, p.seconds_per_size, p.min_iters, p.max_iters)
        t = ctx.reduce_max(ctx.time_loop(reduce, iters))
        rows.append(allreduce_row(size, n, t, iters, ctx.world, wrong))
        ctx.progress("allreduce", i + 1, len(sizes))
    del buf
    return AllreduceResult(ctx.plan.backend, ctx.world, "float32", tuple(rows))
