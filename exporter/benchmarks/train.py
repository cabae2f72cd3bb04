"""Training step time at world sizes 1, 2, 4, … N with DDP (child process only: imports torch).

One model (a stack of pre-norm transformer encoder layers), synthetic data, the same batch per
GPU at every world size, bf16 autocast on GPU. Ranks outside the current world size wait at a
barrier. At each size > 1 the same steps are also timed without the gradient all-reduce
(``no_sync``) and one all-reduce of all gradients is timed alone, so the exposed communication
share is measured, not inferred.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from exporter.benchmarks.context import Ctx
from exporter.benchmarks.plan import TrainPlan
from exporter.benchmarks.results import AllreduceResult, TrainMeasurement, TrainResult, peak_flops, train_result


class Encoder(nn.Module):
    def __init__(self, t: TrainPlan) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(t.d_model, t.heads, t.ff, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, t.layers, enable_nested_tensor=False)
        self.head = nn.Linear(t.d_model, t.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


def flops_per_sample(t: TrainPlan) -> float:
    """Training FLOPs per sample: 3 × forward (backward costs twice the forward); forward is
    2 FLOPs per weight per token in the matmuls plus attention's two S×S×d products per layer."""
    matmul_weights = t.layers * (4 * t.d_model**2 + 2 * t.d_model * t.ff) + t.d_model**2
    forward = 2 * matmul_weights * t.seq + t.layers * 2 * 2 * t.seq**2 * t.d_model
    return 3.0 * forward


def _median_step(ctx: Ctx, step: Any, n: int) -> float:
    times = []
    for _ in range(n):
        ctx.sync()
        t0 = time.perf_counter()
        step()
        ctx.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _measure(ctx: Ctx, k: int, group: Any) -> tuple[TrainMeasurement, int]:
    t = ctx.plan.train
    torch.manual_seed(0)
    model = Encoder(t).to(ctx.device)
    params = sum(p.numel() for p in model.parameters())
    net: nn.Module = model
    if k > 1:
        net = DistributedDataParallel(model, process_group=group, device_ids=[ctx.local_rank] if ctx.cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=ctx.device).manual_seed(1 + ctx.rank)
    x = torch.randn(t.batch, t.seq, t.d_model, device=ctx.device, generator=gen)
    y = torch.randn(t.batch, t.seq, t.d_model, device=ctx.device, generator=gen)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if ctx.cuda else contextlib.nullcontext()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast:
            out = net(x)
        loss = nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()

    for _ in range(t.warmup_steps):
        step()
    step_s = _median_step(ctx, step, t.steps)
    nosync_s = grad_ar_s = None
    if k > 1:
        assert isinstance(net, DistributedDataParallel)
        with net.no_sync():
            nosync_s = _median_step(ctx, step, t.steps)
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]).float()
        dist.all_reduce(flat, group=group)
        grad_ar_s = statistics.median(ctx.time_loop(lambda: dist.all_reduce(flat, group=group), 1) for _ in range(5))
        step_s = ctx.reduce_max(step_s, group)
        nosync_s = ctx.reduce_max(nosync_s, group)
        grad_ar_s = ctx.reduce_max(grad_ar_s, group)
    return TrainMeasurement(k, step_s, nosync_s, grad_ar_s), params


def run(ctx: Ctx, sweep: AllreduceResult | None) -> TrainResult | None:
    t = ctx.plan.train
    sizes = ctx.plan.train_world_sizes()
    groups = {k: dist.new_group(list(range(k))) for k in sizes if k > 1}  # every rank, same order
    measured: list[TrainMeasurement] = []
    params = 0
    for i, k in enumerate(sizes):
        if ctx.rank < k:
            m, params = _measure(ctx, k, groups.get(k))
            measured.append(m)
            if ctx.cuda:
                torch.cuda.empty_cache()  # the model of this size is gone with _measure's frame
        ctx.barrier()
        ctx.progress("train", i + 1, len(sizes))
    if ctx.rank != 0:
        return None
    device = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    return train_result(
        model=t.model,
        params=params,
        grad_bytes=params * 4,  # DDP reduces fp32 gradients (parameters stay fp32 under autocast)
        batch=t.batch,
        seq=t.seq,
        flops_per_sample=flops_per_sample(t),
        peak=peak_flops(device) if ctx.cuda else None,
        measured=measured,
        sweep=sweep if sweep is not None and sweep.world_size == ctx.world else None,
    )
