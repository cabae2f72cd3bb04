"""The history file: SQLite in WAL mode, schema versioned by ``PRAGMA user_version`` and
migrated forward on open (a file newer than this code is refused)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from exporter.state import ROLLUP_FIELDS

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3

MIGRATIONS: dict[int, str] = {
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
    3: """
    CREATE TABLE job_minutes (
        uuid TEXT NOT NULL,
        minute INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        user TEXT NOT NULL,
        pod TEXT NOT NULL,
        namespace TEXT NOT NULL,
        container TEXT NOT NULL,
        sampled_seconds REAL NOT NULL,
        busy_seconds REAL NOT NULL,
        energy_joules REAL NOT NULL,
        PRIMARY KEY (uuid, minute, job_id, user, pod, namespace, container)
    ) WITHOUT ROWID;
    CREATE INDEX job_minutes_by_minute ON job_minutes (minute);
    CREATE TABLE jobs (
        cluster TEXT NOT NULL,
        job_id TEXT NOT NULL,
        name TEXT NOT NULL,
        user TEXT NOT NULL,
        partition TEXT NOT NULL,
        state TEXT NOT NULL,
        submit REAL,
        eligible REAL,
        start REAL,
        end REAL NOT NULL,
        gpus INTEGER NOT NULL,
        exit_code TEXT NOT NULL,
        restarts INTEGER NOT NULL,
        PRIMARY KEY (cluster, job_id, end)
    ) WITHOUT ROWID;
    CREATE INDEX jobs_by_end ON jobs (end);
    """,
}


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
            for statement in (s.strip() for s in MIGRATIONS[v].split(";")):
                if statement:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {v}")
            db.execute("COMMIT")
            log.info("history %s: schema migrated to v%d", path, v)
    return db
