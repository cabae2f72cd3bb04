"""One step for every source: a window's figures from a source's primitives, put together.

In order: the GPUs; then, beside each other (where the store allows reads in threads), the jobs,
their Slurm records and the parts that need no figures (queue, failures, benchmarks, the history's
start); then the jobs joined to their Slurm records (``join_slurm``: the scheduler's record first,
what the job's processes claimed where it says nothing) and to their pods' labels. A part that
fails (``PartFailed``) is named in ``WeekData.problems`` and the rest is read; a source that cannot
answer at all raises ``SourceUnavailable``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

import numpy as np

from analytics.sources import kubernetes
from analytics.sources.base import (
    GpuFigures,
    JobFigures,
    JobRecords,
    Labels,
    PartFailed,
    PodKey,
    QueuePart,
    RecordSets,
    Source,
)
from domain.jobs import JobKey
from domain.jobtable import JobTable
from domain.week import BenchWeek, FailureWeek, GpuWeek, JobWeek, QueueWeek, WeekData, Window

T = TypeVar("T")
NO_USER = (
    "{n} Slurm job rows without a user: the scheduler's record of them (gpuledger_slurm_job_info, from "
    "gpuledger's Slurm watcher) is not in this window"
)


def part(what: str, fn: Callable[[], T], empty: T, problems: list[str]) -> T:
    """One part of a window: its value, or ``empty`` with the failure added to ``problems`` (the
    report is then marked incomplete, the rest still read)."""
    try:
        return fn()
    except PartFailed as e:
        problems.append(f"{what}: {e}")
        return empty


class _Side:
    """The parts that need no figures of the GPUs or jobs."""

    def __init__(self, source: Source, w: Window, has_gpus: bool) -> None:
        self.problems: list[str] = []
        q = part("queue", lambda: source.queue(w), QueuePart(), self.problems)
        self.queue, self.notes = q.rows, q.notes
        self.problems += q.problems
        no_failures: list[FailureWeek] = []
        self.failures = part("failed jobs", lambda: source.failures(w), no_failures, self.problems)
        no_bench: BenchWeek | None = None
        self.bench = part("benchmarks", lambda: source.bench(w), no_bench, self.problems)
        no_start: float | None = None
        self.started = (
            part("history start", lambda: source.history_start(w), no_start, self.problems) if has_gpus else None
        )


def week(source: Source, w: Window, *, jobs: bool = True) -> WeekData:
    g = measured(source.gpus(w))
    problems = list(g.problems)
    with ThreadPoolExecutor(2 if source.parallel else 1, thread_name_prefix="gpuledger-source") as pool:

        def later(fn: Callable[[], T]) -> Future[T]:
            """Beside the jobs where the store allows it, else after them."""
            if source.parallel:
                return pool.submit(fn)
            f: Future[T] = Future()
            f.set_result(fn())
            return f

        side = later(lambda: _Side(source, w, bool(g.gpus)))
        no_records = JobRecords()
        if jobs:
            records = later(lambda: part("Slurm jobs' records", lambda: source.job_records(w, g), no_records, problems))
        else:  # no job rows to join them to (the previous window's fleet figures)
            records = Future()
            records.set_result(no_records)
        per_job = JobFigures()
        if jobs:
            per_job = source.jobs(w, g)
            problems += per_job.problems
        rows = JobTable.of(per_job.jobs)
        notes: list[str] = []
        if any(k.job_id for k in rows.keys):
            rows = join_slurm(rows, g.gpus, g.targets, records.result())
            if unknown := sum(1 for k in rows.keys if k.job_id and not k.user):
                notes.append(NO_USER.format(n=unknown))
        if source.pod_label_names and any(k.pod for k in rows.keys):
            rows = JobTable.of(_labelled(source, w, rows, g.gpus, problems))
        s = side.result()
    return WeekData(
        w,
        source.name,
        g.gpus,
        rows,
        tuple(s.queue),
        tuple(s.failures),
        s.bench,
        approximations=(*g.approximations, *per_job.approximations, *notes, *s.notes),
        problems=(*problems, *s.problems),
        history_start=s.started,
    )


def measured(g: GpuFigures) -> GpuFigures:
    """The GPUs, none where not one of them has a sampled second in the window: GPUs seen only at
    its closing instant (a series' first sample exactly there: a store's range holds its end) were
    not measured in it. Only what happened: such a window has no data, not a week of idle cost."""
    if g.gpus and not any(x.sampled_s > 0 for x in g.gpus):
        return replace(g, gpus=(), targets={})
    return g


def _labelled(
    source: Source, w: Window, rows: Sequence[JobWeek], gpus: Sequence[GpuWeek], problems: list[str]
) -> Sequence[JobWeek]:
    """The pod rows with their chosen kube_pod_labels labels (``kubernetes.label_rows``)."""
    none: Mapping[PodKey, Labels] | None = {}
    found = part("pod labels", lambda: source.pod_labels(w, source.pod_label_names), none, problems)
    if found is None:
        return rows
    if not found:
        problems.append(kubernetes.NO_LABELS)
    return kubernetes.label_rows(rows, gpus, found)


def join_slurm(
    rows: Sequence[JobWeek], gpus: Sequence[GpuWeek], targets: Mapping[str, str], records: JobRecords
) -> JobTable:
    """Each Slurm job row's account, partition and QOS (and, where the row has none, its user):
    the scheduler's record of the job on its GPU's cluster, else what its processes claimed (on
    its GPU's scrape target, else its cluster with its user); a field the scheduler leaves empty
    is filled from the claim. A row without a job id keeps its own.

    On columns: each row is coded by its GPU's (cluster, scrape target) and its key object (the
    rows of a job share one), a job is joined once per code, and its rows take that answer."""
    t = JobTable.of(rows)
    cluster = {g.uuid: g.cluster for g in gpus}
    places: dict[tuple[str, str], int] = {}  # (cluster, scrape target) -> its code
    place = {u: places.setdefault((cluster.get(u, ""), targets.get(u, "")), len(places)) for u in t.texts["uuid"]}
    key_code: dict[int, int] = {}  # a key object's id -> its code
    codes = [key_code.setdefault(id(k), len(key_code)) for k in t.keys]
    objects = list({id(k): k for k in t.keys}.values())  # in the order of their codes
    n = max(1, len(objects))
    pair = np.array([place[u] for u in t.texts["uuid"]], dtype=np.int64) * n + np.array(codes, dtype=np.int64)
    pairs, inverse = np.unique(pair, return_inverse=True)
    at = list(places)
    joined: list[JobKey | None] = []  # per pair; None: no job id (its rows keep their own)
    fields: list[tuple[str, str, str]] = []
    for code in pairs.tolist():
        (c, target), k = at[code // n], objects[code % n]
        if not k.job_id:
            joined.append(None)
            fields.append(("", "", ""))
            continue
        rec = records.scheduler.get((c, k.job_id))
        claim = records.claim(c, target, k)
        account, partition, qos = (
            (rec.account or claim[0], rec.partition or claim[1], rec.qos or claim[2]) if rec else claim
        )
        user = k.user or (rec.user if rec else "")
        joined.append(JobKey(k.job_id, user, k.pod, k.namespace, k.container, account, partition, qos))
        fields.append((account, partition, qos))
    ix = inverse.reshape(-1).tolist()
    keys = [joined[i] or k for i, k in zip(ix, t.keys, strict=True)]
    cols = {
        name: [fields[i][f] if joined[i] else own for i, own in zip(ix, t.texts[name], strict=True)]
        for f, name in enumerate(("account", "partition", "qos"))
    }
    return t.with_(texts=cols, keys=keys)


class Enriched:
    """What every source's ``week`` is: its primitives through ``week`` above; and what a source
    that keeps no days says (``analytics.daycache.DayCached`` keeps them)."""

    keeps_days = False

    def week(self: Source, window: Window, *, jobs: bool = True) -> WeekData:
        return week(self, window, jobs=jobs)

    def keep_days(self, w: Window) -> int:
        return 0

    def carry_state(self, carry: object) -> str:
        return ""

    def record_sets(self, w: Window, gpus: GpuFigures) -> RecordSets | None:
        return None

    def carry_from(self, state: str) -> object:
        return None


__all__ = ["Enriched", "GpuFigures", "JobFigures", "QueueWeek", "join_slurm", "part", "week"]
