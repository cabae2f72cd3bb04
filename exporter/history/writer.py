"""The history writer: a background thread that commits what the daemon hands it.

Items (minute rows, job minutes, benchmark records, finished jobs) queue up and are written in
one transaction per batch. A SIGKILL at any moment loses at most what is still queued (the
current minute) and never corrupts the file. Items that fail to write (disk full) stay pending,
up to ``MAX_PENDING``, and are retried with the next batch.

The writer never stops the exporter: a file it cannot use (a directory, not SQLite, newer, not
writable) leaves ``gpuledger_history_up`` at 0 with one log line, and is tried again every
``check_every`` seconds. The file is checked with ``PRAGMA quick_check`` at open and every
``check_every`` seconds; a damaged one is moved aside (``<name>.damaged-<UTC time>``, with its
-wal and -shm, never over an existing file) and a new history is started in its place.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.benchmarks.records import BenchRecord
from exporter.history.metrics import HistoryStats
from exporter.history.reads import bench_records
from exporter.history.schema import HistoryDamaged, HistoryError, check, connect, is_damage, is_full
from exporter.history.tables import INSERTS, delete_before, transaction
from exporter.snapshot import MinuteRow

log = logging.getLogger(__name__)

MAX_PENDING = 200_000
CHECK_EVERY = 3600.0  # seconds between quick_checks (and retries of a file that could not be used)
_WAKE = 60.0  # the thread wakes at least this often (seconds) to see whether a check is due


def move_aside(path: Path, when: float) -> Path:
    """Rename a damaged file (and its -wal, -shm) to ``<name>.damaged-YYYYmmddTHHMMSS`` in UTC,
    with ``-1``, ``-2``... when that name is taken: nothing is ever overwritten."""
    stamp = dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y%m%dT%H%M%S")
    base = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 0
    while True:
        aside = base if n == 0 else base.with_name(f"{base.name}-{n}")
        if not any(Path(f"{aside}{s}").exists() for s in ("", "-wal", "-shm")):
            try:
                os.link(path, aside)  # fails if aside appeared meanwhile
            except FileExistsError:
                n += 1
                continue
            except OSError:  # no hard links here: rename, having checked the name is free
                os.rename(path, aside)
            else:
                path.unlink()
            for suffix in ("-wal", "-shm"):
                side = Path(f"{path}{suffix}")
                if side.exists():
                    os.rename(side, f"{aside}{suffix}")
            return aside
        n += 1


class HistoryWriter:
    def __init__(
        self,
        path: str | Path,
        *,
        hostname: str,
        retention_days: int = 400,
        clock: Callable[[], float] = time.time,
        check_every: float = CHECK_EVERY,
    ) -> None:
        self.path = Path(path)
        self.hostname = hostname
        self.retention_seconds = retention_days * 86400
        self.check_every = check_every
        self._clock = clock
        self._db: sqlite3.Connection | None = None
        self._queue: queue.Queue[list[object] | None] = queue.Queue()
        self._pending: list[object] = []
        self._rows_written = 0
        self._errors = 0
        self._failing: str | None = None  # the current streak of write failures, as logged
        self._refused: str | None = None  # why the file could not be used, as logged
        self._checked_at = self._clock()
        self._pruned_at = 0.0
        self._thread: threading.Thread | None = None
        self._damaged_files = 0
        self._open()

    @property
    def up(self) -> bool:
        return self._db is not None and self._failing is None

    def submit(self, items: Sequence[object]) -> None:
        """Queue items of any kind in INSERTS (minute rows, job minutes, bench records, jobs)."""
        self._queue.put(list(items))

    def bench_records(self, since: float = 0.0) -> list[BenchRecord]:
        """What earlier runs recorded (read before start(); the writer thread owns the connection)."""
        if self._db is None:
            return []
        try:
            return bench_records(self._db, since)
        except sqlite3.Error as e:
            log.error("history %s: cannot read the benchmark records: %s", self.path, e)
            return []

    def stats(self) -> HistoryStats:
        return HistoryStats(self._rows_written, self._errors, self.up, self._damaged_files)

    def _count_aside(self) -> None:
        """How many damaged files lie beside the history (moved aside by this run or an earlier one)."""
        try:
            names = os.listdir(self.path.parent)
        except OSError:
            return
        prefix = f"{self.path.name}.damaged-"
        self._damaged_files = sum(1 for n in names if n.startswith(prefix) and not n.endswith(("-wal", "-shm")))

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
            log.error("history %s: %d items could not be written before exit", self.path, len(self._pending))
        self._close()

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=_WAKE)
            except queue.Empty:
                first = []
            stopping = self._drain(first)
            if self._clock() - self._checked_at >= self.check_every:
                self._check()
            self._write()
            if stopping:
                return
            if self._clock() - self._pruned_at > 3600:
                self._prune()

    def _drain(self, *first: list[object] | None) -> bool:
        """Move queued items to pending; True when the stop sentinel was among them."""
        stopping = False
        batch = list(first)
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for item in batch:
            if item is None:
                stopping = True
            else:
                self._pending.extend(item)
        return stopping

    def _open(self, *, replace: bool = True) -> None:
        """Open the file (moving a damaged one aside first); never raises: a file that cannot be
        used is logged once and leaves the history down until a later check opens it."""
        self._count_aside()
        try:
            self._db = connect(self.path)
        except HistoryDamaged as e:
            if replace:
                self._replace(str(e))
            else:  # the new file is damaged too: stop there rather than make file after file
                self._refuse(str(e))
            return
        except HistoryError as e:
            self._refuse(str(e))
            return
        if self._refused is not None:
            log.info("history %s: open again", self.path)
        self._refused = None

    def _refuse(self, why: str) -> None:
        if why != self._refused:
            log.error("history off (history.path): %s; GPU metrics are still served (gpuledger_history_up 0)", why)
        self._refused = why

    def _replace(self, why: str) -> None:
        """Move the damaged file aside and start a new history in its place."""
        self._close()
        try:
            aside = move_aside(self.path, self._clock())
        except OSError as e:
            self._refuse(f"{why}, and it cannot be moved aside: {e.strerror or e}")
            return
        log.error("%s: moved aside to %s; a new history starts in %s", why, aside.name, self.path)
        self._refused = None
        self._open(replace=False)

    def _close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error as e:
                log.warning("history %s: closing it failed: %s", self.path, e)
            self._db = None

    def _check(self) -> None:
        """The periodic check, on a fresh read-only connection (it reads the file, not the
        writer's cache). Reopens a file that could not be used, or one removed meanwhile."""
        self._checked_at = self._clock()
        self._count_aside()
        if self._db is None:
            self._open()
            return
        if not self.path.exists():
            log.error("history file %s was removed while the exporter ran; a new history starts there", self.path)
            self._close()
            self._open()
            return
        try:
            probe = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None)
        except sqlite3.Error as e:
            log.warning("history %s: cannot open it for its check: %s", self.path, e)
            return
        try:
            check(probe, self.path)
        except HistoryDamaged as e:
            probe.close()
            self._replace(str(e))
            return
        except HistoryError as e:  # a full disk or an I/O error: the file is kept, writes retried
            log.warning("%s", e)
        probe.close()

    def _write(self) -> None:
        if not self._pending or self._db is None:
            self._trim()
            return
        groups: dict[type, list[object]] = {}
        for item in self._pending:
            groups.setdefault(type(item), []).append(item)
        try:
            with transaction(self._db):
                for kind, items in groups.items():
                    INSERTS[kind](self._db, items, self.hostname)
        except sqlite3.Error as e:
            self._failed(e)
            return
        self._rows_written += len(groups.get(MinuteRow, []))
        if self._failing is not None:
            log.info("history writes to %s work again: %d items written", self.path, len(self._pending))
            self._failing = None
        self._pending.clear()

    def _failed(self, e: sqlite3.Error) -> None:
        """One line per streak of failures (not one a minute); a damaged file is replaced at once."""
        self._errors += 1
        if is_damage(e):
            self._failing = None
            self._check()
            return
        if is_full(e):
            why = f"the disk holding {self.path} is full (SQLite: {e})"
        else:
            why = f"history write to {self.path} failed ({e})"
        if why != self._failing:
            log.error("%s; %d items kept for retry", why, len(self._pending))
        self._failing = why
        self._trim()

    def _trim(self) -> None:
        if len(self._pending) > MAX_PENDING:
            dropped = len(self._pending) - MAX_PENDING
            del self._pending[:dropped]
            log.error("history: dropped the %d oldest unwritten items", dropped)

    def _prune(self) -> None:
        self._pruned_at = self._clock()
        if self._db is None:
            return
        cutoff = int(self._pruned_at) - self.retention_seconds
        try:
            n = delete_before(self._db, cutoff)
            if n:
                log.info("history: removed %d rows older than the retention", n)
        except sqlite3.Error as e:
            log.error("history retention pass failed: %s", e)
