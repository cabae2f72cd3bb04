"""Multi-GPU scaling and benchmarks: the daemon's scheduled ``gpuledger_bench_*`` figures. Does
spreading a job over more GPUs pay on this hardware, today, and did the interconnect get slower?"""

from __future__ import annotations

from grafana.layout import Dashboard, gpu_vars, query_var
from grafana.model import EFFICIENCY, NEUTRAL, PROBLEM, UTILISATION, Q, steps
from grafana.panels import Col, barchart, bargauge, stat, table, timeseries
from grafana.promql import JOB, RANGE, increase, per_node, sel

AR = 'job=~"$job", backend=~"$backend"'
TRAIN = 'job=~"$job", model=~"$bench_model"'
NO_OVERLAP, FULL_OVERLAP = 'overlap="none"', 'overlap="full"'
SKIPPED = 'result="skipped_busy"'
JOB_ONLY = 'job=~"$job"'
TX = 'direction="tx"'
TIMES = "suffix:×"
SAMPLES = "suffix: samples/s"


def _ar(metric: str) -> str:
    return per_node(sel(f"gpuledger_bench_allreduce_{metric}", AR))


def _train(metric: str, extra: str = "", per: str = "") -> str:
    """A training figure (divided by another, ``per``, before the node's hostname is joined on)."""
    expr = sel(f"gpuledger_bench_train_{metric}", TRAIN, extra)
    return per_node(f"{expr} / {sel(f'gpuledger_bench_train_{per}', TRAIN)}" if per else expr)


def build() -> Dashboard:
    variables = [
        *gpu_vars(),  # hostname and GPU select the nodes (the benchmarks are per node)
        query_var(
            "backend",
            "backend",
            'label_values(gpuledger_bench_allreduce_busbw_bytes_per_second{job=~"$job"}, backend)',
            "Collective backend: nccl on GPUs, gloo on CPU.",
        ),
        query_var(
            "bench_model",
            "training model",
            'label_values(gpuledger_bench_train_speedup_ratio{job=~"$job"}, model)',
            "The training benchmark's model.",
        ),
    ]
    d = Dashboard(
        "gpuledger-bench",
        "gpuledger / Multi-GPU scaling and benchmarks",
        "All-reduce bus bandwidth, 1-vs-N training speedup against the ideal, GEMM and copy bandwidth, "
        "measured on a schedule when the GPUs are idle.",
        variables,
        time_from="now-30d",
        refresh="5m",
    )
    _allreduce(d)
    _training(d)
    _your_models(d)
    _gemm(d)
    _runs(d)
    return d


def _allreduce(d: Dashboard) -> None:
    d.row("All-reduce bus bandwidth")
    d.add(
        stat(
            "Bus bandwidth at the largest size",
            "busbw (nccl-tests' definition: algbw × 2(n−1)/n) at the largest "
            "message swept; compare it with the link speed (NVLink, PCIe, InfiniBand).",
            [Q(_ar("largest_busbw_bytes_per_second"), "{{hostname}} {{backend}} ×{{world_size}}")],
            "Bps",
            graph=True,
        ),
        8,
        5,
    )
    d.add(
        stat(
            "Mean bus bandwidth over sizes",
            "nccl-tests' 'Avg bus bandwidth': the mean over every size swept, dominated by latency at small sizes.",
            [Q(_ar("average_busbw_bytes_per_second"), "{{hostname}} {{backend}} ×{{world_size}}")],
            "Bps",
            graph=True,
        ),
        8,
        5,
    )
    d.add(
        stat(
            "Wrong elements",
            "Elements that differed from the expected sum in the latest sweep; any is a "
            "correctness failure of the collective (and fails the run).",
            [Q(_ar("wrong_elements"), "{{hostname}}")],
            "none",
            thresholds=PROBLEM,
            background=True,
        ),
        8,
        5,
    )
    d.add(
        stat(
            "Bus bandwidth / NVLink line rate",
            "busbw at the largest size over the slowest GPU's NVLink line rate (its active links' speeds summed, "
            "per direction, as busbw is): how much of the links the all-reduce uses. No data: no NVLink, or NVML "
            "tells no link speed.",
            [Q(_ar("busbw_line_rate_ratio"), "{{hostname}} {{backend}} ×{{world_size}}")],
            "percentunit",
            thresholds=UTILISATION,
            graph=True,
        ),
        12,
        5,
    )
    d.add(
        stat(
            "NVLink bytes in the latest sweep",
            "NVLink data bytes sent during the latest all-reduce sweep, all GPUs and links (the links' counters "
            "read at the sweep's begin and at its result). No data: no NVLink.",
            [Q(per_node(sel("gpuledger_bench_allreduce_nvlink_bytes", AR, TX)), "{{hostname}} ×{{world_size}}")],
            "bytes",
            graph=True,
        ),
        12,
        5,
    )
    d.add(
        table(
            "Bandwidth by message size (latest sweep)",
            "Per message size: bus bandwidth (bar) and algorithm "
            "bandwidth (bytes / time). Bandwidth climbs with size until the links saturate.",
            [
                Col(
                    "busbw",
                    f"max by (hostname, backend, world_size, size_bytes) ({_ar('busbw_bytes_per_second')})",
                    "Bps",
                    gauge=True,
                ),
                Col(
                    "algbw",
                    f"max by (hostname, backend, world_size, size_bytes) ({_ar('algbw_bytes_per_second')})",
                    "Bps",
                ),
            ],
            ["hostname", "backend", "world_size", "size_bytes"],
            rename={"size_bytes": "size"},
            numeric={"size_bytes": "bytes"},
            desc=False,
        ),
        12,
        11,
    )
    d.add(
        timeseries(
            "Bus bandwidth over time by message size",
            "Each sweep's busbw per size: a drop at large sizes is the interconnect, at small sizes latency.",
            [Q(_ar("busbw_bytes_per_second"), "{{hostname}} {{size_bytes}} B")],
            "Bps",
        ),
        12,
        11,
    )
    d.add(
        timeseries(
            "Bus bandwidth over time",
            "Largest-size and mean busbw of each sweep: the trend (drops over 10 % are flagged in the weekly report).",
            [
                Q(_ar("largest_busbw_bytes_per_second"), "{{hostname}} largest"),
                Q(_ar("average_busbw_bytes_per_second"), "{{hostname}} mean"),
            ],
            "Bps",
        ),
        24,
        7,
    )


