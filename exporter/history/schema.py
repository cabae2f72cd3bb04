"""The history file: SQLite in WAL mode, schema versioned by ``PRAGMA user_version`` and
migrated forward on open (a file newer than this code is refused).

The schema is frozen per version. Each entry of ``MIGRATIONS`` is literal SQL, written once and
never edited: files in the field were made by it, and SQLite keeps each ``CREATE`` statement's
text in ``sqlite_master``. Never build DDL from a dataclass or a field list (``ROLLUP_FIELDS``):
changing the list would silently rewrite an old version. To change the schema, add the next
version at the end:

- a new counter is ``ALTER TABLE gpu_minutes ADD COLUMN <name> REAL`` (NULL in older rows means
  "not measured", which every read already handles), its name the fact row's ``history`` column
  (``exporter/facts``) or one of ``snapshot.COUNTER_COLUMNS``;
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

SCHEMA_VERSION = 8

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
    5: (
        # Slurm account and QOS of finished jobs (NULL in older rows: not known); the account,
        # partition and QOS of the jobs the exporter attributed, as their environment named them,
        # once per job (not per minute)
        "ALTER TABLE jobs ADD COLUMN account TEXT",
        "ALTER TABLE jobs ADD COLUMN qos TEXT",
        """CREATE TABLE job_attrs (
        job_id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        partition TEXT NOT NULL,
        qos TEXT NOT NULL,
        first_minute INTEGER NOT NULL,
        last_minute INTEGER NOT NULL
    ) WITHOUT ROWID""",
        "CREATE INDEX job_attrs_by_last_minute ON job_attrs (last_minute)",
    ),
    6: (
        # the fact table's counters (exporter/facts): PCIe and NVLink bytes (NVLink: all links),
        # and the time each NVML performance policy held the clocks down; NULL: not measured
        "ALTER TABLE gpu_minutes ADD COLUMN pcie_tx_bytes REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN pcie_rx_bytes REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN nvlink_tx_bytes REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN nvlink_rx_bytes REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN power_violation_seconds REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN thermal_violation_seconds REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN sync_boost_violation_seconds REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN board_limit_violation_seconds REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN low_utilization_violation_seconds REAL",
        "ALTER TABLE gpu_minutes ADD COLUMN reliability_violation_seconds REAL",
    ),
    7: (
        # the seconds of each minute sampled while the GPU was in MIG mode (its busy time then is its
        # instances' SM activity, not NVML's utilisation); NULL: not in MIG mode, or an older writer
        "ALTER TABLE gpu_minutes ADD COLUMN mig_sampled_seconds REAL",
    ),
    8: (
        # the seconds of each minute whose energy was integrated from power samples (a GPU without
        # NVML's energy counter, before Volta); NULL: read from the counter, or an older writer
        "ALTER TABLE gpu_minutes ADD COLUMN energy_integrated_seconds REAL",
    ),
}


class HistoryError(RuntimeError):
    """The history file cannot be used; the message names the file and what is wrong."""


class HistoryDamaged(HistoryError):
    """The file is an SQLite database that fails its check: never written into, moved aside."""


SQLITE_MAGIC = b"SQLite format 3\x00"
_DAMAGE_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_MAX_DETAIL = 200  # characters of SQLite's complaint echoed into a message


def is_damage(e: sqlite3.Error) -> bool:
    """SQLite's 'database disk image is malformed' or 'file is not a database'."""
    return getattr(e, "sqlite_errorcode", None) in _DAMAGE_CODES


def is_full(e: sqlite3.Error) -> bool:
    """SQLite's 'database or disk is full' (SQLITE_FULL: the disk, or ``max_page_count``)."""
    return getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(e)


def damaged(path: Path, detail: str, said_by: str = "SQLite") -> HistoryDamaged:
    """The one-line message: SQLite's complaints joined, shortened, without its banner line."""
    parts = [x.strip() for x in detail.replace("*** in database main ***", "").splitlines() if x.strip()]
    text = "; ".join(parts)
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3] + "..."
    return HistoryDamaged(f"history file {path} is damaged ({said_by}: {text})")


