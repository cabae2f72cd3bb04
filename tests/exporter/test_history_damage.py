"""A damaged, unusable or full history file: the exporter keeps its GPU metrics, says what is wrong
in one line, moves a damaged file aside (never over another file) and starts a new one; the report
refuses a damaged file naming it."""

from __future__ import annotations

import logging
import os
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from analytics.sources import SourceUnavailable
from analytics.sources.embedded import EmbeddedSource
from exporter import history
from exporter.history.writer import move_aside
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, MinuteRow
from tests.support.clock import ANCHOR

DEVS = [DeviceInfo(i, f"GPU-{i}", "NVIDIA H200", f"0000:{i:02x}:00.0") for i in range(8)]
T0 = int(ANCHOR)


def rows(first: int, minutes: int) -> list[MinuteRow]:
    return [
        MinuteRow(first + 60 * m, d, {f: 30.0 for f in ROLLUP_FIELDS} | {"sampled_seconds": 60.0})
        for m in range(minutes)
        for d in DEVS
    ]


def make_history(path: Path, minutes: int = 600) -> None:
    """A file of 4,800 minute rows (about 75 pages), checkpointed into the main file."""
    db = history.connect(path)
    with history.transaction(db):
        history.insert_minutes(db, rows(T0, minutes), "node")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def noise(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


def damage_middle(p: Path) -> None:
    overwrite(p, p.stat().st_size // 2, noise(4096))


def damage_many_pages(p: Path) -> None:
    rng = random.Random(3)
    for _ in range(8):
        overwrite(p, rng.randrange(4096, p.stat().st_size - 64), noise(64, rng.randrange(1000)))


def damage_magic(p: Path) -> None:
    overwrite(p, 0, noise(16))


def damage_page_size(p: Path) -> None:
    overwrite(p, 16, b"\x00\x07")  # page size 7: not a power of two


def damage_schema_page(p: Path) -> None:
    overwrite(p, 100, noise(3000))  # sqlite_master's page, after the 100-byte header


def truncate_half(p: Path) -> None:
    os.truncate(p, p.stat().st_size // 2)


DAMAGE = {
    "random bytes mid-file": damage_middle,
    "bytes on 8 random pages": damage_many_pages,
    "header magic overwritten": damage_magic,
    "header page size": damage_page_size,
    "schema page": damage_schema_page,
    "truncated to half": truncate_half,
}


def flush(w: history.HistoryWriter) -> None:
    """One round of the writer thread's loop, in the test's thread."""
    w._drain()
    w._write()


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_before_start_is_found_refused_by_the_report_and_moved_aside(tmp_path: Path, how: str) -> None:
    path = tmp_path / "history.db"
    make_history(path)
    DAMAGE[how](path)
    damaged = path.read_bytes()
    with pytest.raises(history.HistoryDamaged, match=f"history file {path} is damaged"):
        history.connect(path, readonly=True)
    with pytest.raises(SourceUnavailable, match=f"{path} is damaged"):
        EmbeddedSource(path)
    assert path.read_bytes() == damaged  # the report changes nothing
    w = history.HistoryWriter(path, hostname="node", clock=lambda: ANCHOR)
    [aside] = tmp_path.glob("history.db.damaged-*")
    assert aside.name == "history.db.damaged-20261121T000000"
    assert aside.read_bytes() == damaged  # moved, byte for byte
    assert w.stats().up and w.stats().damaged_files == 1
    w.submit(rows(T0 + 86400, 2))
    w.stop()
    db = history.connect(path, readonly=True)  # a new, healthy history in its place
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 16


def test_damage_is_never_written_over_an_earlier_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    for _ in range(3):  # three damaged files found in the same second
        make_history(path, 10)
        damage_middle(path)
        history.HistoryWriter(path, hostname="node", clock=lambda: ANCHOR).stop()
    names = sorted(p.name for p in tmp_path.glob("history.db.damaged-*"))
    stamp = "history.db.damaged-20261121T000000"
    assert names == [stamp, f"{stamp}-1", f"{stamp}-2"]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: ANCHOR)
    assert w.stats().damaged_files == 3 and w.stats().up
    w.stop()


def test_move_aside_takes_the_wal_and_shm_along(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    for suffix, data in (("", b"main"), ("-wal", b"wal"), ("-shm", b"shm")):
        Path(f"{path}{suffix}").write_bytes(data)
    taken = tmp_path / "h.db.damaged-20261121T000000"
    Path(f"{taken}-wal").write_bytes(b"earlier")  # even a lone -wal makes a name taken
    aside = move_aside(path, ANCHOR)
    assert aside.name == "h.db.damaged-20261121T000000-1"
    assert [Path(f"{aside}{s}").read_bytes() for s in ("", "-wal", "-shm")] == [b"main", b"wal", b"shm"]
    assert Path(f"{taken}-wal").read_bytes() == b"earlier"
    assert not any(Path(f"{path}{s}").exists() for s in ("", "-wal", "-shm"))


def test_damage_while_running_is_found_by_the_periodic_check(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.db"
    make_history(path)
    now = [ANCHOR]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: now[0], check_every=3600.0)
    w.submit(rows(T0 + 86400, 1))
    flush(w)
    damage_many_pages(path)
    caplog.set_level(logging.INFO, logger="exporter.history")
    assert not list(tmp_path.glob("*.damaged-*"))  # nothing notices until the check
    now[0] += 3600.0
    w._check()
    [aside] = tmp_path.glob("history.db.damaged-*")
    assert aside.name == "history.db.damaged-20261121T010000"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "is damaged (quick_check: " in errors[0] and aside.name in errors[0]
    assert "\n" not in errors[0] and len(errors[0]) < 600  # one line, SQLite's complaints shortened
    w.submit(rows(T0 + 2 * 86400, 1))
    flush(w)
    assert w.stats().up and w.stats().damaged_files == 1
    w.stop()
    db = history.connect(path, readonly=True)
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8


def test_the_writer_thread_runs_the_check_when_due(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    make_history(path)
    now = [ANCHOR]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: now[0], check_every=3600.0)
    w.start()
    damage_middle(path)
    now[0] += 3600.0
    w.submit(rows(T0 + 86400, 1))  # wakes the thread: the check is due, then the write
    w.stop()
    assert len(list(tmp_path.glob("history.db.damaged-*"))) == 1
    db = history.connect(path, readonly=True)
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8


def newer_schema(p: Path) -> None:
    make_history(p, 1)
    db = sqlite3.connect(p)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()


def a_directory(p: Path) -> None:
    p.mkdir()


def a_text_file(p: Path) -> None:
    p.write_text("hello, not a database\n" * 40)


def a_binary_file(p: Path) -> None:
    p.write_bytes(noise(10_000))


UNUSABLE: dict[str, tuple[Callable[[Path], None], str]] = {
    "a directory": (a_directory, "is a directory"),
    "a text file": (a_text_file, "not an SQLite history file"),
    "a binary file": (a_binary_file, "not an SQLite history file"),
    "a newer schema": (newer_schema, "schema v99 is newer"),
}


def snapshot_of(p: Path) -> bytes | None:
    return p.read_bytes() if p.is_file() else None


@pytest.mark.parametrize("case", UNUSABLE)
def test_an_unusable_path_turns_history_off_in_one_line_and_is_left_as_it_is(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "history.db"
    make, says = UNUSABLE[case]
    make(path)
    before = snapshot_of(path)
    caplog.set_level(logging.INFO, logger="exporter.history")
    now = [ANCHOR]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: now[0])
    assert not w.stats().up and w.bench_records() == []
    w.submit(rows(T0, 1))
    flush(w)
    now[0] += 3600.0
    w._check()  # tried again each hour: still unusable, and not logged again
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and says in errors[0] and str(path) in errors[0]
    assert "Traceback" not in caplog.text
    assert snapshot_of(path) == before and not list(tmp_path.glob("*.damaged-*"))
    # someone fixes it: the next check opens a new history and writes the rows kept meanwhile
    if path.is_dir():
        path.rmdir()
    else:
        path.rename(tmp_path / "elsewhere")
    now[0] += 3600.0
    w._check()
    flush(w)
    assert w.stats().up
    w.stop()
    db = history.connect(path, readonly=True)
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8


def test_the_report_refuses_an_unusable_path_naming_it(tmp_path: Path) -> None:
    for case, (make, says) in UNUSABLE.items():
        path = tmp_path / case.replace(" ", "-")
        make(path)
        with pytest.raises(SourceUnavailable, match=says):
            EmbeddedSource(path)


def test_a_zero_length_file_becomes_a_new_history(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.touch()  # an empty SQLite database, as sqlite3 itself sees it: nothing to lose
    w = history.HistoryWriter(path, hostname="node")
    assert w.stats().up
    w.submit(rows(T0, 1))
    w.stop()
    assert not list(tmp_path.glob("*.damaged-*"))
    assert history.connect(path, readonly=True).execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8


def fill_up(w: history.HistoryWriter) -> None:
    """The disk is full: the file may not grow by a page (``PRAGMA max_page_count``)."""
    assert w._db is not None
    pages = w._db.execute("PRAGMA page_count").fetchone()[0]
    w._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_is_called_a_full_disk_and_the_rows_are_written_when_space_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "history.db"
    make_history(path, 10)
    w = history.HistoryWriter(path, hostname="node")
    fill_up(w)
    caplog.set_level(logging.INFO, logger="exporter.history")
    for day in range(1, 4):  # three minutes of failures: one line, not three
        w.submit(rows(T0 + day * 86400, 60))
        flush(w)
    assert not w.stats().up and w.stats().write_errors == 3
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert f"the disk holding {path} is full" in errors[0] and "database or disk is full" in errors[0]
    assert "no transaction is active" not in caplog.text
    assert w._db is not None
    w._db.execute("PRAGMA max_page_count = 1073741823")  # space returns
    w.submit(rows(T0 + 5 * 86400, 1))
    flush(w)
    assert w.stats().up and "work again" in caplog.text
    w.stop()
    db = history.connect(path, readonly=True)
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8 * (10 + 3 * 60 + 1)


def test_a_failed_transaction_raises_its_own_error_not_the_rollbacks(tmp_path: Path) -> None:
    db = history.connect(tmp_path / "h.db")
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"), history.transaction(db):
        history.insert_minutes(db, rows(T0, 200), "node")
    assert not db.in_transaction
    with pytest.raises(ZeroDivisionError), history.transaction(db):  # any error: rolled back, and raised
        history.insert_minutes(db, rows(T0, 1), "node")
        raise ZeroDivisionError
    assert db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 0


def test_a_file_that_turns_read_only_while_running_keeps_the_rows_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs as root too: ``PRAGMA query_only`` makes SQLite refuse writes as a read-only file does."""
    path = tmp_path / "history.db"
    w = history.HistoryWriter(path, hostname="node")
    assert w._db is not None
    w._db.execute("PRAGMA query_only = 1")
    caplog.set_level(logging.INFO, logger="exporter.history")
    for day in range(2):
        w.submit(rows(T0 + day * 86400, 1))
        flush(w)
    assert not w.stats().up and w.stats().write_errors == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "readonly" in errors[0] and str(path) in errors[0]
    w._db.execute("PRAGMA query_only = 0")
    flush(w)
    w.submit(rows(T0 + 2 * 86400, 1))
    flush(w)
    assert w.stats().up
    w.stop()
    assert history.connect(path, readonly=True).execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 24


def test_random_bytes_anywhere_are_refused_or_harmless(tmp_path: Path) -> None:
    """512 random bytes at 24 places. Before issue 12 a week's report read some such files without
    an error (6 of 39 in a trial). Now each copy is refused, or the bytes fell in a page's unused
    space and every row reads as before (quick_check and integrity_check both pass there)."""
    healthy = tmp_path / "healthy.db"
    make_history(healthy)
    db = history.connect(healthy, readonly=True)
    everything = "SELECT * FROM gpu_minutes ORDER BY uuid, minute"
    want = db.execute(everything).fetchall()
    size = healthy.stat().st_size
    refused = 0
    for k in range(1, 25):
        path = tmp_path / f"d{k}.db"
        path.write_bytes(healthy.read_bytes())
        overwrite(path, max(100, size * k // 25), noise(512, k))
        try:
            copy = history.connect(path, readonly=True)
        except history.HistoryDamaged as e:
            assert str(path) in str(e)
            refused += 1
            continue
        assert copy.execute(everything).fetchall() == want, f"copy {k} reads other rows"
        assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert refused >= 12  # most of a full file is cells, not free space


def test_a_damaged_file_that_cannot_be_moved_is_left_and_history_stays_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "history.db"
    make_history(path)
    damage_middle(path)
    damaged = path.read_bytes()

    def refused(*_: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("exporter.history.writer.os.link", refused)  # a folder it may not write
    monkeypatch.setattr("exporter.history.writer.os.rename", refused)
    caplog.set_level(logging.INFO, logger="exporter.history")
    w = history.HistoryWriter(path, hostname="node")
    assert not w.stats().up and path.read_bytes() == damaged
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "is damaged" in errors[0] and "cannot be moved aside: Permission denied" in errors[0]
    w.stop()


def test_a_history_removed_while_running_is_started_again_at_the_next_check(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    now = [ANCHOR]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: now[0])
    w.submit(rows(T0, 1))
    flush(w)
    path.unlink()  # someone cleans the folder: the writer would write into a file no one sees
    now[0] += 3600.0
    w._check()
    w.submit(rows(T0 + 60, 1))
    flush(w)
    assert w.stats().up
    w.stop()
    assert history.connect(path, readonly=True).execute("SELECT count(*) FROM gpu_minutes").fetchone()[0] == 8
