"""The users' own scaling results (``gpuledger scaling --history``) on ``/metrics``, torch-free.

The command appends its result to the history file as a benchmark record (bench ``scaling``). The
exporter reads the records the file holds, the last of each model name, at start-up and again at
most once a ``interval`` when a snapshot is asked for, through a read-only connection of its own
(the history writer's thread owns the other): a run recorded while the exporter runs shows within
a minute. A file that cannot be read keeps what was read before and logs once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from domain.scaling import BENCH, last_per_name, scaling_from
from domain.week import ScalingRun

log = logging.getLogger(__name__)

READ_SQL = (
    "SELECT finished, data FROM bench_runs WHERE bench = ? AND result IN ('ok', 'failed') AND finished > ? "
    "ORDER BY finished, id"
)


@dataclass(frozen=True)
class ScalingSnapshot:
    """The last run of each model name, by name."""

    runs: tuple[ScalingRun, ...] = ()


class ScalingResults:
    def __init__(self, path: Path, clock: Callable[[], float], interval: float = 60.0) -> None:
        self.path = path
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._runs: dict[str, ScalingRun] = {}
        self._since = float("-inf")  # the last record read
        self._read_at: float | None = None
        self._failing = False
        self._snapshot = ScalingSnapshot()

    def snapshot(self) -> ScalingSnapshot | None:
        """The runs known (None while there are none: no series), read again when due."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._interval:
                self._read_at = now
                self._read()
            return self._snapshot if self._snapshot.runs else None

    def _read(self) -> None:
        if not self.path.exists():
            return
        try:
            db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.2)
            try:
                rows = db.execute(READ_SQL, (BENCH, self._since)).fetchall()
            finally:
                db.close()
        except sqlite3.Error as e:
            if not self._failing:
                log.warning("history %s: cannot read gpuledger scaling's records: %s", self.path, e)
            self._failing = True
            return
        self._failing = False
        for finished, data in rows:
            self._since = max(self._since, float(finished))
            run = scaling_from(float(finished), data or "")
            if run is not None:
                self._runs[run.name] = run
        if rows:
            self._snapshot = ScalingSnapshot(last_per_name(self._runs.values()))
