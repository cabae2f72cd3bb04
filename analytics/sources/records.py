"""Each Slurm job's record chosen from a window's label sets (``Source.record_sets``,
``base.RecordSets``). A window's label sets are the union of its parts' (the series a
``last_over_time`` over the window sees are those its days' see), so the analytics daemon keeps
each settled day's with its figures (``analytics.daycache``) and a report reads none of them
again."""

from __future__ import annotations

from analytics.sources.base import JobRecords, RecordSets, SchedulerJob, Slurm


def records_of(sets: RecordSets) -> JobRecords:
    """Each key's record: where records for one key disagree (a job's hosts, an exporter
    restart, a requeue), the one naming most wins, then the first in label order: the answer
    never depends on the order the store returns them."""
    cl = sets.cluster_label
    scheduler: dict[tuple[str, str], SchedulerJob] = {}
    for labels in sorted(sets.scheduler):
        get = dict(labels).get
        if not (job := get("job_id", "")):
            continue
        rec = SchedulerJob(get("user", ""), get("account", ""), get("partition", ""), get("qos", ""))
        key = (get(cl, "") if cl else "", job)
        if key not in scheduler or rec.named() > scheduler[key].named():
            scheduler[key] = rec
    by_target: dict[tuple[str, str, str], Slurm] = {}
    by_cluster: dict[tuple[str, str, str], Slurm] = {}
    for labels in sets.claims:  # any order: _prefer's choice is the same whatever the order
        get = dict(labels).get
        if not (job := get("job_id", "")):
            continue
        cluster = get(cl, "") if cl else ""
        named = (get("account", ""), get("partition", ""), get("qos", ""))
        _prefer(by_target, (cluster, get("instance", ""), job), named)
        _prefer(by_cluster, (cluster, job, get("user", "")), named)
    return JobRecords(scheduler, by_target, by_cluster)


def _prefer(found: dict[tuple[str, str, str], Slurm], key: tuple[str, str, str], named: Slurm) -> None:
    """The claim naming most fields for ``key``, the least in text order among those: one claim,
    whatever order they come in."""
    before = found.get(key)
    if before is None or (sum(map(bool, named)), before) > (sum(map(bool, before)), named):
        found[key] = named
