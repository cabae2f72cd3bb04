"""What the history holds, table by table: records, inserts (inside a caller's transaction)
and reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from exporter.jobs import JobKey
from exporter.state import ROLLUP_FIELDS, JobMinuteRow, MinuteRow


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark of one round: result ok, failed, timeout or skipped_busy; data is the
    result as JSON or the error text."""

    finished: float  # wall clock, epoch seconds
    bench: str
    result: str
    duration: float | None
    backend: str
    world_size: int
    data: str | None


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


@dataclass(frozen=True, slots=True)
class GpuTotals:
    uuid: str
    minutes: int
    values: dict[str, float | None]


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


_COLS = ", ".join(ROLLUP_FIELDS)
_UPSERT_MINUTE = (
    f"INSERT INTO gpu_minutes (uuid, minute, {_COLS}) VALUES (?, ?, {', '.join('?' * len(ROLLUP_FIELDS))}) "
    "ON CONFLICT (uuid, minute) DO UPDATE SET "
    + ", ".join(
        f"{f} = CASE WHEN {f} IS NULL THEN excluded.{f} WHEN excluded.{f} IS NULL THEN {f} ELSE {f} + excluded.{f} END"
        for f in ROLLUP_FIELDS
    )
)
_UPSERT_GPU = (
    "INSERT INTO gpus (uuid, hostname, gpu_index, model, pci_bus_id, first_seen, last_seen) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uuid) DO UPDATE SET hostname = excluded.hostname, "
    "gpu_index = excluded.gpu_index, model = excluded.model, pci_bus_id = excluded.pci_bus_id, "
    "last_seen = max(last_seen, excluded.last_seen)"
)
_UPSERT_JOB_MINUTE = (
    "INSERT INTO job_minutes (uuid, minute, job_id, user, pod, namespace, container, sampled_seconds, "
    "busy_seconds, energy_joules) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
    "sampled_seconds = sampled_seconds + excluded.sampled_seconds, "
    "busy_seconds = busy_seconds + excluded.busy_seconds, energy_joules = energy_joules + excluded.energy_joules"
)


def insert_minutes(db: sqlite3.Connection, rows: Sequence[MinuteRow], hostname: str) -> None:
    """A minute written twice (a restart inside a minute) adds up."""
    seen: dict[str, tuple[MinuteRow, int, int]] = {}
    for r in rows:
        _, first, last = seen.get(r.info.uuid, (r, r.minute, r.minute))
        seen[r.info.uuid] = (r, min(first, r.minute), max(last, r.minute))
    db.executemany(_UPSERT_GPU, [(u, hostname, r.info.index, r.info.model, r.info.pci_bus_id, first, last)
                                 for u, (r, first, last) in seen.items()])  # fmt: skip
    db.executemany(_UPSERT_MINUTE, [(r.info.uuid, r.minute, *(r.values.get(f) for f in ROLLUP_FIELDS)) for r in rows])


def insert_job_minutes(db: sqlite3.Connection, rows: Sequence[JobMinuteRow]) -> None:
    db.executemany(_UPSERT_JOB_MINUTE, [(r.uuid, r.minute, *r.job.labels(), r.sampled_seconds, r.busy_seconds,
                                         r.energy_joules) for r in rows])  # fmt: skip


def insert_bench(db: sqlite3.Connection, records: Sequence[BenchRecord]) -> None:
    db.executemany(
        "INSERT INTO bench_runs (finished, bench, result, duration, backend, world_size, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r.finished, r.bench, r.result, r.duration, r.backend, r.world_size, r.data) for r in records],
    )


def insert_jobs(db: sqlite3.Connection, jobs: Sequence[FinishedJob]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO jobs (cluster, job_id, name, user, partition, state, submit, eligible, start, end, "
        "gpus, exit_code, restarts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(j.cluster, j.job_id, j.name, j.user, j.partition, j.state, j.submit, j.eligible, j.start, j.end, j.gpus,
          j.exit_code, j.restarts) for j in jobs],
    )  # fmt: skip


def write_rows(db: sqlite3.Connection, rows: Iterable[MinuteRow], hostname: str) -> int:
    rows = list(rows)
    with transaction(db):
        insert_minutes(db, rows, hostname)
    return len(rows)


def write_bench(db: sqlite3.Connection, records: Iterable[BenchRecord]) -> int:
    records = list(records)
    with transaction(db):
        insert_bench(db, records)
    return len(records)


INSERTS: dict[type, Callable[[sqlite3.Connection, list[Any], str], None]] = {
    MinuteRow: insert_minutes,
    JobMinuteRow: lambda db, rows, _host: insert_job_minutes(db, rows),
    BenchRecord: lambda db, rows, _host: insert_bench(db, rows),
    FinishedJob: lambda db, rows, _host: insert_jobs(db, rows),
}
"""How the writer stores each kind of item it is handed."""


def bench_records(db: sqlite3.Connection, since: float = 0.0) -> list[BenchRecord]:
    """Benchmark records in time order (for restoring state and for trends)."""
    rows = db.execute(
        "SELECT finished, bench, result, duration, backend, world_size, data FROM bench_runs "
        "WHERE finished >= ? ORDER BY finished, id",
        (since,),
    )
    return [BenchRecord(*r) for r in rows]


def finished_jobs(db: sqlite3.Connection, start: float, end: float) -> list[FinishedJob]:
    """Jobs that ended in [start, end), in end order."""
    rows = db.execute(
        "SELECT cluster, job_id, name, user, partition, state, submit, eligible, start, end, gpus, exit_code, "
        "restarts FROM jobs WHERE end >= ? AND end < ? ORDER BY end, job_id",
        (start, end),
    )
    return [FinishedJob(*r) for r in rows]


def job_totals(db: sqlite3.Connection, start: int, end: int) -> dict[tuple[str, JobKey], tuple[float, float, float]]:
    """(uuid, job) -> (sampled, busy, energy) summed over minutes in [start, end)."""
    out = {}
    for uuid, *labels, s, b, e in db.execute(
        "SELECT uuid, job_id, user, pod, namespace, container, sum(sampled_seconds), sum(busy_seconds), "
        "sum(energy_joules) FROM job_minutes WHERE minute >= ? AND minute < ? "
        "GROUP BY uuid, job_id, user, pod, namespace, container",
        (start, end),
    ):
        out[(uuid, JobKey(*labels))] = (s, b, e)
    return out


def totals(db: sqlite3.Connection, start: int, end: int) -> dict[str, GpuTotals]:
    """Sum of every rollup per GPU over minutes in [start, end)."""
    sums = ", ".join(f"sum({f})" for f in ROLLUP_FIELDS)
    out: dict[str, GpuTotals] = {}
    for row in db.execute(
        f"SELECT uuid, count(*), {sums} FROM gpu_minutes WHERE minute >= ? AND minute < ? GROUP BY uuid",
        (start, end),
    ):
        out[row[0]] = GpuTotals(row[0], int(row[1]), dict(zip(ROLLUP_FIELDS, row[2:], strict=True)))
    return out
