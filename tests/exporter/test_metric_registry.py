"""The metric table is assembled from each feature's registration; the process rows are
prometheus_client's ProcessCollector families; a feature that is off adds no series."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client.process_collector import ProcessCollector

from exporter.history.metrics import HistoryStats
from exporter.readers.fake import FakeReader
from exporter.registry import Feature, assemble, part_row, samples
from exporter.sampling.sampler import Sampler
from exporter.scrape import process_metrics, render
from exporter.scrape.table import FEATURES, METRICS
from exporter.snapshot import EMPTY, by_type


def test_the_table_is_the_features_rows_in_registration_order() -> None:
    assert METRICS == tuple(m for f in FEATURES for m in f.metrics)
    names = [f.name for f in FEATURES]
    assert names == ["exporter", "history", "process", "gpu", "mig", "jobs", "slurm", "idle", "bench", "scaling"]
    parts = [f.part for f in FEATURES if f.part is not None]
    assert len(parts) == len(set(parts)), "each feature contributes its own part type"


def test_a_name_registered_twice_is_refused() -> None:
    row = part_row(HistoryStats, "x_total", "counter", "", "x", "test", lambda h: float(h.rows_written))
    with pytest.raises(ValueError, match="x_total"):
        assemble([Feature("a", HistoryStats, (row,)), Feature("b", HistoryStats, (row,))])


def test_process_rows_are_process_collector_families() -> None:
    families = {f.name: f for f in ProcessCollector(registry=None).collect()}
    assert families, "this test needs /proc"
    rows = {m.family: m for m in process_metrics.FEATURE.metrics}
    assert set(rows) == set(families)
    for name, fam in families.items():
        assert (rows[name].kind, rows[name].help, rows[name].unit) == (fam.type, fam.documentation, fam.unit)


def test_a_round_serves_the_process_figures_and_no_series_of_a_feature_that_is_off() -> None:
    s = Sampler(FakeReader(1), parts=lambda: [p for p in (process_metrics.read(),) if p is not None])
    s.tick()
    snap = s.snapshot
    text = render.render(snap).decode()
    assert "\nprocess_open_fds " in text and "\nprocess_max_fds " in text
    cpu = dict(samples(next(m for m in METRICS if m.name == "process_cpu_seconds_total"), snap))
    assert isinstance(cpu[()], float) and cpu[()] > 0
    assert "gpuledger_history_rows_written_total" not in text  # history is off: no part, no series
    assert "gpuledger_queue_source_up" not in text and "gpuledger_bench_runs_total" not in text


def test_a_snapshot_part_is_found_by_its_type() -> None:
    stats = HistoryStats(rows_written=3)
    snap = dataclasses.replace(EMPTY, parts=by_type([stats]))
    assert snap.part(HistoryStats) is stats
    assert snap.part(process_metrics.ProcessStats) is None
    rows = dict(samples(next(m for m in METRICS if m.name == "gpuledger_history_rows_written_total"), snap))
    assert rows == {(): 3.0}