def _training(d: Dashboard) -> None:
    d.row("Training scaling (same per-GPU batch at every world size)")
    d.add(
        barchart(
            "Speedup against the ideal",
            "Measured throughput(N) / throughput(1) beside the ideal N "
            "(speedup / efficiency) and what a communication model predicts from busbw and gradient size "
            "with no and with full overlap of communication and compute.",
            "world_size",
            "GPUs",
            {
                "measured": f"max by (world_size) ({_train('speedup_ratio')})",
                "ideal": f"max by (world_size) ({_train('speedup_ratio', per='scaling_efficiency_ratio')})",
                "predicted, no overlap": f"max by (world_size) ({_train('predicted_speedup_ratio', NO_OVERLAP)})",
                "predicted, full overlap": f"max by (world_size) ({_train('predicted_speedup_ratio', FULL_OVERLAP)})",
            },
            TIMES,
        ),
        12,
        9,
    )
    d.add(
        bargauge(
            "Scaling efficiency by world size",
            "speedup(N) / N. ≥ 80 %: more GPUs bought cheaply; 60–80 %: "
            "the usual price; under 60 %: dearly (docs/cost-model.md).",
            [Q(f"max by (world_size) ({_train('scaling_efficiency_ratio')})", "{{world_size}} GPUs")],
            "percentunit",
            max_=1,
            thresholds=EFFICIENCY,
        ),
        6,
        9,
    )
    d.add(
        bargauge(
            "Exposed all-reduce share of the step",
            "(step − step without gradient sync) / step: the part of each step spent waiting for communication.",
            [Q(f"max by (world_size) ({_train('allreduce_share_ratio')})", "{{world_size}} GPUs")],
            "percentunit",
            max_=1,
            thresholds=steps("green", (0.1, "orange"), (0.3, "red")),
        ),
        6,
        9,
    )
    d.add(
        timeseries(
            "Speedup over time",
            "Each round's measured speedup per world size.",
            [Q(_train("speedup_ratio"), "{{hostname}} {{world_size}} GPUs")],
            TIMES,
        ),
        8,
    )
    d.add(
        timeseries(
            "Scaling efficiency over time",
            "Each round's efficiency per world size. Dashed: 60 % and 80 %.",
            [Q(_train("scaling_efficiency_ratio"), "{{hostname}} {{world_size}} GPUs")],
            "percentunit",
            max_=1,
            thresholds=EFFICIENCY,
        ),
        8,
    )
    d.add(
        bargauge(
            "Step time by world size",
            "Median DDP step time (slowest rank).",
            [Q(f"max by (world_size) ({_train('step_seconds')})", "{{world_size}} GPUs")],
            "s",
        ),
        4,
    )
    d.add(
        bargauge(
            "MFU",
            "Model FLOP/s per GPU over the datasheet bf16 peak (absent where the GPU is not in the table).",
            [Q(f"max by (world_size) ({_train('mfu_ratio')})", "{{world_size}} GPUs")],
            "percentunit",
            max_=1,
        ),
        4,
    )
    d.add(
        timeseries(
            "Training throughput",
            "Samples per second over all ranks, per world size.",
            [Q(_train("throughput_samples_per_second"), "{{hostname}} {{world_size}} GPUs")],
            SAMPLES,
        ),
        24,
        7,
    )


