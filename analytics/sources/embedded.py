"""The exporter's embedded SQLite history as a source (a single node without Prometheus).

Everything here is exact: per-minute counter increments, per-job increments, the finished jobs'
own times and the benchmark records. Pending GPU-hours come from finished jobs only (jobs still
pending when the report runs are not in the history yet).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import sqlite3
import zoneinfo
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from analytics.sources.base import (
    GpuFigures,
    JobFigures,
    JobRecords,
    Labels,
    PodKey,
    QueuePart,
    SchedulerJob,
    SourceUnavailable,
    Span,
    energy_measure,
    mig_busy_measure,
    percentile,
)
from analytics.sources.enrich import Enriched
from domain import scaling
from domain.states import FAILED
from domain.week import BenchRun, BenchWeek, FailureWeek, GpuDay, GpuWeek, JobWeek, QueueWeek, ScalingRun, Window
from exporter import history
from exporter.benchmarks.results import allreduce_from, train_from

MINUTE = 60.0  # the history's rows: one per GPU and minute
LOCAL = "local"  # the scrape target of every GPU here: the exporter that wrote this history


class EmbeddedSource(Enriched):
    name = "embedded"
    parallel = False  # one SQLite connection, read in this thread
    pod_label_names: tuple[str, ...] = ()  # no kube-state-metrics here

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.db = history.connect(self.path, readonly=True)  # after PRAGMA quick_check
        except history.HistoryError as e:  # names the file: damaged, not SQLite, newer...
            raise SourceUnavailable(f"embedded history: {e}") from e
        except sqlite3.Error as e:
            raise SourceUnavailable(f"embedded history {self.path}: {e}") from e

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise SourceUnavailable(f"embedded history {self.path}: {e}") from e

    def gpus(self, w: Window) -> GpuFigures:
        with self._reading():
            gpus = self._gpus(w)
        return GpuFigures(tuple(gpus), targets={g.uuid: LOCAL for g in gpus})

    def jobs(self, w: Window, g: GpuFigures) -> JobFigures:
        with self._reading():
            return JobFigures(tuple(self._jobs(w, {x.uuid: x.host for x in g.gpus})))

    def history_start(self, w: Window) -> float | None:
        with self._reading():
            return self._first_minute()

    def queue(self, w: Window) -> QueuePart:
        with self._reading():
            return QueuePart(self._scheduler(w)[0], ("pending GPU-hours count finished jobs only",))

    def failures(self, w: Window) -> list[FailureWeek]:
        with self._reading():
            return self._scheduler(w)[1]

    def bench(self, w: Window) -> BenchWeek | None:
        with self._reading():
            return self._bench(w)

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        """The finished jobs' records (slurmctld's word, read by the watcher) and what the jobs'
        environment named while they ran; one history is one cluster's, keyed by job id alone."""
        with self._reading():
            env = history.job_attributes(self.db, int(w.start), int(w.end))
            finished = history.finished_jobs(self.db, w.start, w.end + 400 * 86400)  # ended in or after the week
        scheduler = {("", j.job_id): SchedulerJob("", j.account, j.partition, j.qos) for j in finished}
        claims = {("", LOCAL, k): (a.account, a.partition, a.qos) for k, a in env.items()}
        return JobRecords(scheduler, claims_by_target=claims)

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> Mapping[PodKey, Labels] | None:
        return None

    def job_span(self, job: str, now: float) -> Span | None:
        ns, sep, pod = job.partition("/")
        if not (sep and ns and pod):
            ns = pod = ""
        with self._reading():
            first, last = self.db.execute(
                "SELECT min(minute), max(minute) FROM job_minutes "
                "WHERE job_id = ? OR (job_id = '' AND (pod = ? OR (namespace = ? AND pod = ?)))",
                (job, job, ns, pod),
            ).fetchone()
        return None if first is None else Span(float(first), float(last) + 60.0)

    def job_states(self, start: float, end: float) -> dict[str, str] | None:
        """Slurm job id -> its final state, for the jobs that ended in or after [start, end)."""
        with self._reading():
            finished = history.finished_jobs(self.db, start, end + 400 * 86400)
        return {j.job_id: j.state for j in finished}

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()

    def describe(self) -> str:
        return f"the embedded history {self.path}"

    def close(self) -> None:
        self.db.close()

    def _first_minute(self) -> float | None:
        """When the history's first sample was taken: its first minute's start plus the part of
        that minute no GPU sampled (an exporter starts mid-minute; that is not a gap)."""
        first, sampled = self.db.execute(
            "SELECT minute, MAX(sampled_seconds) FROM gpu_minutes WHERE minute = (SELECT MIN(minute) FROM gpu_minutes)"
        ).fetchone()
        if first is None:
            return None
        return float(first) + max(0.0, MINUTE - (sampled or 0.0))

    def _gpus(self, w: Window) -> list[GpuWeek]:
        ident = history.gpus(self.db)
        n_hours = math.ceil(w.hours)
        acc: dict[str, dict[str, list[float]]] = {}
        measured: dict[str, set[str]] = defaultdict(set)
        for hour in history.gpu_hours(self.db, int(w.start), int(w.end)):
            a = acc.setdefault(hour.uuid, {f: [0.0] * n_hours for f in hour.values})
            for f, v in hour.values.items():
                a[f][hour.hour] += v or 0.0
                if v is not None:
                    measured[hour.uuid].add(f)
        out = []
        for uuid, a in sorted(acc.items()):
            g = ident.get(uuid)
            host, model, gpu = (g.hostname, g.model, str(g.index)) if g else ("", "", "")
            has_energy = "energy_joules" in measured[uuid]
            energy = a["energy_joules"]
            out.append(
                GpuWeek(
                    uuid=uuid,
                    host=host,
                    model=model,
                    gpu=gpu,
                    sampled_s=sum(a["sampled_seconds"]),
                    busy_s=sum(a["busy_seconds"]),
                    sm_active_s=sum(a["sm_active_seconds"]) if "sm_active_seconds" in measured[uuid] else None,
                    allocated_s=sum(a["allocated_seconds"]),
                    allocated_idle_s=sum(a["allocated_idle_seconds"]),
                    energy_j=sum(energy) if has_energy else None,
                    energy_by_hour=tuple(energy) if has_energy else None,
                    daily=_daily(w, a["sampled_seconds"], a["busy_seconds"], energy if has_energy else None),
                    stalled_s=sum(a["stalled_seconds"]) if "stalled_seconds" in measured[uuid] else None,
                    busy_measure=mig_busy_measure(sum(a["sampled_seconds"]), sum(a["mig_sampled_seconds"])),
                    energy_measure=energy_measure(sum(a["sampled_seconds"]), sum(a["energy_integrated_seconds"])),
                )
            )
        return out

    def _jobs(self, w: Window, hosts: dict[str, str]) -> list[JobWeek]:
        return [
            JobWeek(
                t.uuid,
                hosts.get(t.uuid, ""),
                t.job,
                t.sampled_seconds,
                t.busy_seconds,
                t.energy_joules,
                t.sm_active_seconds,
                t.allocated_idle_seconds,
                charged_s=t.charged_seconds,
                stalled_s=t.stalled_seconds,
                nvlink_bytes=t.nvlink_bytes,
                pcie_bytes=t.pcie_bytes,
            )
            for t in history.job_totals(self.db, int(w.start), int(w.end))
        ]

    def _scheduler(self, w: Window) -> tuple[list[QueueWeek], list[FailureWeek]]:
        finished = history.finished_jobs(self.db, w.start, w.end + 400 * 86400)  # ended in or after the week
        waits: dict[str, list[float]] = defaultdict(list)
        pending: dict[str, float] = defaultdict(float)
        for j in finished:
            if j.start is not None and j.submit is not None and w.start <= j.start < w.end:
                waits[j.partition].append(j.start - j.submit)
            if j.submit is not None:
                until = j.start if j.start is not None else j.end
                overlap = max(0.0, min(until, w.end) - max(j.submit, w.start))
                pending[j.partition] += j.gpus * overlap / 3600
        queue = [
            QueueWeek(
                p,
                "exact",
                len(v),
                sum(v) / len(v) if v else None,
                percentile(v, 0.5),
                percentile(v, 0.95),
                max(v) if v else None,
                False,
                pending.get(p, 0.0),
            )
            for p in sorted(set(waits) | set(pending))
            for v in [waits.get(p, [])]
        ]
        states: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        requeued: dict[str, int] = defaultdict(int)
        lost: dict[str, float] = defaultdict(float)
        for j in finished:
            if not w.start <= j.end < w.end:
                continue
            states[j.partition][j.state] += 1
            requeued[j.partition] += j.restarts
            if j.state in FAILED and j.start is not None:
                lost[j.partition] += j.gpus * (j.end - j.start) / 3600
        failures = [FailureWeek(p, dict(s), requeued[p], lost.get(p, 0.0)) for p, s in sorted(states.items())]
        return queue, failures

    def _bench(self, w: Window) -> BenchWeek | None:
        """Every run of the window (world size -> runs, in time order); throughput and model from the last."""
        busbw: dict[int, list[BenchRun]] = defaultdict(list)
        speedup: dict[int, list[BenchRun]] = defaultdict(list)
        efficiency: dict[int, list[BenchRun]] = defaultdict(list)
        throughput: dict[int, float] = {}
        model = ""
        found = False
        runs_of_scripts: list[ScalingRun] = []  # gpuledger scaling's records
        for r in history.bench_records(self.db, w.start):  # in time order
            if not (r.finished < w.end and r.result in ("ok", "failed") and r.data and r.data.startswith("{")):
                continue
            if r.bench == "allreduce":
                ar = allreduce_from(r.data)
                busbw[ar.world_size].append(BenchRun(r.finished, ar.busbw_largest))
                found = True
            elif r.bench == scaling.BENCH:
                if (run := scaling.scaling_from(r.finished, r.data)) is not None:
                    runs_of_scripts.append(run)
                    found = True
            elif r.bench == "train":
                t = train_from(r.data)
                model, throughput, found = t.model, {}, True
                for row in t.rows:
                    speedup[row.world_size].append(BenchRun(r.finished, row.speedup))
                    efficiency[row.world_size].append(BenchRun(r.finished, row.efficiency))
                    throughput[row.world_size] = row.samples_per_second
            else:
                found = True  # another benchmark: the week has results, none of these figures
        if not found:
            return None

        def runs(d: dict[int, list[BenchRun]]) -> dict[int, tuple[BenchRun, ...]]:
            return {n: tuple(v) for n, v in sorted(d.items())}

        week = BenchWeek.of_runs(runs(busbw), runs(speedup), runs(efficiency), throughput, model)
        return dataclasses.replace(week, scaling=scaling.last_per_name(runs_of_scripts))


def _daily(w: Window, sampled: list[float], busy: list[float], energy: list[float] | None) -> tuple[GpuDay, ...]:
    """Hourly figures folded into the window's local days."""
    tz = zoneinfo.ZoneInfo(w.timezone)
    days: dict[dt.date, list[float]] = {}
    for h in range(len(sampled)):
        day = dt.datetime.fromtimestamp(w.start + h * 3600 + 1, tz).date()
        d = days.setdefault(day, [0.0, 0.0, 0.0])
        d[0] += sampled[h]
        d[1] += busy[h]
        d[2] += energy[h] if energy is not None else 0.0
    return tuple(GpuDay(s, b, e if energy is not None else None) for s, b, e in (days[k] for k in sorted(days)))
