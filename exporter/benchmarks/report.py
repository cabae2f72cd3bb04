"""Human tables for a benchmark round, laid out like nccl-tests' (torch-free)."""

from __future__ import annotations

from exporter.benchmarks.results import AllreduceResult, MatmulRow, MemcpyRow, RoundResult, TrainResult


def _g(x: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    return "—" if x is None else format(x * scale, fmt)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def allreduce_table(r: AllreduceResult) -> str:
    lines = [
        f"# all-reduce, {r.backend}, {r.world_size} ranks, {r.dtype}, sum, in place",
        f"#{'size':>12} {'count':>12} {'type':>7} {'redop':>6} {'time(us)':>10} {'algbw(GB/s)':>12} "
        f"{'busbw(GB/s)':>12} {'#wrong':>7}",
    ]
    for row in r.rows:
        lines.append(
            f" {row.size_bytes:>12} {row.count:>12} {'float':>7} {'sum':>6} {row.time_seconds * 1e6:>10.1f} "
            f"{row.algbw / 1e9:>12.2f} {row.busbw / 1e9:>12.2f} {row.wrong:>7}"
        )
    lines.append(f"# Out of bounds values : {r.wrong} {'OK' if r.wrong == 0 else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {r.busbw_average / 1e9:.3f} GB/s  (nccl-tests style: mean over all sizes)")
    if r.rows:
        lines.append(
            f"# Bus bandwidth at the largest size ({r.rows[-1].size_bytes} B): {r.busbw_largest / 1e9:.3f} GB/s"
        )
    return "\n".join(lines)


def train_table(t: TrainResult) -> str:
    lines = [
        f"# training: {t.model}, {t.params / 1e6:.1f} M parameters, batch {t.batch_per_gpu} x {t.seq} per GPU, "
        f"gradients {t.grad_bytes / 2**20:.1f} MiB; predictions from the {t.busbw_source}",
        f"#{'gpus':>5} {'step ms':>9} {'samples/s/GPU':>14} {'samples/s':>10} {'speedup':>8} {'effic.':>7} "
        f"{'AR share':>9} {'pred.none':>10} {'pred.full':>10} {'MFU':>6}",
    ]
    for r in t.rows:
        lines.append(
            f" {r.world_size:>5} {r.step_seconds * 1e3:>9.2f} {r.per_gpu_samples_per_second:>14.1f} "
            f"{r.samples_per_second:>10.1f} {r.speedup:>8.2f} {r.efficiency:>7.2f} {_pct(r.allreduce_share):>9} "
            f"{_g(r.predicted_speedup_no_overlap):>10} {_g(r.predicted_speedup_full_overlap):>10} "
            f"{_pct(r.mfu):>6}"
        )
    lines.append("# AR share: step time spent in the exposed gradient all-reduce (measured with and without sync);")
    lines.append("# pred.none / pred.full: speedup predicted from busbw and gradient size, no / perfect overlap")
    return "\n".join(lines)


def matmul_table(rows: tuple[MatmulRow, ...]) -> str:
    lines = [
        f"# GEMM (n x n x n), slowest of {len(rows[0].per_rank) if rows else 0} ranks",
        "#  dtype        n   TFLOP/s",
    ]
    lines += [f"   {r.dtype:<9} {r.n:>6} {r.flops_per_second / 1e12:>9.2f}" for r in rows]
    return "\n".join(lines)


def memcpy_table(rows: tuple[MemcpyRow, ...]) -> str:
    lines = ["# memory copies (bytes copied per second), slowest rank", "#  kind        MiB     GB/s"]
    lines += [f"   {r.kind:<6} {r.bytes / 2**20:>9.0f} {r.bytes_per_second / 1e9:>8.2f}" for r in rows]
    return "\n".join(lines)


def round_tables(r: RoundResult, status: dict[str, str]) -> str:
    parts = [f"# device: {r.device or '?'}, backend {r.backend}, world size {r.world_size}"]
    if r.allreduce is not None:
        parts.append(allreduce_table(r.allreduce))
    if r.train is not None:
        parts.append(train_table(r.train))
    if r.matmul:
        parts.append(matmul_table(r.matmul))
    if r.memcpy:
        parts.append(memcpy_table(r.memcpy))
    parts.append("# result: " + ", ".join(f"{b} {s}" for b, s in status.items()))
    for bench, message in r.errors.items():
        parts.append(f"# {bench} error: {message}")
    return "\n\n".join(parts)
