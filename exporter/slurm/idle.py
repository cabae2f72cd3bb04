"""Idle Slurm jobs, acted on (opt-in, ``[slurm] idle_action``): a job whose GPUs on this node all
stayed idle (busy under ``exporter.allocated_idle_below`` every round) for ``idle_warn_after``
seconds is told so on its own stderr (``scontrol notify``); with ``idle_action = "cancel"``, after
``idle_cancel_after`` seconds it is cancelled (``scancel``), but only where the scheduler itself
lists it RUNNING in a partition of ``idle_cancel_partitions`` (an explicit allow-list: empty, and
nothing is ever cancelled). A process's own claims (its environment) decide nothing here.

Every action is one log line and a count in ``gpuledger_idle_job_actions_total{action}``:
``warned``, ``cancelled``, ``refused`` (idle long enough, but its partition is not allowed, the
scheduler does not list it running, or it runs on more than one node: each node's exporter sees
only its own GPUs, and the job may be working on another), ``failed`` (the command failed). The commands run on a
thread of their own, never in the sampler's round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from domain import states
from exporter.slurm.commands import SourceError
from exporter.snapshot import Snapshot

log = logging.getLogger(__name__)

ACTIONS = ("warned", "cancelled", "refused", "failed")
Run = Callable[[list[str]], str]
"""Runs a Slurm command (argv) and returns its stdout; SourceError when it fails."""


@dataclass(frozen=True)
class IdlePolicy:
    action: str  # warn | cancel
    warn_after: float
    cancel_after: float
    partitions: frozenset[str]
    idle_below: float  # a GPU is idle in a round where its busy share is under this


@dataclass(frozen=True)
class IdleActions:
    """The actions taken since the exporter started (the metric table's part)."""

    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Streak:
    since: float
    warned: bool = False
    acted: bool = False  # cancelled or refused: not again for this streak


def idle_jobs(now: Snapshot, before: Snapshot | None, idle_below: float) -> dict[str, bool]:
    """Slurm job id -> whether every GPU it held on this node between the two snapshots was idle
    (its busy seconds grew by under ``idle_below`` of its sampled seconds). A job absent from
    ``before`` on a GPU has no interval yet and is left out."""
    prev = {g.info.uuid: g.jobs for g in before.gpus} if before is not None else {}
    out: dict[str, bool] = {}
    for g in now.gpus:
        for key, c in g.jobs.items():
            if not key.job_id or not c.holding:
                continue
            p = prev.get(g.info.uuid, {}).get(key)
            if p is None:
                continue
            sampled = c.sampled_seconds - p.sampled_seconds
            if sampled <= 0:
                continue
            idle = (c.busy_seconds - p.busy_seconds) < idle_below * sampled
            out[key.job_id] = out.get(key.job_id, True) and idle
    return out


class IdleJobs:
    def __init__(self, policy: IdlePolicy, run: Run, squeue: str, scontrol: str, scancel: str) -> None:
        self.policy = policy
        self._run = run
        self._squeue, self._scontrol, self._scancel = squeue, scontrol, scancel
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}
        self._counts = dict.fromkeys(ACTIONS, 0)
        self._before: Snapshot | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuledger-idle-jobs")

    def snapshot(self) -> IdleActions:
        with self._lock:
            return IdleActions(dict(self._counts))

    def on_snapshot(self, snap: Snapshot, now: float) -> None:
        """Each sampler round's snapshot (cheap: the commands go to the worker thread)."""
        before, self._before = self._before, snap
        self.observe(idle_jobs(snap, before, self.policy.idle_below), now)

    def observe(self, jobs: Mapping[str, bool], now: float) -> None:
        """Jobs seen this round and whether they were idle; a job not seen keeps nothing."""
        p = self.policy
        with self._lock:
            self._streaks = {j: s for j, s in self._streaks.items() if jobs.get(j)}
            for job, idle in jobs.items():
                if not idle:
                    continue
                s = self._streaks.setdefault(job, _Streak(now))
                if not s.warned and now - s.since >= p.warn_after:
                    s.warned = True
                    self._pool.submit(self._warn, job, now - s.since)
                if p.action == "cancel" and not s.acted and now - s.since >= p.cancel_after:
                    s.acted = True
                    self._pool.submit(self._cancel, job, now - s.since)

    def wait(self) -> None:
        """Until the actions asked so far are done (tests, shutdown)."""
        self._pool.submit(lambda: None).result()

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _count(self, action: str) -> None:
        with self._lock:
            self._counts[action] += 1

    def _warn(self, job: str, idle_for: float) -> None:
        cancel = (
            f"; it will be cancelled after {self.policy.cancel_after / 60:.0f} minutes idle"
            if self.policy.action == "cancel"
            else ""
        )
        text = f"gpuledger: this job's GPUs on this node have been idle for {idle_for / 60:.0f} minutes{cancel}"
        try:
            self._run([self._scontrol, "notify", job, text])
        except SourceError as e:
            log.warning("idle job %s: could not notify it: %s", job, e)
            self._count("failed")
            return
        log.info("idle job %s: GPUs idle for %.0f s; notified", job, idle_for)
        self._count("warned")

    def _cancel(self, job: str, idle_for: float) -> None:
        try:
            listed = self._run([self._squeue, "-h", "-j", job, "-o", "%P|%T|%u|%D"]).strip().splitlines()
        except SourceError as e:
            if "Invalid job id" in str(e):  # squeue forgets an ended job after MinJobAge
                listed = []
            else:
                log.warning("idle job %s: squeue could not say its partition: %s; not cancelled", job, e)
                self._count("failed")
                return
        partition, state, user, nodes = [*listed[0].split("|"), "", "", "", ""][:4] if listed else ["", "", "", ""]
        why = ""
        if state != states.RUNNING:
            why = "not listed running"
        elif partition not in self.policy.partitions:
            why = f"partition {partition!r} is not allowed (slurm.idle_cancel_partitions)"
        elif nodes.strip() != "1":  # this node's exporter sees its own GPUs only: the others may work
            why = f"it runs on {nodes.strip() or 'an unknown number of'} nodes, and only this node's GPUs are seen here"
        if why:
            log.info("idle job %s: idle for %.0f s, not cancelled: %s", job, idle_for, why)
            self._count("refused")
            return
        try:
            self._run([self._scancel, job])
        except SourceError as e:
            log.warning("idle job %s: scancel failed: %s", job, e)
            self._count("failed")
            return
        log.warning("idle job %s of %s in %s: cancelled after %.0f s with idle GPUs", job, user, partition, idle_for)
        self._count("cancelled")
