"""Embedded history: per-minute counter increments per GPU and per job, benchmark records and
finished scheduler jobs in SQLite, for a single node that runs no Prometheus."""

from exporter.history.schema import SCHEMA_VERSION, HistoryError, connect
from exporter.history.tables import (
    BenchRecord,
    FinishedJob,
    GpuTotals,
    bench_records,
    finished_jobs,
    insert_bench,
    insert_job_minutes,
    insert_jobs,
    insert_minutes,
    job_totals,
    totals,
    transaction,
    write_bench,
    write_rows,
)
from exporter.history.writer import MAX_PENDING, HistoryWriter

__all__ = [
    "MAX_PENDING",
    "SCHEMA_VERSION",
    "BenchRecord",
    "FinishedJob",
    "GpuTotals",
    "HistoryError",
    "HistoryWriter",
    "bench_records",
    "connect",
    "finished_jobs",
    "insert_bench",
    "insert_job_minutes",
    "insert_jobs",
    "insert_minutes",
    "job_totals",
    "totals",
    "transaction",
    "write_bench",
    "write_rows",
]
