"""Human tables for a benchmark round, laid out like nccl-tests' (torch-free).

Figures are shown in the unit that fits what was measured (a CPU's GEMM in GFLOP/s, a GPU's in
TFLOP/s; gloo's bus bandwidth in MB/s, NVLink's in GB/s), one unit per column; the JSON and the
metrics keep SI base units (bytes/s, FLOP/s). Ranks are "GPUs" only under NCCL (one GPU each)."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.benchmarks.results import AllreduceResult, MatmulRow, MemcpyRow, RoundResult, TrainResult

Unit = tuple[str, float]  # name, its size in the base unit
BANDWIDTH: tuple[Unit, ...] = (("MB/s", 1e6), ("GB/s", 1e9))
FLOPS: tuple[Unit, ...] = (("GFLOP/s", 1e9), ("TFLOP/s", 1e12))


def unit_for(values: Iterable[float], units: tuple[Unit, ...]) -> Unit:
    """The largest of ``units`` (smallest first) in which the largest value is at least 1; the
    smallest when none is (so a column of CPU figures is not a column of 0.00)."""
    top = max((v for v in values if v == v), default=0.0)  # NaN left out
    return next((u for u in reversed(units) if top >= u[1]), units[0])


def rank_noun(backend: str) -> str:
    """What one rank is called in the tables: a GPU under NCCL, a rank otherwise (gloo: a CPU process)."""
    return "GPU" if backend == "nccl" else "rank"


def _g(x: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    return "—" if x is None else format(x * scale, fmt)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def allreduce_table(r: AllreduceResult) -> str:
    unit, scale = unit_for([x for row in r.rows for x in (row.algbw, row.busbw)], BANDWIDTH)
    lines = [
        f"# all-reduce, {r.backend}, {r.world_size} ranks, {r.dtype}, sum, in place",
        f"#{'size':>12} {'count':>12} {'type':>7} {'redop':>6} {'time(us)':>10} {f'algbw({unit})':>12} "
        f"{f'busbw({unit})':>12} {'#wrong':>7}",
    ]
    for row in r.rows:
        lines.append(
            f" {row.size_bytes:>12} {row.count:>12} {'float':>7} {'sum':>6} {row.time_seconds * 1e6:>10.1f} "
            f"{row.algbw / scale:>12.2f} {row.busbw / scale:>12.2f} {row.wrong:>7}"
        )
    lines.append(f"# Out of bounds values : {r.wrong} {'OK' if r.wrong == 0 else 'FAILED'}")
    lines.append(
        f"# Avg bus bandwidth    : {r.busbw_average / scale:.3f} {unit}  (nccl-tests style: mean over all sizes)"
    )
    if r.rows:
        lines.append(
            f"# Bus bandwidth at the largest size ({r.rows[-1].size_bytes} B): {r.busbw_largest / scale:.3f} {unit}"
        )
    if r.links is not None:
        lines.append(
            f"# NVLink during the sweep: {r.links.tx_bytes / 1e9:.3f} GB sent, "
            f"{r.links.rx_bytes / 1e9:.3f} GB received ({r.links.gpus} GPUs, all links)"
        )
    if r.links is not None and r.links.line_rate is not None:
        lines.append(
            f"# NVLink line rate     : {r.links.line_rate / scale:.3f} {unit} per GPU and direction; "
            f"busbw at the largest size / line rate: {_pct(r.line_rate_ratio)}"
        )
    return "\n".join(lines)


def train_table(t: TrainResult, backend: str) -> str:
    each = rank_noun(backend)
    lines = [
        f"# training: {t.model}, {t.params / 1e6:.1f} M parameters, batch {t.batch_per_gpu} x {t.seq} per {each}, "
        f"gradients {t.grad_bytes / 2**20:.1f} MiB; predictions from the {t.busbw_source}",
        f"#{each.lower() + 's':>6} {'step ms':>9} {f'samples/s/{each}':>14} {'samples/s':>10} {'speedup':>8} "
        f"{'effic.':>7} "
        f"{'AR share':>9} {'pred.none':>10} {'pred.full':>10} {'MFU':>6}",
    ]
    for r in t.rows:
        lines.append(
            f" {r.world_size:>6} {r.step_seconds * 1e3:>9.2f} {r.per_gpu_samples_per_second:>14.1f} "
            f"{r.samples_per_second:>10.1f} {r.speedup:>8.2f} {r.efficiency:>7.2f} {_pct(r.allreduce_share):>9} "
            f"{_g(r.predicted_speedup_no_overlap):>10} {_g(r.predicted_speedup_full_overlap):>10} "
            f"{_pct(r.mfu):>6}"
        )
    lines.append("# AR share: step time spent in the exposed gradient all-reduce (measured with and without sync);")
    lines.append("# pred.none / pred.full: speedup predicted from busbw and gradient size, no / perfect overlap")
    return "\n".join(lines)


def matmul_table(rows: tuple[MatmulRow, ...]) -> str:
    unit, scale = unit_for((r.flops_per_second for r in rows), FLOPS)
    lines = [
        f"# GEMM (n x n x n), slowest of {len(rows[0].per_rank) if rows else 0} ranks",
        f"#  {'dtype':<9} {'n':>6} {unit:>9}",
    ]
    lines += [f"   {r.dtype:<9} {r.n:>6} {r.flops_per_second / scale:>9.2f}" for r in rows]
    return "\n".join(lines)


def memcpy_table(rows: tuple[MemcpyRow, ...]) -> str:
    unit, scale = unit_for((r.bytes_per_second for r in rows), BANDWIDTH)
    lines = ["# memory copies (bytes copied per second), slowest rank", f"#  {'kind':<6} {'MiB':>9} {unit:>8}"]
    lines += [f"   {r.kind:<6} {r.bytes / 2**20:>9.0f} {r.bytes_per_second / scale:>8.2f}" for r in rows]
    return "\n".join(lines)


def round_tables(r: RoundResult, status: dict[str, str]) -> str:
    parts = [f"# device: {r.device or '?'}, backend {r.backend}, world size {r.world_size}"]
    if r.allreduce is not None:
        parts.append(allreduce_table(r.allreduce))
    if r.train is not None:
        parts.append(train_table(r.train, r.backend))
    if r.matmul:
        parts.append(matmul_table(r.matmul))
    if r.memcpy:
        parts.append(memcpy_table(r.memcpy))
    parts.append("# result: " + ", ".join(f"{b} {s}" for b, s in status.items()))
    for bench, message in r.errors.items():
        parts.append(f"# {bench} error: {message}")
    return "\n\n".join(parts)
