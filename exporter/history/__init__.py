"""Embedded history: per-minute counter increments per GPU and per job, benchmark records and
finished scheduler jobs in SQLite, for a single node that runs no Prometheus."""

from exporter.history.schema import SCHEMA_VERSION, HistoryError, connect
from exporter.history.tables import (
    BenchRecord,
    FinishedJob,
    GpuTotals,
    bench_records,
    finished_jobs,
    job_totals,
    totals,
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
    "job_totals",
    "totals",
    "write_bench",
    "write_rows",
]
