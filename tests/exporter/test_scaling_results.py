"""gpuledger scaling's results on the exporter's /metrics (issue 23): the command records into the
history file the exporter writes; the exporter reads the records (its own read-only connection),
the last run of each model name, again at most once a minute, and serves them. A record that is not
a scaling document is skipped; the benchmarks' state restored from the same file ignores the
command's records instead of failing the start-up."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from domain.scaling import BENCH
from exporter import history
from exporter.benchmarks.records import BenchRecord
from exporter.benchmarks.scaling import ScalingResults
from exporter.benchmarks.state import BenchState
from exporter.config import Settings
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.snapshot import EMPTY, by_type
from tests.support.metrics import parse_metrics

T0 = 1_800_000_000.0


def _doc(name: str, t2: float) -> str:
    return json.dumps(
        {
            "name": name,
            "scaling": "strong",
            "unit": "GPUs",
            "currency": "USD",
            "verdicts": ["2 GPUs: ..."],
            "rows": [
                {"n": 1, "status": "ok", "step_seconds": 0.2, "speedup": 1.0, "efficiency": 1.0},
                {"n": 2, "status": "ok", "step_seconds": t2, "speedup": 0.2 / t2, "efficiency": 0.1 / t2},
                {"n": 4, "status": "timeout", "step_seconds": None, "speedup": None, "efficiency": None},
            ],
        }
    )


def _record(path: Path, *records: BenchRecord) -> None:
    db = history.connect(path)
    with history.transaction(db):
        history.insert_bench(db, list(records))
    db.close()


def _served(results: ScalingResults) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    snap = results.snapshot()
    parts = by_type([snap]) if snap is not None else by_type([])
    return parse_metrics(render.render(dataclasses.replace(EMPTY, parts=parts)).decode())


def test_recorded_runs_are_served_within_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    now = [0.0]
    results = ScalingResults(path, lambda: now[0], interval=60.0)
    assert results.snapshot() is None  # no file yet: no series
    _record(
        path,
        BenchRecord(T0, BENCH, "ok", 30.0, "nccl", 4, _doc("llama", 0.12)),
        BenchRecord(T0 + 10, BENCH, "ok", 1.0, "nccl", 4, "{not json"),  # skipped
        BenchRecord(T0 + 20, "allreduce", "ok", 1.0, "nccl", 4, "{}"),  # not the command's
    )
    now[0] = 30.0
    assert results.snapshot() is None  # read at most once a minute
    now[0] = 60.0
    m = _served(results)
    step = {dict(k)["world_size"]: v for k, v in m["gpuledger_scaling_step_seconds"].items()}
    assert step == {"1": 0.2, "2": 0.12}  # the timed-out count has no series
    (labels,) = [dict(k) for k, v in m["gpuledger_scaling_speedup_ratio"].items() if v != 1.0]
    assert labels == {"name": "llama", "scaling": "strong", "world_size": "2"}
    assert m["gpuledger_scaling_last_run_timestamp_seconds"] == {(("name", "llama"),): T0}
    # a later run of the same model replaces it; another model joins
    _record(
        path,
        BenchRecord(T0 + 100, BENCH, "ok", 30.0, "nccl", 4, _doc("llama", 0.11)),
        BenchRecord(T0 + 200, BENCH, "failed", 30.0, "nccl", 4, _doc("bert", 0.15)),
    )
    now[0] = 120.0
    m = _served(results)
    by_model = {(dict(k)["name"], dict(k)["world_size"]): v for k, v in m["gpuledger_scaling_step_seconds"].items()}
    assert by_model == {("llama", "1"): 0.2, ("llama", "2"): 0.11, ("bert", "1"): 0.2, ("bert", "2"): 0.15}


def test_an_unreadable_file_keeps_what_was_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.db"
    _record(path, BenchRecord(T0, BENCH, "ok", 30.0, "nccl", 2, _doc("llama", 0.12)))
    now = [0.0]
    results = ScalingResults(path, lambda: now[0])
    first = results.snapshot()
    assert first is not None and [r.name for r in first.runs] == ["llama"]
    path.unlink()
    path.write_bytes(b"not a database" * 100)
    now[0] = 3600.0
    assert results.snapshot() == first
    now[0] = 7200.0
    assert results.snapshot() == first
    assert sum("cannot read gpuledger scaling's records" in r.message for r in caplog.records) == 1  # once


def test_the_benchmarks_restore_ignores_the_commands_records(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    _record(
        path,
        BenchRecord(T0, BENCH, "ok", 30.0, "nccl", 2, _doc("llama", 0.12)),
        BenchRecord(T0 + 1, "allreduce", "ok", 1.0, "gloo", 2, '{"damaged": true}'),
    )
    state = BenchState(["allreduce", "train"])
    db = history.connect(path, readonly=True)
    state.restore(history.bench_records(db))
    db.close()
    assert state.snapshot().allreduce is None  # the damaged record skipped, no exception


def test_the_exporter_starts_on_a_history_with_scaling_records(tmp_path: Path) -> None:
    """The composition root: bench on, a history holding the command's record; /metrics has it."""
    from exporter.app import Exporter

    path = tmp_path / "history.db"
    _record(path, BenchRecord(T0, BENCH, "ok", 30.0, "nccl", 2, _doc("llama", 0.12)))
    s = Settings.model_validate(
        {"history": {"path": str(path)}, "bench": {"enabled": True}, "web": {"listen": "127.0.0.1:0"}}
    )
    exp = Exporter(s, FakeReader(1))
    try:
        assert "scaling" in exp.features
        snap = exp.providers["scaling"]()
        assert snap is not None
    finally:
        exp.server.server_close()
        if exp.history is not None:
            exp.history.stop()
