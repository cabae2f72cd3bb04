"""Slurm's account, partition and QOS of the Prometheus source's job rows, from the exporter's
``gpuledger_job_info`` series (one per Slurm job and host whose environment named them); the
per-job counters carry none of the three."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from analytics.sources.promapi import PromAPI, rng
from domain.jobs import JobKey
from domain.week import Window

SLURM_LABELS = ("job_id", "user", "account", "partition", "qos")  # gpuledger_job_info's own
NO_SLURM = ("", "", "")
Slurm = tuple[str, str, str]  # (account, partition, qos)


@dataclass(frozen=True, slots=True)
class SlurmAttributes:
    """``gpuledger_job_info`` over a window, for joining on a job row. A job id names a job only
    within one Slurm controller: two clusters (or two controllers' hosts) may reuse it. So a row
    takes the series of its own exporter (its GPU's scrape target: ``instance``) for its job id,
    else one of its own cluster (its GPU's ``cluster_label``, "" where there is none) for its job
    id and user; never another cluster's. ``by_target``: (cluster, instance, job_id);
    ``by_cluster``: (cluster, job_id, user)."""

    by_target: Mapping[tuple[str, str, str], Slurm]
    by_cluster: Mapping[tuple[str, str, str], Slurm]

    def of(self, cluster: str, target: str, job: JobKey) -> Slurm:
        own = self.by_target.get((cluster, target, job.job_id)) if target else None
        return own or self.by_cluster.get((cluster, job.job_id, job.user), NO_SLURM)


def slurm_attributes(api: PromAPI, w: Window, cluster_label: str = "") -> SlurmAttributes:
    """``gpuledger_job_info`` over the window, one query (the per-job counters carry none of the
    three: they are joined on the job, see ``SlurmAttributes``). Where the series for one key
    disagree (a job's hosts, an exporter restart), the one naming most of the three wins, then
    the first in label order, so the answer never depends on the order Prometheus returns."""
    by = ", ".join([*(x for x in (cluster_label,) if x), "instance", *SLURM_LABELS])
    expr = f"max by ({by}) (last_over_time(gpuledger_job_info[{rng(w.seconds)}]))"
    by_target: dict[tuple[str, str, str], Slurm] = {}
    by_cluster: dict[tuple[str, str, str], Slurm] = {}
    for s in api.query(expr, w.end):
        job, user = s.labels.get("job_id", ""), s.labels.get("user", "")
        if not job:
            continue
        cluster = s.labels.get(cluster_label, "") if cluster_label else ""
        named = (s.labels.get("account", ""), s.labels.get("partition", ""), s.labels.get("qos", ""))
        _prefer(by_target, (cluster, s.labels.get("instance", ""), job), named)
        _prefer(by_cluster, (cluster, job, user), named)
    return SlurmAttributes(by_target, by_cluster)


def _prefer(found: dict[tuple[str, str, str], Slurm], key: tuple[str, str, str], named: Slurm) -> None:
    before = found.get(key)
    if before is None or (sum(map(bool, named)), before) > (sum(map(bool, before)), named):
        found[key] = named


SCHEDULER_INFO = "gpuledger_slurm_job_info"  # the Slurm watcher's record of each job, as slurmctld knows it


@dataclass(frozen=True, slots=True)
class SchedulerJob:
    user: str
    account: str
    partition: str
    qos: str


def scheduler_jobs(api: PromAPI, w: Window, cluster_label: str = "") -> dict[tuple[str, str], SchedulerJob]:
    """(cluster, job id) -> the scheduler's record of the job (``gpuledger_slurm_job_info``, exported
    by gpuledger's Slurm watcher), for job rows that carry only a job id (dcgm-exporter's
    ``hpc_job``). One query. Where one job id has several records (a requeue under another
    account), the one naming most wins, then the first in label order."""
    by = ", ".join([*(x for x in (cluster_label,) if x), *SLURM_LABELS])
    expr = f"max by ({by}) (last_over_time({SCHEDULER_INFO}[{rng(w.seconds)}]))"
    found: dict[tuple[str, str], SchedulerJob] = {}
    for s in sorted(api.query(expr, w.end), key=lambda s: sorted(s.labels.items())):
        get = s.labels.get
        if not (job := get("job_id", "")):
            continue
        key = (get(cluster_label, "") if cluster_label else "", job)
        rec = SchedulerJob(get("user", ""), get("account", ""), get("partition", ""), get("qos", ""))
        before = found.get(key)
        if before is None or sum(map(bool, (rec.user, rec.account, rec.partition, rec.qos))) > sum(
            map(bool, (before.user, before.account, before.partition, before.qos))
        ):
            found[key] = rec
    return found
