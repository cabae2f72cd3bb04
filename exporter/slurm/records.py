"""What the Slurm watcher hands the history: one record per finished job."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FinishedJob:
    """A scheduler job that ended (Slurm), with its times in epoch seconds (None: never)."""

    cluster: str
    job_id: str
    name: str
    user: str
    partition: str
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, ...
    submit: float | None
    eligible: float | None
    start: float | None  # None when it never started (cancelled while pending)
    end: float
    gpus: int
    exit_code: str
    restarts: int
    account: str = ""  # the Slurm account (the PI's grant); "" where not known
    qos: str = ""  # "" where not known (Slurm without slurmdbd has no QOS)
