"""What the daemon knows about benchmark rounds: latest results, run counts, last run times
(torch-free). Fed by the scheduler, restored from the history at start-up, read by the metric
table through an immutable ``BenchSnapshot``."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.benchmarks.records import BenchRecord
from exporter.benchmarks.results import (
    PARSERS,
    AllreduceResult,
    MatmulRow,
    MemcpyRow,
    TrainResult,
    plain,
)
from exporter.benchmarks.runner import Outcome

log = logging.getLogger(__name__)

RESULTS = ("ok", "failed", "timeout", "skipped_busy", "skipped_no_gpu")


@dataclass(frozen=True)
class BenchSnapshot:
    allreduce: AllreduceResult | None = None
    train: TrainResult | None = None
    matmul: tuple[MatmulRow, ...] | None = None
    memcpy: tuple[MemcpyRow, ...] | None = None
    runs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    last_run: Mapping[tuple[str, str], float] = field(default_factory=dict)
    duration: Mapping[str, float] = field(default_factory=dict)


class BenchState:
    def __init__(self, benches: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Any] = {}
        self._runs: dict[tuple[str, str], int] = {(b, r): 0 for b in benches for r in RESULTS}
        self._last: dict[tuple[str, str], float] = {}
        self._duration: dict[str, float] = {}

    def record(self, outcome: Outcome) -> list[BenchRecord]:
        """Count a finished round; return what the history should keep of it."""
        finished = outcome.started + outcome.duration
        records = []
        with self._lock:
            for bench, status in outcome.status.items():
                result = getattr(outcome.result, bench)
                self._runs[(bench, status)] = self._runs.get((bench, status), 0) + 1
                self._last[(bench, status)] = finished
                if bench in outcome.durations:
                    self._duration[bench] = outcome.durations[bench]
                if result is not None:  # a failed all-reduce still carries its figures and #wrong
                    self._latest[bench] = result
                data = json.dumps(plain(result)) if result is not None else outcome.result.errors.get(bench)
                records.append(
                    BenchRecord(
                        finished,
                        bench,
                        status,
                        outcome.durations.get(bench),
                        outcome.plan.backend,
                        outcome.plan.world_size,
                        data,
                    )
                )
        return records

    def skipped(self, benches: Iterable[str], at: float, result: str = "skipped_busy") -> list[BenchRecord]:
        """Count a round not run: ``skipped_busy`` (the idle gate) or ``skipped_no_gpu``."""
        records = []
        with self._lock:
            for bench in benches:
                self._runs[(bench, result)] = self._runs.get((bench, result), 0) + 1
                self._last[(bench, result)] = at
                records.append(BenchRecord(at, bench, result, None, "", 0, None))
        return records

    def restore(self, records: Iterable[BenchRecord]) -> None:
        """Latest results and last-run times from the history (records in time order). Run
        counts are counters of this process and start at zero."""
        with self._lock:
            for r in records:
                parse = PARSERS.get(r.bench)
                if parse is None:  # another tool's record (gpuledger scaling): exporter.benchmarks.scaling
                    continue
                self._last[(r.bench, r.result)] = r.finished
                if r.result in ("ok", "failed") and r.data and r.data.startswith(("{", "[")):
                    try:
                        self._latest[r.bench] = parse(r.data)
                    except ValueError as e:  # a damaged or hand-edited record: the next one may do
                        log.warning("history: benchmark record %s of %.0f skipped: %s", r.bench, r.finished, e)
                        continue
                    if r.duration is not None:
                        self._duration[r.bench] = r.duration

    def snapshot(self) -> BenchSnapshot:
        with self._lock:
            return BenchSnapshot(
                allreduce=self._latest.get("allreduce"),
                train=self._latest.get("train"),
                matmul=self._latest.get("matmul"),
                memcpy=self._latest.get("memcpy"),
                runs=dict(self._runs),
                last_run=dict(self._last),
                duration=dict(self._duration),
            )
