"""The scheduler's own record of each job, for ``gpuledger_slurm_job_info``: user, account,
partition and QOS as slurmctld knows them (squeue while a job runs, its finished record from sacct
or the jobcomp file once it ended), never what a job's processes claim.

A job is kept while squeue lists it started and not ended (``states.ACTIVE``), then ``retention``
seconds after squeue last did or after its finished record was read, so that Prometheus scrapes it
after the end. squeue's listing of an ended job (kept there for MinJobAge) adds nothing: an expired
job does not come back. At most ``max_jobs`` are kept: past that, the least recently seen go first
(logged once). Not thread-safe: the watcher calls it under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from types import MappingProxyType

from domain import states
from exporter.config import MAX_LABEL_VALUE
from exporter.slurm.records import FinishedJob

log = logging.getLogger(__name__)

MAX_JOBS = 50_000
"""Running and recently finished jobs exported at most (a series each)."""

Labels = tuple[str, str, str, str]
"""user, account, partition, qos ("" where the scheduler does not know)."""


@dataclass
class _Entry:
    labels: Labels
    until: float  # pruned once the clock passes this


class JobInfo:
    def __init__(self, retention: float, max_jobs: int = MAX_JOBS) -> None:
        self.retention = retention
        self.max_jobs = max_jobs
        self._jobs: dict[str, _Entry] = {}  # in the order last seen: the front goes first over the cap
        self._view: Mapping[str, Labels] = MappingProxyType({})
        self._changed = False
        self._said: set[str] = set()  # what was logged once

    def listed(self, job_id: str, state: str, labels: Labels, now: float) -> None:
        """A job squeue lists (in any state: only a started one that has not ended counts)."""
        if state in states.ACTIVE:
            self._put(job_id, labels, now)

    def finished(self, job: FinishedJob, now: float) -> None:
        """A finished record: kept if the job ran and ended within ``retention`` (a record read
        from the top of the jobcomp file, from before, is history, not a series)."""
        if job.start is None or job.end < now - self.retention:
            return
        self._put(job.job_id, (job.user, job.account, job.partition, job.qos), now)

    def prune(self, now: float) -> None:
        gone = [k for k, e in self._jobs.items() if e.until < now]
        for k in gone:
            del self._jobs[k]
        self._changed |= bool(gone)

    def view(self) -> Mapping[str, Labels]:
        """job id -> labels, the same object until something changes (the snapshot holds it)."""
        if self._changed:
            self._view = MappingProxyType({k: e.labels for k, e in self._jobs.items()})
            self._changed = False
        return self._view

    def _put(self, job_id: str, labels: Labels, now: float) -> None:
        if not (job_id.isascii() and job_id.isdigit()):
            self._once("id", "slurm watcher: job id %r is not a number: no gpuledger_slurm_job_info for it", job_id)
            return
        clean = tuple(self._label(job_id, v) for v in labels)
        self._jobs.pop(job_id, None)
        self._jobs[job_id] = _Entry((clean[0], clean[1], clean[2], clean[3]), now + self.retention)
        self._changed = True
        over = len(self._jobs) - self.max_jobs
        if over > 0:
            for k in list(islice(self._jobs, over)):
                del self._jobs[k]
            self._once(
                "cap",
                "slurm watcher: more than %d running and recently finished jobs; the least recently seen are "
                "dropped from gpuledger_slurm_job_info",
                self.max_jobs,
            )

    def _label(self, job_id: str, v: str) -> str:
        """A value as the scheduler has it; "" (not known) when it is no label a reader could take:
        a control character (a newline, ...), invalid text, or longer than a DNS name. Never
        repaired or cut short: two values made alike would share a bill."""
        if v.isprintable() and len(v) <= MAX_LABEL_VALUE:
            return v
        self._once(
            "value", "slurm watcher: job %s has a value that is no label (%r...): exported as ''", job_id, v[:40]
        )
        return ""

    def _once(self, what: str, msg: str, *args: object) -> None:
        if what not in self._said:
            self._said.add(what)
            log.warning(msg, *args)
