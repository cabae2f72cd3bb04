"""Embedded history: per-minute counter increments per GPU in SQLite, for a single node that
runs no Prometheus.

One transaction per minute, WAL journal: a SIGKILL at any moment loses at most the minute
being accumulated in memory and never corrupts the file (SQLite's atomic commit). The schema
is versioned with ``PRAGMA user_version`` and migrated forward on open.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.state import ROLLUP_FIELDS, HistoryStats, MinuteRow

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
MAX_PENDING_ROWS = 200_000  # rows kept in memory while the file cannot be written

_MIGRATIONS: dict[int, str] = {
    1: f"""
    CREATE TABLE gpus (
        uuid TEXT PRIMARY KEY,
        hostname TEXT NOT NULL,
        gpu_index INTEGER NOT NULL,
        model TEXT NOT NULL,
        pci_bus_id TEXT NOT NULL,
        first_seen INTEGER NOT NULL,
        last_seen INTEGER NOT NULL
    );
    CREATE TABLE gpu_minutes (
        uuid TEXT NOT NULL,
        minute INTEGER NOT NULL,
        {", ".join(f"{f} REAL" for f in ROLLUP_FIELDS)},
        PRIMARY KEY (uuid, minute)
    ) WITHOUT ROWID;
    CREATE INDEX gpu_minutes_by_minute ON gpu_minutes (minute);
    """,
    2: """
    CREATE TABLE bench_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        finished REAL NOT NULL,
        bench TEXT NOT NULL,
        result TEXT NOT NULL,
        duration REAL,
        backend TEXT NOT NULL,
        world_size INTEGER NOT NULL,
        data TEXT
    );
    CREATE INDEX bench_runs_by_bench ON bench_runs (bench, finished);
    """,
}


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


class HistoryError(RuntimeError):
    pass


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and for writers create or migrate) a history file."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise HistoryError(f"history file not found: {path}")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes; see docs
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        db.close()
        raise HistoryError(f"{path}: schema v{version} is newer than this gpuledger understands (v{SCHEMA_VERSION})")
    if version < SCHEMA_VERSION:
        if readonly:
            db.close()
            raise HistoryError(f"{path}: schema v{version} needs migrating; open it with the exporter once")
        for v in range(version + 1, SCHEMA_VERSION + 1):
            db.execute("BEGIN IMMEDIATE")
            for statement in _statements(_MIGRATIONS[v]):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {v}")
            db.execute("COMMIT")
            log.info("history %s: schema migrated to v%d", path, v)
    return db


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


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


def write_bench(db: sqlite3.Connection, records: Iterable[BenchRecord]) -> int:
    records = list(records)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(
            "INSERT INTO bench_runs (finished, bench, result, duration, backend, world_size, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r.finished, r.bench, r.result, r.duration, r.backend, r.world_size, r.data) for r in records],
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return len(records)


def bench_records(db: sqlite3.Connection, since: float = 0.0) -> list[BenchRecord]:
    """Benchmark records in time order (for restoring state and for trends)."""
    rows = db.execute(
        "SELECT finished, bench, result, duration, backend, world_size, data FROM bench_runs "
        "WHERE finished >= ? ORDER BY finished, id",
        (since,),
    )
    return [BenchRecord(*r) for r in rows]


def write_rows(db: sqlite3.Connection, rows: Iterable[MinuteRow], hostname: str) -> int:
    """Write rows in one transaction; a minute written twice (a restart inside a minute) adds up."""
    rows = list(rows)
    if not rows:
        return 0
    seen: dict[str, tuple[MinuteRow, int, int]] = {}
    for r in rows:
        _, first, last = seen.get(r.info.uuid, (r, r.minute, r.minute))
        seen[r.info.uuid] = (r, min(first, r.minute), max(last, r.minute))
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(
            _UPSERT_GPU,
            [
                (u, hostname, r.info.index, r.info.model, r.info.pci_bus_id, first, last)
                for u, (r, first, last) in seen.items()
            ],
        )
        db.executemany(
            _UPSERT_MINUTE,
            [(r.info.uuid, r.minute, *(r.values.get(f) for f in ROLLUP_FIELDS)) for r in rows],
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return len(rows)


@dataclass(frozen=True, slots=True)
class GpuTotals:
    uuid: str
    minutes: int
    values: dict[str, float | None]


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


class HistoryWriter:
    """Takes minute rows from the sampler and benchmark records from the scheduler, and commits
    them in a background thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        hostname: str,
        retention_days: int = 400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.hostname = hostname
        self.retention_seconds = retention_days * 86400
        self._clock = clock
        self._db = connect(self.path)  # fail early: a bad path is a start-up error
        self._queue: queue.Queue[list[MinuteRow] | list[BenchRecord] | None] = queue.Queue()
        self._pending: list[MinuteRow] = []
        self._pending_bench: list[BenchRecord] = []
        self._rows_written = 0
        self._errors = 0
        self._pruned_at = 0.0
        self._thread: threading.Thread | None = None

    def submit(self, rows: list[MinuteRow]) -> None:
        self._queue.put(rows)

    def submit_bench(self, records: list[BenchRecord]) -> None:
        self._queue.put(records)

    def bench_records(self, since: float = 0.0) -> list[BenchRecord]:
        """What earlier runs recorded (read before start(); the writer thread owns the connection)."""
        return bench_records(self._db, since)

    def stats(self) -> HistoryStats:
        return HistoryStats(rows_written=self._rows_written, write_errors=self._errors)

    def start(self) -> None:
        self._prune()
        self._thread = threading.Thread(target=self._run, name="gpuledger-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30.0)
            self._thread = None
        self._drain()
        self._write()
        if self._pending:
            log.error("history: %d rows could not be written before exit", len(self._pending))
        self._db.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            stopping = self._drain(first)
            self._write()
            if stopping:
                return
            if self._clock() - self._pruned_at > 3600:
                self._prune()

    def _drain(self, *items: list[MinuteRow] | list[BenchRecord] | None) -> bool:
        """Move queued rows to pending; True when the stop sentinel was among them."""
        stopping = False
        batch = list(items)
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for item in batch:
            if item is None:
                stopping = True
            else:
                for x in item:
                    if isinstance(x, BenchRecord):
                        self._pending_bench.append(x)
                    else:
                        self._pending.append(x)
        return stopping

    def _write(self) -> None:
        if not self._pending and not self._pending_bench:
            return
        try:
            if self._pending_bench:
                write_bench(self._db, self._pending_bench)
                self._pending_bench.clear()
            self._rows_written += write_rows(self._db, self._pending, self.hostname)
            self._pending.clear()
        except sqlite3.Error as e:
            self._errors += 1
            log.error(
                "history write to %s failed (%s); %d rows kept for retry",
                self.path,
                e,
                len(self._pending),
            )
            if len(self._pending) > MAX_PENDING_ROWS:
                dropped = len(self._pending) - MAX_PENDING_ROWS
                del self._pending[:dropped]
                log.error("history: dropped the %d oldest unwritten rows", dropped)

    def _prune(self) -> None:
        self._pruned_at = self._clock()
        cutoff = int(self._pruned_at) - self.retention_seconds
        try:
            n = self._db.execute("DELETE FROM gpu_minutes WHERE minute < ?", (cutoff,)).rowcount
            n += self._db.execute("DELETE FROM bench_runs WHERE finished < ?", (cutoff,)).rowcount
            if n:
                log.info("history: removed %d rows older than the retention", n)
        except sqlite3.Error as e:
            log.error("history retention pass failed: %s", e)
