"""Where a job ran in a source: its first and last minute (the job command's window), and the
finished jobs' states (for a statement's failed-job cost), where the source knows them."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from analytics.report.build import CLUSTER_SEP
from analytics.sources import Source, SourceUnavailable
from analytics.sources.dcgm import DcgmSource
from analytics.sources.dcgm.labels import HPC_JOB, POD_SETS, POWER
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.promapi import label_value
from analytics.sources.prometheus import PrometheusSource
from exporter import history

LOOKBACK_DAYS = 35  # how far back the Prometheus source looks for a job's series
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Span:
    """A job's first minute and the end of its last one (epoch seconds)."""

    first: float
    last: float

    def window_bounds(self) -> tuple[float, float]:
        """Whole hours around the span: the report builder's hourly figures (tariffs, carbon)
        line up with the clock, and the job's own row does not depend on them."""
        return math.floor(self.first / HOUR) * HOUR, math.ceil(self.last / HOUR) * HOUR


class NotSupported(ValueError):
    """This source cannot find a job."""


def _parts(job: str) -> tuple[str, str]:
    """``namespace/pod`` -> (namespace, pod); anything else names a Slurm job id or a pod."""
    ns, sep, pod = job.partition("/")
    return (ns, pod) if sep and ns and pod else ("", "")


def split_cluster(job: str) -> tuple[str, str]:
    """``cluster:job`` -> (cluster, job), as a report over several clusters keys its job rows;
    anything else -> ("", job)."""
    cluster, sep, rest = job.partition(CLUSTER_SEP)
    return (cluster, rest) if sep and cluster and rest and "/" not in cluster else ("", job)


def job_span(source: Source, job: str, now: float) -> Span | None:
    """The job's span (a Slurm job id, a pod name or ``namespace/pod``, each optionally after
    ``cluster:``); None: no data of it."""
    if isinstance(source, EmbeddedSource):
        return _embedded(source, job)
    if isinstance(source, PrometheusSource):
        return _prometheus(source, job, now)
    if isinstance(source, DcgmSource):
        return _dcgm(source, job, now)
    raise NotSupported(f"the {source.name} source cannot look a job up: use gpuledger's own series or the history")


def _embedded(source: EmbeddedSource, job: str) -> Span | None:
    ns, pod = _parts(job)
    try:
        first, last = source.db.execute(
            "SELECT min(minute), max(minute) FROM job_minutes "
            "WHERE job_id = ? OR (job_id = '' AND (pod = ? OR (namespace = ? AND pod = ?)))",
            (job, job, ns, pod),
        ).fetchone()
    except sqlite3.Error as e:
        raise SourceUnavailable(f"embedded history {source.path}: {e}") from e
    return None if first is None else Span(float(first), float(last) + 60.0)


def _prometheus(source: PrometheusSource, job: str, now: float) -> Span | None:
    """From the job's first sample to the last that grew: the exporter keeps a finished job's
    series a while (``GRACE``), flat, and those minutes are not the job's."""
    cluster, job = split_cluster(job)
    label = source.s.cluster_label
    if cluster and not label:
        return None  # clusters are not told apart here: no row is keyed cluster:job
    ns, pod = _parts(job)
    sel = f'namespace="{label_value(ns)}", pod="{label_value(pod)}"' if ns else f'job_id="{label_value(job)}"'
    if cluster:
        sel += f', {label}="{label_value(cluster)}"'
    api = source.api
    with api.report():
        first = api.query(_first(sel), now)
        if not first and not ns:  # not a Slurm job id: a pod's name
            sel = f'job_id="", pod="{label_value(job)}"' + (f', {label}="{label_value(cluster)}"' if cluster else "")
            first = api.query(_first(sel), now)
        if not first:
            return None
        held = f"gpuledger_job_gpu_sampled_seconds_total{{{sel}}}"
        grew = f"timestamp({held}) and ({held} > {held} offset 1m)"  # the samples that grew: their times
        last = api.query(f"max(max_over_time(({grew})[{LOOKBACK_DAYS}d:1m]))", now)
    start = first[0].value // 60 * 60
    if not last:  # it never grew: its first minute
        return Span(start, start + 60.0)
    return Span(start, max(start + 60.0, math.ceil(last[0].value / 60) * 60.0))  # the end of its minute


def _dcgm(source: DcgmSource, job: str, now: float) -> Span | None:
    """From the first to the end of the last scrape that lists the job: a Slurm job id
    (``hpc_job``) or a pod (under any of dcgm-exporter's and Prometheus' spellings)."""
    cluster, job = split_cluster(job)
    label = source.s.cluster_label
    if cluster and not label:
        return None
    ns, pod = _parts(job)
    extra = f', {label}="{label_value(cluster)}"' if cluster else ""
    if ns:
        sels = [f'{p}="{label_value(pod)}", {n}="{label_value(ns)}"' for p, n, _ in POD_SETS]
    else:
        sels = [f'{HPC_JOB}="{label_value(job)}"', *(f'{p}="{label_value(job)}"' for p, _, _ in POD_SETS)]
    stamps = " or ".join(f"timestamp({POWER}{{{s}{extra}}})" for s in sels)
    rng = f"[{LOOKBACK_DAYS}d:1m]"
    with source.api.report():
        got = source.api.query_many(
            [(f"min(min_over_time(({stamps}){rng}))", now), (f"max(max_over_time(({stamps}){rng}))", now)]
        )
    if not got[0] or not got[1]:
        return None
    start = got[0][0].value // 60 * 60
    return Span(start, max(start + 60.0, math.ceil(got[1][0].value / 60) * 60.0))


def _first(sel: str) -> str:
    return f"min(min_over_time(timestamp(gpuledger_job_gpu_sampled_seconds_total{{{sel}}})[{LOOKBACK_DAYS}d:1m]))"


def job_states(source: Source, start: float, end: float) -> dict[str, str] | None:
    """Slurm job id -> its final state, for the jobs that ended in or after [start, end) (the
    embedded history's job records); None where the source does not know job by job."""
    if not isinstance(source, EmbeddedSource):
        return None
    try:
        finished = history.finished_jobs(source.db, start, end + 400 * 86400)
    except sqlite3.Error as e:
        raise SourceUnavailable(f"embedded history {source.path}: {e}") from e
    return {j.job_id: j.state for j in finished}
