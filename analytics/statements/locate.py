"""Where a job ran in a source: its first and last minute (the job command's window), and the
finished jobs' states (for a statement's failed-job cost), where the source knows them. Each
source answers both (``Source.job_span``, ``Source.job_states``)."""

from __future__ import annotations

from analytics.sources import Source
from analytics.sources.base import NotSupported, Span

__all__ = ["NotSupported", "Span", "job_span", "job_states"]


def job_span(source: Source, job: str, now: float) -> Span | None:
    """The job's span (a Slurm job id, a pod name or ``namespace/pod``, each optionally after
    ``cluster:``); None: no data of it."""
    return source.job_span(job, now)


def job_states(source: Source, start: float, end: float) -> dict[str, str] | None:
    """Slurm job id -> its final state, for the jobs that ended in or after [start, end) (the
    embedded history's job records); None where the source does not know job by job."""
    return source.job_states(start, end)
