"""Watch the Slurm controller: pending work per partition, the wait of every job that starts,
finished jobs by state, requeues. Runs in its own thread on the node configured as the watcher.

- queue: ``squeue --json`` (Slurm 22.05+), else a fixed ``squeue -o`` format
- finished jobs: ``sacct`` where slurmdbd accounting exists, else the ``jobcomp/filetxt`` file
  (never ``sacct -c``: it reports Submit equal to Start)

wait = start − submit, observed once per job, when the job is first seen started (running in
squeue, or in its finished record); the eligible wait (start − eligible) beside it. A job cancelled
while pending never started: it counts as cancelled, not as a wait sample. Requeues come from
squeue's restart count. A failing or missing command sets ``gpuledger_queue_source_up 0``.

Each started and recently finished job's user, account, partition and QOS as the scheduler records
them: ``exporter.slurm.jobinfo``. A finished record is a claim until squeue's listing backs it
(``exporter.slurm.verify``): each poll reads the finished records first, then squeue, then checks
the records against that listing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from domain import states
from exporter.slurm import parse, verify
from exporter.slurm.commands import SourceError, run
from exporter.slurm.jobinfo import MAX_JOBS, JobInfo, Labels
from exporter.slurm.records import FinishedJob
from exporter.snapshot import Histogram

if TYPE_CHECKING:
    from exporter.config import SlurmSettings

log = logging.getLogger(__name__)

WAIT_BUCKETS: tuple[float, ...] = (10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 604800)


class _Hist:
    def __init__(self, uppers: tuple[float, ...]) -> None:
        self.uppers, self.counts, self.sum, self.count = uppers, [0] * len(uppers), 0.0, 0

    def observe(self, v: float) -> None:
        self.sum += v
        self.count += 1
        for i, upper in enumerate(self.uppers):
            if v <= upper:
                self.counts[i] += 1

    def freeze(self) -> Histogram:
        return Histogram(self.uppers, tuple(self.counts), self.sum, self.count)


@dataclass(frozen=True)
class QueueSnapshot:
    sources: Mapping[str, bool] = field(default_factory=dict)
    pending_jobs: Mapping[str, int] = field(default_factory=dict)
    pending_gpus: Mapping[str, int] = field(default_factory=dict)
    running_jobs: Mapping[str, int] = field(default_factory=dict)
    oldest_pending: Mapping[str, float] = field(default_factory=dict)
    wait: Mapping[str, Histogram] = field(default_factory=dict)
    eligible_wait: Mapping[str, Histogram] = field(default_factory=dict)
    finished: Mapping[tuple[str, str], int] = field(default_factory=dict)
    gpu_seconds: Mapping[tuple[str, str], float] = field(default_factory=dict)  # GPUs x run time, by end state
    requeued: Mapping[str, int] = field(default_factory=dict)
    job_info: Mapping[str, Labels] = field(default_factory=dict)  # job id -> (user, account, partition, qos)
    refused: Mapping[str, int] = field(default_factory=dict)  # finished records squeue contradicts, by reason


_REFUSED = {
    verify.NOT_THEIRS: "squeue names another user for the job",
    verify.STILL_RUNNING: "squeue lists the job running since before the record's end",
    verify.NEVER_LISTED: "squeue never listed the job while it answered",
}


class SlurmWatcher:
    def __init__(
        self,
        settings: SlurmSettings,
        keep: Callable[[list[FinishedJob]], None] | None,
        clock: Callable[[], float] = time.time,
        max_job_info: int = MAX_JOBS,
    ) -> None:
        """``keep`` stores the finished jobs (the history's ``submit``; None: not stored)."""
        self.s = settings
        self.keep = keep
        self._clock = clock
        self._env = dict(os.environ, **({"SLURM_CONF": str(settings.conf)} if settings.conf else {}))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = clock()
        self._json = True
        self._accounting: str | None = None if settings.accounting == "auto" else settings.accounting
        self._jobcomp: Path | None = Path(settings.jobcomp_file) if settings.jobcomp_file else None
        self._offset = 0
        self._inode: int | None = None
        self._sacct_since = self._started_at - settings.interval
        self._sacct_seen: dict[tuple[str, float], float] = {}
        self._observed: dict[tuple[str, float | None], float] = {}  # (job, submit) -> when
        self._restarts: dict[str, int] = {}
        self._partitions: set[str] = set()
        self._sources: dict[str, bool] = {}
        self._pending: dict[str, int] = {}
        self._pending_gpus: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._oldest: dict[str, float] = {}
        self._wait: dict[str, _Hist] = {}
        self._eligible_wait: dict[str, _Hist] = {}
        self._finished: dict[tuple[str, str], int] = {}
        self._gpu_seconds: dict[tuple[str, str], float] = {}
        self._requeued: dict[str, int] = {}
        self._job_info = JobInfo(settings.finished_info_seconds, max_job_info)
        self._split_said = False
        self._listed: dict[str, verify.Listed] = {}  # job id -> squeue's latest listing of it
        self._watched_since: float | None = None  # squeue answered at every poll since (None: it failed)
        self._held: list[FinishedJob] = []  # finished records read this poll, checked after squeue
        self._refused: dict[str, int] = {}
        self._refused_said: set[str] = set()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuledger-slurm", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.s.command_timeout * 2 + 5)

    def _run(self) -> None:
        while True:
            self.poll()
            if self._stop.wait(self.s.interval):
                return

    def poll(self) -> None:
        """One look at the finished jobs and at the queue, then the finished records checked against
        that look at the queue. Never raises."""
        for step in (self._poll_finished, self._poll_queue, self._settle, self._prune_job_info):
            try:
                step()
            except Exception:
                log.exception("slurm watcher: %s failed", step.__name__)

    def snapshot(self) -> QueueSnapshot:
        with self._lock:
            return QueueSnapshot(
                sources=dict(self._sources),
                pending_jobs={p: self._pending.get(p, 0) for p in self._partitions},
                pending_gpus={p: self._pending_gpus.get(p, 0) for p in self._partitions},
                running_jobs={p: self._running.get(p, 0) for p in self._partitions},
                oldest_pending={p: self._oldest.get(p, 0.0) for p in self._partitions},
                wait={p: h.freeze() for p, h in self._wait.items()},
                eligible_wait={p: h.freeze() for p, h in self._eligible_wait.items()},
                finished=dict(self._finished),
                gpu_seconds=dict(self._gpu_seconds),
                requeued={p: self._requeued.get(p, 0) for p in self._partitions},
                job_info=self._job_info.view(),
                refused=dict(self._refused),
            )

    # --- the queue ----------------------------------------------------------------------

    def _squeue(self) -> tuple[list[parse.QueueJob], set[str]]:
        """The jobs squeue lists, and the ids of those it lists whose records were split (their
        fields unknown this poll)."""
        if self._json:
            try:
                return parse.squeue_json(run([self.s.squeue, "--json"], self.s.command_timeout, self._env)), set()
            except SourceError as e:
                if "json" not in str(e).lower() and "unrecognized" not in str(e).lower():
                    raise
                log.info("squeue has no --json here (%s); using its text format", e)
                self._json = False
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                log.info("squeue --json output not understood (%s); using the text format", e)
                self._json = False
        out = run([self.s.squeue, "-h", "-t", "all", "-o", parse.TEXT_FORMAT], self.s.command_timeout, self._env)
        ids = run([self.s.squeue, "-h", "-t", "all", "-o", parse.IDS_FORMAT], self.s.command_timeout, self._env)
        jobs, dropped = parse.squeue_checked(out, ids)
        if dropped and not self._split_said:
            self._split_said = True
            log.warning(
                "slurm watcher: squeue's records of job(s) %s are split by a newline (in a job name or account) or "
                "claimed twice: left out of this poll (logged once)",
                ", ".join(sorted(dropped)[:10]),
            )
        return jobs, dropped & set(ids.split())

    def _poll_queue(self) -> None:
        try:
            jobs, unknown = self._squeue()
        except SourceError as e:
            self._watched_since = None
            self._down("squeue", e)
            return
        now = self._clock()
        if self._watched_since is None:
            self._watched_since = now
        pending: dict[str, int] = {}
        gpus: dict[str, int] = {}
        running: dict[str, int] = {}
        oldest: dict[str, float] = {}
        with self._lock:
            self._sources["squeue"] = True
            for j in jobs:
                self._partitions.add(j.partition)
                if j.state == states.PENDING:
                    pending[j.partition] = pending.get(j.partition, 0) + 1
                    gpus[j.partition] = gpus.get(j.partition, 0) + j.gpus
                    if j.submit is not None:
                        oldest[j.partition] = max(oldest.get(j.partition, 0.0), now - j.submit)
                elif j.start is not None and j.state in states.RAN:
                    if j.state == states.RUNNING:
                        running[j.partition] = running.get(j.partition, 0) + 1
                    self._observe_start(j.job_id, j.partition, j.submit, j.eligible, j.start, now)
                self._job_info.listed(j.job_id, j.state, (j.user, j.account, j.partition, j.qos), now)
                self._listed[j.job_id] = verify.Listed(j.user, j.account, j.partition, j.qos, j.state, j.start, now)
                before = self._restarts.get(j.job_id)
                if before is not None and j.restarts > before:
                    self._requeued[j.partition] = self._requeued.get(j.partition, 0) + j.restarts - before
                self._restarts[j.job_id] = j.restarts
            for i in unknown:
                if i not in self._listed:
                    self._listed[i] = verify.Listed("", "", "", "", "", None, now)
            listed = {j.job_id for j in jobs}
            self._restarts = {k: v for k, v in self._restarts.items() if k in listed}
            self._pending, self._pending_gpus, self._running, self._oldest = pending, gpus, running, oldest
            self._prune(now)

    def _observe_start(
        self, job_id: str, partition: str, submit: float | None, eligible: float | None, start: float, now: float
    ) -> None:
        """Caller holds the lock. Once per (job, submit time): a requeued job keeps its submit
        time, so only its first start is a wait sample."""
        key = (job_id, submit)
        if key in self._observed or submit is None:
            return
        self._observed[key] = now
        self._partitions.add(partition)
        self._wait.setdefault(partition, _Hist(WAIT_BUCKETS)).observe(max(0.0, start - submit))
        if eligible is not None:
            self._eligible_wait.setdefault(partition, _Hist(WAIT_BUCKETS)).observe(max(0.0, start - eligible))

    def _prune(self, now: float) -> None:
        for key in [k for k, t in self._observed.items() if now - t > 2 * 86400]:
            del self._observed[key]
        for key in [k for k, t in self._sacct_seen.items() if now - t > 2 * 86400]:
            del self._sacct_seen[key]
        for job_id in [k for k, v in self._listed.items() if now - v.at > 2 * 86400]:
            del self._listed[job_id]

    def _prune_job_info(self) -> None:
        with self._lock:
            self._job_info.prune(self._clock())

    def _down(self, source: str, e: Exception) -> None:
        with self._lock:
            was = self._sources.get(source)
            self._sources[source] = False
        if was is not False:
            log.error("slurm watcher: %s unavailable (%s); gpuledger_queue_source_up{source=%r} 0", source, e, source)

    # --- finished jobs ------------------------------------------------------------------

    def _poll_finished(self) -> None:
        if self._accounting is None:
            self._accounting = self._detect()
        if self._accounting == "sacct":
            self._poll_sacct()
        elif self._accounting == "jobcomp" and (self._jobcomp is not None or self._find_jobcomp()):
            self._poll_jobcomp()

    def _detect(self) -> str | None:
        try:
            run([self.s.sacct, "-n", "-X", "-S", "now"], self.s.command_timeout, self._env)
            log.info("slurm watcher: finished jobs from sacct (slurmdbd accounting)")
            return "sacct"
        except SourceError as e:
            log.info("slurm watcher: no sacct accounting (%s); looking for a jobcomp file", e)
        if self._jobcomp is None and not self._find_jobcomp(
            "neither slurmdbd accounting nor jobcomp/filetxt is set up"
        ):
            return None
        log.info("slurm watcher: finished jobs from %s", self._jobcomp)
        return "jobcomp"

    def _find_jobcomp(self, missing: str = "slurm.conf sets no jobcomp/filetxt (JobCompType, JobCompLoc)") -> bool:
        """The jobcomp file slurm.conf names (``scontrol show config``), for ``accounting = auto``
        and for ``jobcomp`` without ``jobcomp_file``; asked again at the next poll when there is
        none (``gpuledger_queue_source_up{source="accounting"} 0`` meanwhile, one log line)."""
        try:
            config = run([self.s.scontrol, "show", "config"], self.s.command_timeout, self._env)
        except SourceError as e:
            self._down("accounting", e)
            return False
        settings = dict(
            (k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in config.splitlines()) if v
        )
        if settings.get("JobCompType") != "jobcomp/filetxt" or not settings.get("JobCompLoc"):
            self._down("accounting", SourceError(missing))
            return False
        self._jobcomp = Path(settings["JobCompLoc"])
        return True

    def _poll_jobcomp(self) -> None:
        assert self._jobcomp is not None
        try:
            st = self._jobcomp.stat()
            if self._inode != st.st_ino or st.st_size < self._offset:
                self._inode, self._offset = st.st_ino, 0  # new or truncated file: read it from the top
            with self._jobcomp.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            with self._lock:
                self._sources["jobcomp"] = True  # no job has finished yet
            return
        except OSError as e:
            self._down("jobcomp", e)
            return
        lines, used = parse.jobcomp_records(data)
        self._offset += used
        records = []
        for line in lines:
            state = parse.jobcomp_fields(line).get("JobState", "").split(" ", 1)[0]
            if state in states.REQUEUE:
                continue  # the end of a run that was requeued; counted from squeue's restart count
            job = parse.jobcomp_line(line)
            if job is not None:
                records.append(job)
        with self._lock:
            self._sources["jobcomp"] = True
        self._held.extend(records)

    def _poll_sacct(self) -> None:
        now = self._clock()
        argv = [
            self.s.sacct,
            "-a",
            "-X",
            "-n",
            "-P",
            f"--delimiter={parse.SACCT_SEP}",
            "-o",
            parse.SACCT_FIELDS,
            "-S",
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self._sacct_since)),
            "-E",
            "now",
            "-s",
            ",".join(states.FINISHED),
        ]
        try:
            records = parse.sacct(run(argv, self.s.command_timeout, self._env))
        except SourceError as e:
            self._down("sacct", e)
            return
        with self._lock:
            self._sources["sacct"] = True
            fresh = [j for j in records if (j.job_id, j.end) not in self._sacct_seen]
            for j in fresh:
                self._sacct_seen[(j.job_id, j.end)] = now
        self._sacct_since = now - 600  # overlap: late records and clock skew; dedupe above
        self._held.extend(fresh)

    def _settle(self) -> None:
        """The finished records read this poll, checked against squeue's listing taken after them
        (``exporter.slurm.verify``): those it backs are counted and kept with the scheduler's
        labels, the others refused, counted by reason and logged once per reason."""
        held, self._held = self._held, []
        if not held:
            return
        kept: list[FinishedJob] = []
        with self._lock:
            for job in held:
                backed, why = verify.check(job, self._listed.get(job.job_id), self._watched_since)
                if backed is not None:
                    kept.append(backed)
                    continue
                self._refused[why] = self._refused.get(why, 0) + 1
                if why not in self._refused_said:
                    self._refused_said.add(why)
                    log.warning(
                        "slurm watcher: the finished record of job %s (user %r) is not what squeue says (%s): "
                        "refused; gpuledger_slurm_records_refused_total counts such records (logged once per reason)",
                        job.job_id[:20],
                        job.user[:40],
                        _REFUSED[why],
                    )
        self._finish(kept)

    def _finish(self, jobs: list[FinishedJob]) -> None:
        """Count finished jobs (those that ended since the watcher started) and keep all of them."""
        now = self._clock()
        with self._lock:
            for j in jobs:
                if j.end < self._started_at - self.s.interval:
                    continue  # history from before this process: stored, not counted
                self._partitions.add(j.partition)
                key = (j.partition, j.state)
                self._finished[key] = self._finished.get(key, 0) + 1
                if j.start is not None:
                    self._gpu_seconds[key] = self._gpu_seconds.get(key, 0.0) + j.gpus * max(0.0, j.end - j.start)
                    self._observe_start(j.job_id, j.partition, j.submit, j.eligible, j.start, now)
            for j in jobs:
                self._job_info.finished(j, now)
        if jobs and self.keep is not None:
            self.keep(list(jobs))
