"""The embedded SQLite history: schema, upserts, retention, write failures, SIGKILL safety."""

from __future__ import annotations

import random
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, MinuteRow
from tests.support.paths import REPO

DEV = DeviceInfo(index=0, uuid="GPU-aaaa", model="NVIDIA H200", pci_bus_id="00000000:01:00.0")


def row(minute: int, sampled: float = 60.0, busy: float = 30.0, sm: float | None = None) -> MinuteRow:
    values: dict[str, float | None] = dict.fromkeys(ROLLUP_FIELDS, 0.0)
    values.update(sampled_seconds=sampled, busy_seconds=busy, sm_active_seconds=sm, energy_joules=6000.0)
    return MinuteRow(minute=minute, info=DEV, values=values)


def write(path: Path, rows: list[MinuteRow], hostname: str) -> None:
    """Through the writer, as the daemon does: one writer per run of the exporter."""
    w = history.HistoryWriter(path, hostname=hostname)
    w.submit(rows)
    w.stop()


def insert(db: sqlite3.Connection, rows: list[MinuteRow], hostname: str) -> None:
    with history.transaction(db):
        history.insert_minutes(db, rows, hostname)


def test_rows_round_trip_and_a_minute_written_twice_adds_up(tmp_path: Path) -> None:
    db = history.connect(tmp_path / "h.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    write(tmp_path / "h.db", [row(0), row(60)], "node1")
    write(tmp_path / "h.db", [row(60, sampled=30.0, busy=10.0, sm=5.0)], "node1")  # a restart mid-minute
    [t] = history.gpu_hours(db, 0, 120)
    assert t.uuid == "GPU-aaaa" and t.hour == 0
    assert t.minutes == 2
    assert t.values["sampled_seconds"] == 150.0 and t.values["busy_seconds"] == 70.0
    assert t.values["sm_active_seconds"] == 5.0  # NULL + 5 = 5: not measured before, measured after
    gpu = db.execute("SELECT hostname, model, first_seen, last_seen FROM gpus").fetchone()
    assert gpu == ("node1", "NVIDIA H200", 0, 60)


def test_readonly_open_and_schema_versions(tmp_path: Path) -> None:
    with pytest.raises(history.HistoryError, match="not found"):
        history.connect(tmp_path / "missing.db", readonly=True)
    path = tmp_path / "h.db"
    history.connect(path).close()
    ro = history.connect(path, readonly=True)
    with pytest.raises(sqlite3.OperationalError):
        ro.execute("DELETE FROM gpu_minutes")
    ro.close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(history.HistoryError, match="newer"):
        history.connect(path)


def test_writer_thread_commits_and_prunes_old_rows(tmp_path: Path) -> None:
    now = 400 * 86400 + 1_000_000
    w = history.HistoryWriter(tmp_path / "h.db", hostname="n", retention_days=400, clock=lambda: float(now))
    db = history.connect(tmp_path / "h.db")
    insert(db, [row(1_000_000 - 60), row(1_000_000 + 60)], "n")  # one too old, one kept
    w.start()
    w.submit([row(now - 120)])
    w.submit([row(now - 60)])
    w.stop()
    minutes = [m for (m,) in db.execute("SELECT minute FROM gpu_minutes ORDER BY minute")]
    assert minutes == [1_000_000 + 60, now - 120, now - 60]
    assert w.stats().rows_written == 2 and w.stats().write_errors == 0


class FailingDb:
    """A connection whose next ``fail`` transactions raise, like a full disk would."""

    def __init__(self, db: sqlite3.Connection, fail: int) -> None:
        self.db, self.fail = db, fail

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("BEGIN") and self.fail > 0:
            self.fail -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.db.executemany(sql, rows)

    def close(self) -> None:
        self.db.close()


def test_write_failures_are_counted_and_rows_are_retried(tmp_path: Path) -> None:
    w = history.HistoryWriter(tmp_path / "h.db", hostname="n")
    assert w._db is not None
    w._db = FailingDb(w._db, fail=1)  # type: ignore[assignment]
    w.start()
    w.submit([row(0)])
    w.submit([row(60)])
    w.submit([row(120)])
    w.stop()
    assert w.stats().write_errors >= 1
    db = history.connect(tmp_path / "h.db")
    assert [m for (m,) in db.execute("SELECT minute FROM gpu_minutes ORDER BY minute")] == [
        0,
        60,
        120,
    ]


CHILD = textwrap.dedent(
    """
    import sys
    from exporter import history
    from exporter.readers import DeviceInfo
    from exporter.snapshot import ROLLUP_FIELDS, MinuteRow
    db = history.connect(sys.argv[1])
    devs = [DeviceInfo(i, f"GPU-{i}", "NVIDIA H200", f"0000:{i:02x}:00.0") for i in range(8)]
    minute = int(sys.argv[2])
    while True:
        rows = [MinuteRow(minute, d, {f: float(minute + d.index) for f in ROLLUP_FIELDS}) for d in devs]
        with history.transaction(db):
            history.insert_minutes(db, rows, "node")
        print(minute, flush=True)
        minute += 60
    """
)


@pytest.mark.integration  # kills a real writer process, many times
def test_sigkill_during_writes_never_corrupts_and_keeps_every_committed_minute(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.db"
    rng = random.Random(7)
    committed: list[int] = []
    start = 0
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        # killed at a random moment after its first commit: whatever the machine's load (a busy
        # machine once took longer than a fixed 0.3-0.9 s to start Python and commit once)
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready, "the child committed nothing in 60 s"
        first = child.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.5))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        printed = [int(x) for x in (first + child.stdout.read()).split()]  # the pipe's end: the child is gone
        child.stdout.close()
        assert printed, "the child committed nothing before it was killed"
        committed += printed
        start = printed[-1] + 120  # leave a gap where the killed transaction may or may not be
    db = history.connect(path, readonly=True)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {(m, u): v for m, u, v in db.execute("SELECT minute, uuid, sampled_seconds FROM gpu_minutes")}
    for minute in committed:
        for i in range(8):
            assert stored[(minute, f"GPU-{i}")] == float(minute + i)
    # every minute is whole: 8 GPU rows or none
    counts = {c for (c,) in db.execute("SELECT count(*) FROM gpu_minutes GROUP BY minute")}
    assert counts == {8}
