"""``gpuledger scaling`` and the history file (``--history``): its result recorded as a benchmark
record beside the exporter's rounds, and the all-reduce sweeps read back for the communication
model's prediction. ``say`` takes the one line said when the file cannot be written or read."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from domain.scaling import BENCH
from gpuledger.scaling_report import Result, to_json


def record(path: Path, res: Result, seconds: float, backend: str, say: Callable[[str], None]) -> bool:
    """Append the result to the history's benchmark records (bench ``scaling``, the --json document
    as data), as the exporter's benchmark rounds are; the history says why when it cannot."""
    from exporter import history
    from exporter.benchmarks.records import BenchRecord

    rec = BenchRecord(
        time.time(),
        BENCH,
        "ok" if res.ok else "failed",
        seconds,
        backend,
        max((r.n for r in res.rows), default=1),
        json.dumps(to_json(res)),
    )
    try:
        db = history.connect(path)
        try:
            with history.transaction(db):
                history.insert_bench(db, [rec])
        finally:
            db.close()
    except (history.HistoryError, sqlite3.Error) as e:
        say(f"--history: cannot record the result in {path}: {e}")
        return False
    say(f"recorded in {path} as {res.name!r}: the weekly report's multi-GPU section shows it")
    return True


def sweeps(path: Path, backend: str, grad_bytes: int, say: Callable[[str], None]) -> list[tuple[int, float]]:
    """(world size, bus bandwidth at ``grad_bytes``) of the newest good all-reduce sweep of each
    world size in the history (the exporter's rounds, ``gpuledger bench``), for the communication
    model's prediction; none where the file has none or cannot be read (said in one line)."""
    from exporter import history
    from exporter.benchmarks.results import allreduce_from

    if not path.exists():
        return []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            records = history.bench_records(db)
        finally:
            db.close()
    except sqlite3.Error as e:
        say(f"--history: no all-reduce sweep read from {path} ({e}): the prediction uses your own runs")
        return []
    newest: dict[int, float] = {}
    for rec in records:  # time order: a later sweep of the same world size wins
        if rec.bench != "allreduce" or rec.result != "ok" or rec.backend != backend or rec.data is None:
            continue
        try:
            busbw = allreduce_from(rec.data).busbw_at(grad_bytes)
        except ValueError:
            continue
        if busbw:
            newest[rec.world_size] = busbw
    return sorted(newest.items())
