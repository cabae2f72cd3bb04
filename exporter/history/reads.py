"""Reads of the history, each returning typed records: what the analytics source and the
daemon's start-up need, and the only place outside ``schema`` and ``tables`` that knows the SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass

from domain.jobs import JobKey
from exporter.benchmarks.records import BenchRecord
from exporter.slurm.records import FinishedJob
from exporter.snapshot import ROLLUP_FIELDS


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """A GPU as last seen by the exporter that wrote the file."""

    uuid: str
    hostname: str
    index: int
    model: str
    pci_bus_id: str
    first_seen: int  # epoch seconds of its first and last minute
    last_seen: int


@dataclass(frozen=True, slots=True)
class GpuHour:
    """One GPU's rollups summed over the minutes of one hour of a window."""

    uuid: str
    hour: int  # hours since the window's start: 0 covers [start, start + 3600)
    minutes: int  # minutes written
    values: Mapping[str, float | None]  # by rollup field; None: no minute of the hour measured it


@dataclass(frozen=True, slots=True)
class JobTotals:
    """One job's increments on one GPU, summed over a window."""

    uuid: str
    job: JobKey
    sampled_seconds: float
    busy_seconds: float
    energy_joules: float
    # the GPU's minutes apportioned by the job's share of their sampled seconds (exact for a job
    # that holds the GPU alone); None: no minute measured it
    sm_active_seconds: float | None = None
    allocated_idle_seconds: float | None = None
    # the job's share of the GPU's time, and its stalled busy time (schema v4); None: every minute
    # of the window left it unrecorded (written before v4, or no GPM for stalled)
    charged_seconds: float | None = None
    stalled_seconds: float | None = None
    # the GPU's NVLink and PCIe bytes (sent + received) in the job's minutes times its share of them
    # (schema v6); None: no minute measured them (no NVLink, an older writer)
    nvlink_bytes: float | None = None
    pcie_bytes: float | None = None


def gpus(db: sqlite3.Connection) -> dict[str, GpuIdentity]:
    """Every GPU the file has rows for, by uuid."""
    rows = db.execute("SELECT uuid, hostname, gpu_index, model, pci_bus_id, first_seen, last_seen FROM gpus")
    return {r[0]: GpuIdentity(*r) for r in rows}


_HOURLY = (
    "SELECT uuid, CAST((minute - ?) / 3600 AS INTEGER) AS hour, count(*), "
    + ", ".join(f"sum({f})" for f in ROLLUP_FIELDS)
    + " FROM gpu_minutes WHERE minute >= ? AND minute < ? GROUP BY uuid, hour ORDER BY uuid, hour"
)


def gpu_hours(db: sqlite3.Connection, start: int, end: int) -> list[GpuHour]:
    """Rollups per GPU and hour over minutes in [start, end), hours counted from start, in uuid
    and hour order. A sum is None when every minute of the hour left that counter unmeasured."""
    return [
        GpuHour(uuid, int(hour), int(n), dict(zip(ROLLUP_FIELDS, sums, strict=True)))
        for uuid, hour, n, *sums in db.execute(_HOURLY, (start, start, end))
    ]


_SHARE = "coalesce(j.charged_seconds, j.sampled_seconds) / g.sampled_seconds"
"""A job's share of its GPU's minute: its charged seconds (held, before schema 4) over the GPU's sampled."""


def job_totals(db: sqlite3.Connection, start: int, end: int) -> list[JobTotals]:
    """Per GPU and job, increments summed over minutes in [start, end), in uuid and job order.
    SM-active and allocated-idle seconds are the GPU's in the job's minutes, times the job's share
    of the GPU's sampled seconds there (its charged seconds, or its held ones in minutes written
    before schema 4); charged and stalled seconds are the job's own (charged: the held seconds in
    those older minutes; None where no minute has it). In a minute the GPU was in MIG mode
    (``mig_sampled_seconds``) a job's SM-active seconds are its own busy ones: its instance's SM
    activity times its share (``exporter.sampling.mig``), not the GPU's spread over its jobs (a GPU
    changes MIG mode only with no process on it, so no job's minute is in both modes)."""
    rows = db.execute(
        "SELECT j.uuid, j.job_id, j.user, j.pod, j.namespace, j.container, sum(j.sampled_seconds), "
        "sum(j.busy_seconds), sum(j.energy_joules), "
        "sum(CASE WHEN g.mig_sampled_seconds > 0 THEN j.busy_seconds "
        f"ELSE g.sm_active_seconds * {_SHARE} END), "
        f"sum(g.allocated_idle_seconds * {_SHARE}), "
        "CASE WHEN count(j.charged_seconds) THEN sum(coalesce(j.charged_seconds, j.sampled_seconds)) END, "
        "sum(j.stalled_seconds), "
        f"sum((g.nvlink_tx_bytes + g.nvlink_rx_bytes) * {_SHARE}), sum((g.pcie_tx_bytes + g.pcie_rx_bytes) * {_SHARE}) "
        "FROM job_minutes j LEFT JOIN gpu_minutes g ON g.uuid = j.uuid AND g.minute = j.minute "
        "WHERE j.minute >= ? AND j.minute < ? "
        "GROUP BY j.uuid, j.job_id, j.user, j.pod, j.namespace, j.container "
        "ORDER BY j.uuid, j.job_id, j.user, j.pod, j.namespace, j.container",
        (start, end),
    )
    return [
        JobTotals(uuid, JobKey(j, u, p, n, c), s, b, e, sm, idle, charged, stalled, nvlink, pcie)
        for uuid, j, u, p, n, c, s, b, e, sm, idle, charged, stalled, nvlink, pcie in rows
    ]


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
        "restarts, coalesce(account, ''), coalesce(qos, '') FROM jobs WHERE end >= ? AND end < ? ORDER BY end, job_id",
        (start, end),
    )
    return [FinishedJob(*r) for r in rows]


@dataclass(frozen=True, slots=True)
class JobAttributes:
    """A Slurm job's account, partition and QOS as the exporter found them in its environment."""

    job_id: str
    account: str
    partition: str
    qos: str
    first_minute: int
    last_minute: int


def job_attributes(db: sqlite3.Connection, start: int, end: int) -> dict[str, JobAttributes]:
    """By job id, the jobs the exporter attributed in minutes overlapping [start, end) (schema v5)."""
    rows = db.execute(
        "SELECT job_id, account, partition, qos, first_minute, last_minute FROM job_attrs "
        "WHERE last_minute >= ? AND first_minute < ?",
        (start, end),
    )
    return {r[0]: JobAttributes(*r) for r in rows}
