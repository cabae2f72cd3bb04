"""What the history holds, table by table: records, inserts (inside a caller's transaction)
and retention. Reads are in ``exporter.history.reads``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from exporter.benchmarks.records import BenchRecord
from exporter.slurm.records import FinishedJob
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT; on failure the original error, never the rollback's (SQLite
    rolls back by itself on a full disk, and ROLLBACK then says "no transaction is active")."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with suppress(sqlite3.Error):  # the error that got us here is the one to report
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
    "busy_seconds, energy_joules, charged_seconds, stalled_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT DO UPDATE SET "
    "sampled_seconds = sampled_seconds + excluded.sampled_seconds, "
    "busy_seconds = busy_seconds + excluded.busy_seconds, energy_joules = energy_joules + excluded.energy_joules, "
    + ", ".join(
        f"{f} = CASE WHEN {f} IS NULL THEN excluded.{f} WHEN excluded.{f} IS NULL THEN {f} ELSE {f} + excluded.{f} END"
        for f in ("charged_seconds", "stalled_seconds")
    )
)


def insert_minutes(db: sqlite3.Connection, rows: Sequence[MinuteRow], hostname: str) -> None:
    """A minute written twice (a restart inside a minute) adds up."""
    seen: dict[str, tuple[MinuteRow, int, int]] = {}
    for r in rows:
        _, first, last = seen.get(r.info.uuid, (r, r.minute, r.minute))
        seen[r.info.uuid] = (r, min(first, r.minute), max(last, r.minute))
    db.executemany(
        _UPSERT_GPU,
        [
            (u, hostname, r.info.index, r.info.model, r.info.pci_bus_id, first, last)
            for u, (r, first, last) in seen.items()
        ],
    )
    db.executemany(_UPSERT_MINUTE, [(r.info.uuid, r.minute, *(r.values.get(f) for f in ROLLUP_FIELDS)) for r in rows])


_UPSERT_JOB_ATTRS = (
    "INSERT INTO job_attrs (job_id, account, partition, qos, first_minute, last_minute) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (job_id) DO UPDATE SET first_minute = min(first_minute, excluded.first_minute), "
    "last_minute = max(last_minute, excluded.last_minute)"
)
"""A job's attributes are those first stored (as the exporter keeps its first process's)."""


def insert_job_minutes(db: sqlite3.Connection, rows: Sequence[JobMinuteRow]) -> None:
    """The minutes, and once per Slurm job the account, partition and QOS its environment named."""
    attrs: dict[str, tuple[str, str, str, int, int]] = {}
    for r in rows:
        if r.job.job_id and any(r.job.slurm()):
            a, p, q, first, last = attrs.get(r.job.job_id, (*r.job.slurm(), r.minute, r.minute))
            attrs[r.job.job_id] = (a, p, q, min(first, r.minute), max(last, r.minute))
    db.executemany(_UPSERT_JOB_ATTRS, [(job, *v) for job, v in attrs.items()])
    db.executemany(
        _UPSERT_JOB_MINUTE,
        [
            (
                r.uuid,
                r.minute,
                *r.job.labels(),
                r.sampled_seconds,
                r.busy_seconds,
                r.energy_joules,
                r.charged_seconds,
                r.stalled_seconds,
            )
            for r in rows
        ],
    )


def insert_bench(db: sqlite3.Connection, records: Sequence[BenchRecord]) -> None:
    db.executemany(
        "INSERT INTO bench_runs (finished, bench, result, duration, backend, world_size, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r.finished, r.bench, r.result, r.duration, r.backend, r.world_size, r.data) for r in records],
    )


def insert_jobs(db: sqlite3.Connection, jobs: Sequence[FinishedJob]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO jobs (cluster, job_id, name, user, partition, state, submit, eligible, start, end, "
        "gpus, exit_code, restarts, account, qos) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                j.cluster,
                j.job_id,
                j.name,
                j.user,
                j.partition,
                j.state,
                j.submit,
                j.eligible,
                j.start,
                j.end,
                j.gpus,
                j.exit_code,
                j.restarts,
                j.account,
                j.qos,
            )
            for j in jobs
        ],
    )


def delete_before(db: sqlite3.Connection, cutoff: float) -> int:
    """Remove every row older than cutoff (epoch seconds); the number of rows removed."""
    n = 0
    for sql in (
        "DELETE FROM gpu_minutes WHERE minute < ?",
        "DELETE FROM job_minutes WHERE minute < ?",
        "DELETE FROM bench_runs WHERE finished < ?",
        "DELETE FROM jobs WHERE end < ?",
        "DELETE FROM job_attrs WHERE last_minute < ?",
    ):
        n += db.execute(sql, (cutoff,)).rowcount
    return n


INSERTS: dict[type, Callable[[sqlite3.Connection, list[Any], str], None]] = {
    MinuteRow: insert_minutes,
    JobMinuteRow: lambda db, rows, _host: insert_job_minutes(db, rows),
    BenchRecord: lambda db, rows, _host: insert_bench(db, rows),
    FinishedJob: lambda db, rows, _host: insert_jobs(db, rows),
}
"""How the writer stores each kind of item it is handed."""