def _scaling(metric: str) -> str:
    """A figure of the users' own scripts (gpuledger scaling --history), by model, kind and GPU count."""
    return f"max by (name, scaling, world_size) ({sel(f'gpuledger_scaling_{metric}', JOB_ONLY)})"


def _your_models(d: Dashboard) -> None:
    d.row("Your models (gpuledger scaling --history)")
    d.add(
        table(
            "Does multi-GPU pay for your model?",
            "The last gpuledger scaling run of each of your training scripts: per GPU count its steady step time "
            "(start-up and warm-up excluded), speedup against one GPU, efficiency (bar: ≥ 80 % cheap, 60–80 % "
            "the usual price, under 60 % dear) and cost per 1,000 steps with the run's prices (docs/benchmarks.md).",
            [
                Col("step", _scaling("step_seconds"), "s"),
                Col("speedup", _scaling("speedup_ratio"), TIMES),
                Col("efficiency", _scaling("efficiency_ratio"), "percentunit", gauge=True, thresholds=EFFICIENCY),
                Col("per 1,000 steps", _scaling("cost_per_1000_steps"), "none"),
            ],
            ["name", "scaling", "world_size"],
            rename={"name": "model", "world_size": "GPUs"},
            numeric={"world_size": "none"},
            desc=False,
        ),
        24,
        8,
    )


def _gemm(d: Dashboard) -> None:
    d.row("GEMM and copies (slowest GPU of the node)")
    d.add(
        bargauge(
            "GEMM FLOP/s",
            "torch.mm at n = 8192 per dtype, every GPU at once; the slowest GPU's figure.",
            [Q(per_node(sel("gpuledger_bench_matmul_flops_per_second", JOB)), "{{hostname}} {{dtype}}")],
            "flops",
        ),
        8,
    )
    d.add(
        bargauge(
            "Copy bandwidth",
            "1 GiB copies: device to device, pinned host to device and back (host: CPU "
            "memory copy where there is no GPU).",
            [Q(per_node(sel("gpuledger_bench_memcpy_bytes_per_second", JOB)), "{{hostname}} {{kind}}")],
            "Bps",
        ),
        8,
    )
    d.add(
        timeseries(
            "GEMM FLOP/s over time",
            "A GPU that lost clocks (thermal, power) or a driver change shows here.",
            [Q(per_node(sel("gpuledger_bench_matmul_flops_per_second", JOB)), "{{hostname}} {{dtype}}")],
            "flops",
        ),
        8,
    )


def _runs(d: Dashboard) -> None:
    d.row("Runs")
    runs = 'gpuledger_bench_runs_total{job=~"$job", result=~"failed|timeout"}'
    d.add(
        stat(
            "Failed or timed-out runs",
            "Benchmark runs that failed or hit the round's timeout over the time "
            "range; the reason is in the daemon's log and the history's bench_runs table. The exporter serves "
            "every result from its start, so 0 is a real zero; no data means benchmarks are off.",
            [Q(f"sum ({per_node(f'increase({runs}[{RANGE}])')})", instant=True)],
            "none",
            thresholds=PROBLEM,
            background=True,
        ),
        4,
        6,
    )
    d.add(
        stat(
            "Skipped: GPUs busy",
            "Benchmark rounds not run because a GPU was in use during the idle window, over the time range, "
            "on the node that skipped most (a round counts once, whatever benchmarks it planned): on a busy "
            "fleet the figures go stale (amber from 7, a week of daily rounds).",
            [
                Q(
                    f"max (max by (instance) ({increase('gpuledger_bench_runs_total', labels=JOB, extra=SKIPPED)}))",
                    instant=True,
                )
            ],
            "none",
            thresholds=steps("green", (7, "orange")),
        ),
        4,
        6,
    )
    d.add(
        bargauge(
            "Runs by benchmark and result",
            "Runs over the time range: ok, failed, timeout, skipped_busy, skipped_no_gpu (NVML down or no GPU).",
            [
                Q(
                    f"sum by (bench, result) ({per_node(increase('gpuledger_bench_runs_total', labels=JOB))})",
                    "{{bench}} {{result}}",
                    instant=True,
                )
            ],
            "none",
            decimals=0,
            thresholds=NEUTRAL,
        ),
        8,
        6,
    )
    d.add(
        bargauge(
            "Time since the last run",
            "Per benchmark and how it ended; the daily round should keep 'ok' under a day.",
            [
                Q(
                    "time() - max by (bench, result) "
                    f"({per_node(sel('gpuledger_bench_last_run_timestamp_seconds', JOB))})",
                    "{{bench}} {{result}}",
                )
            ],
            "s",
            thresholds=steps("green", (86400 * 1.5, "orange")),
        ),
        4,
        6,
    )
    d.add(
        bargauge(
            "Duration of the latest run",
            "How long each benchmark of the latest round took.",
            [Q(per_node(sel("gpuledger_bench_duration_seconds", JOB)), "{{hostname}} {{bench}}")],
            "s",
        ),
        4,
        6,
    )
