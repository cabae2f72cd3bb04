"""Queue and jobs: how long work waits for GPUs (the Slurm watcher's series), how jobs end, and who
holds GPUs without using them (the per-job counters of every exporter)."""

from __future__ import annotations

from domain import states
from grafana.layout import Dashboard, gpu_vars, query_var
from grafana.model import UP_DOWN, UTILISATION, WARNING, Q, steps
from grafana.panels import Col, bargauge, heatmap, info_table, stat, table, timeseries
from grafana.promql import RANGE, RATE, increase, per_gpu, rate, sel

QS = 'job=~"$job", partition=~"$partition"'
JS = 'job=~"$job", uuid=~"$gpu", user=~"$user"'
FAILED = states.regex(states.FAILED)
HOURLY = "1h"  # jobs start and end a few times an hour: rates over less are mostly empty


def _quantile(q: float, histogram: str, window: str) -> str:
    return f"histogram_quantile({q}, sum by (le, partition) (rate({histogram}_bucket{{{QS}}}[{window}])))"


def _jobs(metric: str, window: str = RANGE) -> str:
    """A per-job counter's increase, hostname joined on (and filtered) via the GPU's identity."""
    return per_gpu(increase(f"gpuledger_job_gpu_{metric}", window, JS))


def build() -> Dashboard:
    variables = [
        *gpu_vars(),
        query_var(
            "partition",
            "partition",
            'label_values(gpuledger_queue_pending_gpus{job=~"$job"}, partition)',
            "Slurm partitions seen by the queue watcher.",
        ),
        query_var(
            "user",
            "user",
            'label_values(gpuledger_gpu_job_info{job=~"$job"}, user)',
            "Users holding GPUs (empty when the owner is not known).",
        ),
    ]
    d = Dashboard(
        "gpuledger-queue",
        "gpuledger / Queue and jobs",
        "Slurm queue: pending work, wait quantiles, outcomes and requeues; per-job GPU time, busy time and "
        "energy; users holding idle GPUs.",
        variables,
        time_from="now-7d",
        refresh="1m",
    )
    _now(d)
    _wait(d)
    _outcomes(d)
    _holders(d)
    return d


def _now(d: Dashboard) -> None:
    d.row("Queue now")
    d.add(
        stat(
            "Pending jobs",
            "Jobs pending in the selected partitions (squeue).",
            [Q(f"sum (gpuledger_queue_pending_jobs{{{QS}}})")],
            "none",
            graph=True,
        ),
        4,
        5,
    )
    d.add(
        stat(
            "Pending GPUs",
            "GPUs asked for by pending jobs (gres/gpu).",
            [Q(f"sum (gpuledger_queue_pending_gpus{{{QS}}})")],
            "none",
            graph=True,
        ),
        4,
        5,
    )
    d.add(
        stat(
            "Running jobs",
            "Jobs running in the selected partitions.",
            [Q(f"sum (gpuledger_queue_running_jobs{{{QS}}})")],
            "none",
            graph=True,
        ),
        4,
        5,
    )
    d.add(
        stat(
            "Oldest pending",
            "Age of the oldest pending job.",
            [Q(f"max (gpuledger_queue_oldest_pending_seconds{{{QS}}})")],
            "s",
            thresholds=steps("green", (3600, "orange"), (86400, "red")),
        ),
        4,
        5,
    )
    d.add(
        stat(
            "Queue sources",
            "Whether squeue and sacct (or the jobcomp file) answered the watcher's last poll.",
            [Q('min by (source) (gpuledger_queue_source_up{job=~"$job"})', "{{source}}")],
            "none",
            mappings=UP_DOWN,
            background=True,
            text_mode="value_and_name",
        ),
        8,
        5,
    )
    d.add(
        timeseries(
            "Pending GPUs by partition",
            "GPUs asked for by pending jobs, stacked by partition.",
            [Q(f"sum by (partition) (gpuledger_queue_pending_gpus{{{QS}}})", "{{partition}}")],
            "none",
            stack=True,
        ),
        12,
    )
    d.add(
        timeseries(
            "Pending and running jobs by partition",
            "Jobs waiting and running per partition.",
            [
                Q(f"sum by (partition) (gpuledger_queue_pending_jobs{{{QS}}})", "{{partition}} pending"),
                Q(f"sum by (partition) (gpuledger_queue_running_jobs{{{QS}}})", "{{partition}} running"),
            ],
            "none",
        ),
        12,
    )


