"""The history writer: a background thread that commits what the daemon hands it.

Items (minute rows, job minutes, benchmark records, finished jobs) queue up and are written in
one transaction per batch. A SIGKILL at any moment loses at most what is still queued (the
current minute) and never corrupts the file. Items that fail to write (disk full) stay pending,
up to ``MAX_PENDING``, and are retried with the next batch.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.benchmarks.records import BenchRecord
from exporter.history.metrics import HistoryStats
from exporter.history.reads import bench_records
from exporter.history.schema import connect
from exporter.history.tables import INSERTS, delete_before, transaction
from exporter.snapshot import MinuteRow

log = logging.getLogger(__name__)

MAX_PENDING = 200_000


class HistoryWriter:
    def __init__(
        self, path: str | Path, *, hostname: str, retention_days: int = 400, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.hostname = hostname
        self.retention_seconds = retention_days * 86400
        self._clock = clock
        self._db = connect(self.path)  # fail early: a bad path is a start-up error
        self._queue: queue.Queue[list[object] | None] = queue.Queue()
        self._pending: list[object] = []
        self._rows_written = 0
        self._errors = 0
        self._pruned_at = 0.0
        self._thread: threading.Thread | None = None

    def submit(self, items: Sequence[object]) -> None:
        """Queue items of any kind in INSERTS (minute rows, job minutes, bench records, jobs)."""
        self._queue.put(list(items))

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
            log.error("history: %d items could not be written before exit", len(self._pending))
        self._db.close()

    def _run(self) -> None:
        while True:
            stopping = self._drain(self._queue.get())
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

    def _write(self) -> None:
        if not self._pending:
            return
        groups: dict[type, list[object]] = {}
        for item in self._pending:
            groups.setdefault(type(item), []).append(item)
        try:
            with transaction(self._db):
                for kind, items in groups.items():
                    INSERTS[kind](self._db, items, self.hostname)
            self._rows_written += len(groups.get(MinuteRow, []))
            self._pending.clear()
        except sqlite3.Error as e:
            self._errors += 1
            log.error("history write to %s failed (%s); %d items kept for retry", self.path, e, len(self._pending))
            if len(self._pending) > MAX_PENDING:
                dropped = len(self._pending) - MAX_PENDING
                del self._pending[:dropped]
                log.error("history: dropped the %d oldest unwritten items", dropped)

    def _prune(self) -> None:
        self._pruned_at = self._clock()
        cutoff = int(self._pruned_at) - self.retention_seconds
        try:
            n = delete_before(self._db, cutoff)
            if n:
                log.info("history: removed %d rows older than the retention", n)
        except sqlite3.Error as e:
            log.error("history retention pass failed: %s", e)