def check(db: sqlite3.Connection, path: Path) -> None:
    """``PRAGMA quick_check``: raises :class:`HistoryDamaged` naming the file and SQLite's first
    complaints. About 10 ms on a week of 8 GPUs (80,640 minute rows, 5 MB)."""
    try:
        rows = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
    except sqlite3.DatabaseError as e:
        if is_damage(e):
            raise damaged(path, str(e)) from e
        # a full disk, an I/O error, a read-only folder: the file may be intact; never moved aside
        raise HistoryError(f"history file {path}: cannot read it now: {_reason(e)}") from e
    if rows != ["ok"]:
        raise damaged(path, "\n".join(rows), "quick_check")


def _looks_like_sqlite(head: bytes) -> bool:
    """The magic string, or (when that was overwritten) the header's fixed payload fractions."""
    return head.startswith(SQLITE_MAGIC) or (len(head) >= 24 and head[21:24] == b"\x40\x20\x20")


def _inspect(path: Path, readonly: bool) -> None:
    """What the path is, before SQLite touches it: refused with one line if not a history file."""
    try:
        if path.is_dir():
            raise HistoryError(f"history path {path} is a directory, not a file")
        if not path.exists():
            if readonly:
                raise HistoryError(f"history file not found: {path}")
            return
        with path.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        raise HistoryError(f"history file {path}: cannot read it: {e.strerror or e}") from e
    if head and not _looks_like_sqlite(head):
        raise HistoryError(
            f"history path {path} is not an SQLite history file (no SQLite header); "
            "left as it is: move it away or point history.path elsewhere"
        )


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and for writers create or migrate) a history file, after ``PRAGMA quick_check``.

    Raises :class:`HistoryDamaged` for a damaged SQLite file and :class:`HistoryError` for any
    other file that cannot be used (a directory, not SQLite, unreadable, newer than this code);
    the version is checked before anything is written and a refused file is left as it was. A
    zero-length file is an empty SQLite database: a writer makes a new history in it."""
    path = Path(path)
    _inspect(path, readonly)
    try:
        if readonly:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    except (sqlite3.Error, OSError) as e:
        raise HistoryError(f"history file {path}: cannot open it: {_reason(e)}") from e
    try:
        check(db, path)
        _open(db, path, readonly)
    except HistoryError:
        db.close()
        raise
    except sqlite3.Error as e:
        db.close()
        if is_damage(e):
            raise damaged(path, str(e)) from e
        raise HistoryError(f"history file {path}: {_reason(e)}") from e
    return db


def _reason(e: sqlite3.Error | OSError) -> str:
    if isinstance(e, OSError):
        return str(e.strerror or e)
    text = str(e)
    if is_full(e):
        text += " (the disk is full: the history is kept, and written again once there is room)"
    elif "readonly" in text or "unable to open" in text:
        text += " (can this user write the file and its folder? SQLite adds -wal and -shm files there)"
    elif "disk I/O error" in text:
        text += " (a full disk or a failing one: the history is kept, not moved aside; free space or check the disk)"
    return text


def _open(db: sqlite3.Connection, path: Path, readonly: bool) -> None:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path}: history schema v{version} is newer than this gpuledger understands (v{SCHEMA_VERSION}); "
            "upgrade gpuledger to open it"
        )
    if version < SCHEMA_VERSION and readonly:
        raise HistoryError(f"{path}: schema v{version} needs migrating; open it with the exporter once")
    if not readonly:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes; see docs
    for v in range(version + 1, SCHEMA_VERSION + 1):
        _migrate(db, path, v)


def _migrate(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Apply one migration in one transaction: a failure leaves the file at the version before."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in MIGRATIONS[version]:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {version}")
    except sqlite3.Error as e:
        if db.in_transaction:
            db.execute("ROLLBACK")
        if is_damage(e):
            raise
        raise HistoryError(f"{path}: migrating the history schema to v{version} failed: {_reason(e)}") from e
    db.execute("COMMIT")
    log.info("history %s: schema migrated to v%d", path, version)