def _wait(d: Dashboard) -> None:
    d.row("Queue wait (submit to start)")
    d.add(
        timeseries(
            "Wait p50 and p95",
            "Quantiles of the wait of jobs that started, from the histogram, "
            "interpolated inside its buckets (10 s … 7 d), over at least an hour.",
            [
                Q(_quantile(0.5, "gpuledger_queue_wait_seconds", RATE), "{{partition}} p50"),
                Q(_quantile(0.95, "gpuledger_queue_wait_seconds", RATE), "{{partition}} p95"),
            ],
            "s",
            interval=HOURLY,
        ),
        12,
    )
    mean = (
        f"sum by (partition) (increase(gpuledger_queue_wait_seconds_sum{{{QS}}}[{RANGE}])) / "
        f"sum by (partition) (increase(gpuledger_queue_wait_seconds_count{{{QS}}}[{RANGE}]))"
    )
    d.add(
        bargauge(
            "Wait over the time range",
            "Mean (exact: sum / count) and p50, p95, p99 (bucket estimates) of the "
            "jobs that started in the time range.",
            [
                Q(mean, "{{partition}} mean", instant=True),
                Q(_quantile(0.5, "gpuledger_queue_wait_seconds", RANGE), "{{partition}} p50", instant=True),
                Q(_quantile(0.95, "gpuledger_queue_wait_seconds", RANGE), "{{partition}} p95", instant=True),
                Q(_quantile(0.99, "gpuledger_queue_wait_seconds", RANGE), "{{partition}} p99", instant=True),
            ],
            "s",
            thresholds=steps("green", (1800, "orange"), (4 * 3600, "red")),
        ),
        12,
    )
    d.add(
        heatmap(
            "Wait distribution",
            "Jobs started per hour by wait bucket: where the mass of waits lies and how it moves through the week.",
            Q(
                f"sum by (le) (increase(gpuledger_queue_wait_seconds_bucket{{{QS}}}[$__interval]))",
                "{{le}}",
                fmt="heatmap",
            ),
            "s",
            interval=HOURLY,
        ),
        12,
    )
    d.add(
        timeseries(
            "Eligible wait p95",
            "Wait from eligibility to start, which leaves out holds and dependencies: "
            "the part of the wait the cluster is responsible for.",
            [
                Q(_quantile(0.95, "gpuledger_queue_eligible_wait_seconds", RATE), "{{partition}} p95"),
                Q(_quantile(0.5, "gpuledger_queue_eligible_wait_seconds", RATE), "{{partition}} p50"),
            ],
            "s",
            interval=HOURLY,
        ),
        12,
    )


