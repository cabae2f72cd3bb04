"""The Slurm queue's rows of the metric table (the watcher node; see docs/jobs.md), read from the
watcher's ``QueueSnapshot`` part."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter.registry import Feature, Kind, MetricDef, Value, part_row
from exporter.slurm.watcher import QueueSnapshot
from exporter.snapshot import Histogram


def _row(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[QueueSnapshot], Value],
    labels: tuple[str, ...],
) -> MetricDef:
    return part_row(QueueSnapshot, name, kind, unit, help, source, fn, labels)


def _by_key(fn: Callable[[QueueSnapshot], Mapping[str, float]]) -> Callable[[QueueSnapshot], Value]:
    return lambda q: {(k,): float(v) for k, v in fn(q).items()}


def _by_state(fn: Callable[[QueueSnapshot], Mapping[tuple[str, str], float]]) -> Callable[[QueueSnapshot], Value]:
    return lambda q: {k: float(v) for k, v in fn(q).items()}


def _hist(fn: Callable[[QueueSnapshot], Mapping[str, Histogram]]) -> Callable[[QueueSnapshot], Value]:
    return lambda q: {(k,): v for k, v in fn(q).items()}


def _job_info(q: QueueSnapshot) -> Value:
    return {(job_id, *labels): 1.0 for job_id, labels in q.job_info.items()}


_ENDED = "sacct / jobcomp"
_STARTS = "squeue, sacct / jobcomp"

# fmt: off
FEATURE: Feature[QueueSnapshot] = Feature("slurm", QueueSnapshot, (
    _row("gpuledger_queue_source_up", "gauge", "",
         "1 when the Slurm source answered last time: squeue, sacct, jobcomp, or accounting (0: neither sacct nor "
         "a jobcomp file was found).",
         "slurm watcher", _by_key(lambda q: {k: float(v) for k, v in q.sources.items()}), ("source",)),
    _row("gpuledger_queue_pending_jobs", "gauge", "", "Jobs pending per partition.",
         "squeue", _by_key(lambda q: q.pending_jobs), ("partition",)),
    _row("gpuledger_queue_pending_gpus", "gauge", "", "GPUs asked for by pending jobs, per partition.",
         "squeue", _by_key(lambda q: q.pending_gpus), ("partition",)),
    _row("gpuledger_queue_running_jobs", "gauge", "", "Jobs running per partition.",
         "squeue", _by_key(lambda q: q.running_jobs), ("partition",)),
    _row("gpuledger_slurm_job_info", "info", "",
         "A Slurm job running, or ended within slurm.finished_info_seconds, with its user, account, partition and "
         "QOS as the scheduler records them (empty = not known to it); join on job_id.",
         "squeue; sacct / jobcomp", _job_info, ("job_id", "user", "account", "partition", "qos")),
    _row("gpuledger_queue_oldest_pending_seconds", "gauge", "seconds",
         "Age (now - submit) of the oldest pending job per partition; 0 when none.",
         "squeue", _by_key(lambda q: q.oldest_pending), ("partition",)),
    _row("gpuledger_queue_wait_seconds", "histogram", "seconds",
         "Queue wait (start - submit) of jobs as they start, per partition.",
         _STARTS, _hist(lambda q: q.wait), ("partition",)),
    _row("gpuledger_queue_eligible_wait_seconds", "histogram", "seconds",
         "Wait from eligibility to start (excludes holds and dependencies), per partition.",
         _STARTS, _hist(lambda q: q.eligible_wait), ("partition",)),
    _row("gpuledger_jobs_finished_total", "counter", "",
         "Jobs that ended since the exporter started, by partition and final state.",
         _ENDED, _by_state(lambda q: q.finished), ("partition", "state")),
    _row("gpuledger_jobs_gpu_seconds_total", "counter", "seconds",
         "GPUs x run time of jobs that ended since the exporter started, by partition and final state (lost work: "
         "FAILED, TIMEOUT, ...).",
         _ENDED, _by_state(lambda q: q.gpu_seconds), ("partition", "state")),
    _row("gpuledger_slurm_records_refused_total", "counter", "",
         "Finished-job records (sacct / jobcomp) refused because squeue contradicts them: user (squeue names "
         "another user), running (squeue lists the job running since before the record's end), unlisted (squeue "
         "never listed the job while it answered). A job name holding a newline can make such records.",
         "sacct / jobcomp checked against squeue", _by_key(lambda q: q.refused), ("reason",)),
    _row("gpuledger_jobs_requeued_total", "counter", "", "Job requeues and restarts, per partition.",
         "squeue restart count", _by_key(lambda q: q.requeued), ("partition",)),
))
# fmt: on
