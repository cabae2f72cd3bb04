"""Embedded history: per-minute counter increments per GPU and per job, benchmark records and
finished scheduler jobs in SQLite, for a single node that runs no Prometheus."""

from exporter.benchmarks.records import BenchRecord
from exporter.history.reads import (
    GpuHour,
    GpuIdentity,
    JobAttributes,
    JobTotals,
    bench_records,
    finished_jobs,
    gpu_hours,
    gpus,
    job_attributes,
    job_totals,
)
from exporter.history.schema import SCHEMA_VERSION, HistoryDamaged, HistoryError, connect
from exporter.history.tables import (
    insert_bench,
    insert_job_minutes,
    insert_jobs,
    insert_minutes,
    transaction,
)
from exporter.history.writer import MAX_PENDING, HistoryWriter
from exporter.slurm.records import FinishedJob

__all__ = [
    "MAX_PENDING",
    "SCHEMA_VERSION",
    "BenchRecord",
    "FinishedJob",
    "GpuHour",
    "GpuIdentity",
    "HistoryDamaged",
    "HistoryError",
    "HistoryWriter",
    "JobAttributes",
    "JobTotals",
    "bench_records",
    "connect",
    "finished_jobs",
    "gpu_hours",
    "gpus",
    "insert_bench",
    "insert_job_minutes",
    "insert_jobs",
    "insert_minutes",
    "job_attributes",
    "job_totals",
    "transaction",
]
