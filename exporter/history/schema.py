"""The history file: SQLite in WAL mode, schema versioned by ``PRAGMA user_version`` and
migrated forward on open (a file newer than this code is refused).

The schema is frozen per version. Each entry of ``MIGRATIONS`` is literal SQL, written once and
never edited: files in the field were made by it, and SQLite keeps each ``CREATE`` statement's
text in ``sqlite_master``. Never build DDL from a dataclass or a field list (``ROLLUP_FIELDS``):
changing the list would silently rewrite an old version. To change the schema, add the next
version at the end:

- a new counter is ``ALTER TABLE gpu_minutes ADD COLUMN <name> REAL`` (NULL in older rows means
  "not measured", which every read already handles);
- a new table or index is its ``CREATE`` statement;
- then bump ``SCHEMA_VERSION``, rerun the tests with ``GPULEDGER_UPDATE_GOLDEN=1`` and review the
  diff of ``tests/golden/history-schema.sql``.

A new file is made by running every migration from 1, exactly as an old file is brought forward,
so a migrated file and a fresh one have the same ``sqlite_master``, column order included.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE gpus (
        uuid TEXT PRIMARY KEY,
        hostname TEXT NOT NULL,
        gpu_index INTEGER NOT NULL,
        model TEXT NOT NULL,
        pci_bus_id TEXT NOT NULL,
        first_seen INTEGER NOT NULL,
        last_seen INTEGER NOT NULL
    )""",
        # v1 files hold these columns on one line; the backslash keeps that text byte for byte
        """CREATE TABLE gpu_minutes (
        uuid TEXT NOT NULL,
        minute INTEGER NOT NULL,
        sampled_seconds REAL, busy_seconds REAL, sm_active_seconds REAL, tensor_active_seconds REAL, \
dram_active_seconds REAL, energy_joules REAL, allocated_seconds REAL, allocated_idle_seconds REAL,
        PRIMARY KEY (uuid, minute)
    ) WITHOUT ROWID""",
        "CREATE INDEX gpu_minutes_by_minute ON gpu_minutes (minute)",
    ),
    2: (
        """CREATE TABLE bench_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        finished REAL NOT NULL,
        bench TEXT NOT NULL,
        result TEXT NOT NULL,
        duration REAL,
        backend TEXT NOT NULL,
        world_size INTEGER NOT NULL,
        data TEXT
    )""",
        "CREATE INDEX bench_runs_by_bench ON bench_runs (bench, finished)",
    ),
    3: (
        """CREATE TABLE job_minutes (
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
    ) WITHOUT ROWID""",
        "CREATE INDEX job_minutes_by_minute ON job_minutes (minute)",
        """CREATE TABLE jobs (
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
    ) WITHOUT ROWID""",
        "CREATE INDEX jobs_by_end ON jobs (end)",
    ),
    4: (
        # stalled busy time per GPU; per job its charged (share of the GPU's time) and stalled time
        "ALTER TABLE gpu_minutes ADD COLUMN stalled_seconds REAL",
        "ALTER TABLE job_minutes ADD COLUMN charged_seconds REAL",
        "ALTER TABLE job_minutes ADD COLUMN stalled_seconds REAL",
    ),
}


class HistoryError(RuntimeError):
    pass


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and for writers create or migrate) a history file.

    The version is checked before anything is written: a file newer than this code is refused
    with a :class:`HistoryError` and left as it was."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise HistoryError(f"history file not found: {path}")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        db.close()
        raise HistoryError(
            f"{path}: history schema v{version} is newer than this gpuledger understands (v{SCHEMA_VERSION}); "
            "upgrade gpuledger to open it"
        )
    if version < SCHEMA_VERSION and readonly:
        db.close()
        raise HistoryError(f"{path}: schema v{version} needs migrating; open it with the exporter once")
    if not readonly:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes; see docs
    for v in range(version + 1, SCHEMA_VERSION + 1):
        _migrate(db, path, v)
    return db


def _migrate(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Apply one migration in one transaction: a failure leaves the file at the version before."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in MIGRATIONS[version]:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {version}")
    except sqlite3.Error as e:
        db.execute("ROLLBACK")
        db.close()
        raise HistoryError(f"{path}: migrating the history schema to v{version} failed: {e}") from e
    db.execute("COMMIT")
    log.info("history %s: schema migrated to v%d", path, version)