def _outcomes(d: Dashboard) -> None:
    d.row("How jobs end")
    finished = f"gpuledger_jobs_finished_total{{{QS}}}"
    d.add(
        bargauge(
            "Jobs ended by state",
            "Jobs that ended over the time range, by final state (sacct or jobcomp).",
            [Q(f"sum by (state) (increase({finished}[{RANGE}]))", "{{state}}", instant=True)],
            "none",
            decimals=0,
        ),
        8,
    )
    d.add(
        stat(
            "Failed share",
            "Jobs that failed, timed out, ran out of memory or lost their node, over all jobs "
            "that ended in the time range.",
            [
                Q(
                    f'(sum (increase(gpuledger_jobs_finished_total{{{QS}, state=~"{FAILED}"}}[{RANGE}])) or vector(0))'
                    f" / sum (increase({finished}[{RANGE}]))",
                    instant=True,
                )
            ],
            "percentunit",
            decimals=1,
            thresholds=steps("green", (0.05, "orange"), (0.15, "red")),
            background=True,
        ),
        4,
    )
    d.add(
        bargauge(
            "GPU-hours of ended jobs by state",
            "GPUs × run time of jobs that ended, by state: everything but COMPLETED is work lost or cut short.",
            [
                Q(
                    f"sum by (state) (increase(gpuledger_jobs_gpu_seconds_total{{{QS}}}[{RANGE}])) / 3600",
                    "{{state}}",
                    instant=True,
                )
            ],
            "h",
            decimals=1,
        ),
        8,
    )
    d.add(
        stat(
            "Requeues",
            "Job requeues and restarts over the time range.",
            [Q(f"sum (increase(gpuledger_jobs_requeued_total{{{QS}}}[{RANGE}]))", instant=True)],
            "none",
            decimals=0,
            thresholds=WARNING,
        ),
        4,
    )
    d.add(
        timeseries(
            "Jobs ended per hour",
            "Jobs that ended per hour, stacked by state.",
            [Q(f"sum by (state) (increase({finished}[$__interval]))", "{{state}}")],
            "none",
            bars=True,
            stack=True,
            interval=HOURLY,
        ),
        24,
        7,
    )


def _holders(d: Dashboard) -> None:
    d.row("Jobs and users on the GPUs")
    d.add(
        timeseries(
            "GPUs held by user",
            "GPU-equivalents held (time with a process on the GPU) per user, stacked.",
            [Q(f"sum by (user) ({per_gpu(rate('gpuledger_job_gpu_sampled_seconds_total', labels=JS))})", "{{user}}")],
            "none",
            decimals=1,
            stack=True,
        ),
        12,
    )
    d.add(
        timeseries(
            "GPUs kept busy by user",
            "GPU-equivalents busy per user (the GPU's busy time × the job's share).",
            [Q(f"sum by (user) ({per_gpu(rate('gpuledger_job_gpu_busy_seconds_total', labels=JS))})", "{{user}}")],
            "none",
            decimals=1,
            stack=True,
        ),
        12,
    )
    d.add(
        bargauge(
            "Top users holding idle GPUs",
            "GPU-hours held but not busy over the time range (held − busy), "
            "the ten largest: capacity paid for and blocked for others.",
            [
                Q(
                    f"topk(10, sum by (user) ({_jobs('sampled_seconds_total')} - {_jobs('busy_seconds_total')}) "
                    f"/ 3600)",
                    "{{user}}",
                    instant=True,
                )
            ],
            "h",
            decimals=1,
            thresholds=steps("orange"),
        ),
        8,
        9,
    )
    by = "sum by (user, job_id, pod, namespace)"
    d.add(
        table(
            "Jobs over the time range",
            "Per job: GPU-hours held and busy, utilisation of what it held, energy "
            "(its share of the GPUs' measured energy).",
            [
                Col("held", f"{by} ({_jobs('sampled_seconds_total')}) / 3600", "h"),
                Col("busy", f"{by} ({_jobs('busy_seconds_total')}) / 3600", "h"),
                Col(
                    "utilisation",
                    f"{by} ({_jobs('busy_seconds_total')}) / {by} ({_jobs('sampled_seconds_total')})",
                    "percentunit",
                    gauge=True,
                    thresholds=UTILISATION,
                ),
                Col("energy", f"{by} ({_jobs('energy_joules_total')}) / 3.6e6", "kwatth"),
            ],
            ["user", "job_id", "pod", "namespace"],
            sort="held",
        ),
        16,
        9,
    )
    d.add(
        info_table(
            "Jobs holding GPUs now",
            "gpuledger_gpu_job_info: each GPU with the job, pod and user on it.",
            per_gpu(sel("gpuledger_gpu_job_info", JS)),
            ["hostname", "gpu", "job_id", "user", "pod", "namespace", "container"],
        ),
        24,
        8,
    )
