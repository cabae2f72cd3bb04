"""Single-device workloads, run on every rank at once (child process only: imports torch):
GEMM FLOP/s per dtype and memory-copy bandwidth (device-to-device, pinned host↔device)."""

from __future__ import annotations

import torch

from exporter.benchmarks.context import Ctx
from exporter.benchmarks.results import MatmulRow, MemcpyRow


def matmul(ctx: Ctx) -> tuple[MatmulRow, ...]:
    p = ctx.plan.matmul
    rows = []
    for i, name in enumerate(p.dtypes):
        dtype = getattr(torch, name)
        a = torch.randn(p.n, p.n, device=ctx.device).to(dtype)
        b = torch.randn(p.n, p.n, device=ctx.device).to(dtype)
        c = torch.empty(p.n, p.n, device=ctx.device, dtype=dtype)

        def mm(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
            torch.mm(a, b, out=c)

        for _ in range(2):
            mm()
        iters = ctx.iterations(mm, p.seconds_per_dtype, p.min_iters, 10_000)
        flops = 2.0 * p.n**3 / ctx.time_loop(mm, iters)
        per_rank = ctx.gather(flops)
        rows.append(MatmulRow(name, p.n, min(per_rank), tuple(per_rank)))
        del a, b, c
        ctx.progress("matmul", i + 1, len(p.dtypes))
    return tuple(rows)


def _buffers(ctx: Ctx, kind: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    def dev() -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8, device=ctx.device)

    def pinned() -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def host() -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8)

    pairs = {"d2d": (dev, dev), "h2d": (pinned, dev), "d2h": (dev, pinned), "host": (host, host)}
    if kind not in pairs:
        raise ValueError(f"unknown copy kind {kind!r}")
    src, dst = pairs[kind]
    return src(), dst()


def memcpy(ctx: Ctx) -> tuple[MemcpyRow, ...]:
    p = ctx.plan.memcpy
    rows = []
    for i, kind in enumerate(p.kinds):
        src, dst = _buffers(ctx, kind, p.bytes)
        src.fill_(1)

        def copy(src: torch.Tensor = src, dst: torch.Tensor = dst) -> None:
            dst.copy_(src, non_blocking=True)

        copy()
        iters = ctx.iterations(copy, p.seconds_per_kind, p.min_iters, 10_000)
        rate = p.bytes / ctx.time_loop(copy, iters)
        per_rank = ctx.gather(rate)
        rows.append(MemcpyRow(kind, p.bytes, min(per_rank), tuple(per_rank)))
        del src, dst
        ctx.progress("memcpy", i + 1, len(p.kinds))
    return tuple(rows)
