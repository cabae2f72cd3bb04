"""A finished job's record checked against what squeue said about the job.

slurmctld writes a job's name raw into its finished record (jobcomp/filetxt; a name may hold a
newline and every key of the format, and sacct's lines split the same way), so a record is a claim
until the scheduler's own listing backs it. squeue (JSON, or the text format checked against the
job ids) lists every job from its submission until MinJobAge after its end (300 s by default,
twenty polls at the default interval), so a watcher that polls squeue has seen every job it could
receive a record for. A record is refused when:

- **squeue names another user** for the job: the record claims someone else's job;
- **squeue lists the job running since before the record's end**, at a poll after the record was
  read: the job did not end then (a requeued job starts again after its end, and passes);
- **squeue never listed the job** although it answered at every poll since before the record's
  submit time: no such job ran while the watcher looked.

A record that passes takes user, account, partition and QOS from squeue's listing where squeue
has them (the scheduler's word wins over the record's text); its state and times stay the
record's. A record of a job the watcher could not have seen (it ended before the watcher started,
or squeue failed meanwhile) is kept as written: nothing can check it (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from domain import states
from exporter.slurm.records import FinishedJob

SLACK = 2.0
"""Seconds of clock skew tolerated between squeue's times and the record's (both whole seconds)."""

NOT_THEIRS, STILL_RUNNING, NEVER_LISTED = "user", "running", "unlisted"
REASONS = (NOT_THEIRS, STILL_RUNNING, NEVER_LISTED)
"""Why a record is refused (``gpuledger_slurm_records_refused_total{reason}``)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """squeue's latest word on a job: its labels ("" where squeue did not say, or where its text
    record was split and only its id is known), state, start, and when it was listed."""

    user: str
    account: str
    partition: str
    qos: str
    state: str
    start: float | None
    at: float


def check(job: FinishedJob, listed: Listed | None, watched_since: float | None) -> tuple[FinishedJob | None, str]:
    """The record as the scheduler backs it, or None and the reason (one of ``REASONS``).
    ``listed``: squeue's latest listing of the job, from a poll after the record was read (None:
    never listed); ``watched_since``: since when squeue answered at every poll (None: it fails now)."""
    if listed is None:
        submitted = job.submit if job.submit is not None else job.start
        if watched_since is not None and submitted is not None and submitted > watched_since + SLACK:
            return None, NEVER_LISTED
        return job, ""
    if listed.user and job.user != listed.user:
        return None, NOT_THEIRS
    if (
        listed.state == states.RUNNING
        and listed.start is not None
        and listed.start <= job.end - SLACK
        and listed.at > job.end + SLACK
    ):
        return None, STILL_RUNNING
    return (
        replace(
            job,
            user=listed.user or job.user,
            account=listed.account or job.account,
            partition=listed.partition or job.partition,
            qos=listed.qos or job.qos,
        ),
        "",
    )
