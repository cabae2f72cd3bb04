"""The GPU fact table (exporter/facts): its rules, and a row's way through the fake reader, the
lanes, the snapshot, the metric table and the history's minutes."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence

import pynvml
import pytest

from exporter.facts import FACTS, HISTORY, LANES, Fact, Family, check, nvlink, pcie, throttle
from exporter.history.schema import MIGRATIONS
from exporter.readers import Call, Const, Field, Grows, NotSupported, Probe, ReaderError, Readout
from exporter.readers.fake import FakeReader
from exporter.registry import samples
from exporter.sampling import fact_metrics, slowlane
from exporter.scrape import render
from exporter.scrape.table import BY_NAME
from exporter.snapshot import (
    COUNTER_COLUMNS,
    EMPTY,
    LATER_COLUMNS,
    ROLLUP_FIELDS,
    GpuCounters,
    GpuSnapshot,
    Histogram,
    MinuteRow,
    minute_row,
)
from tests.support.sampling import make_sampler, step

FAN = Fact(
    "fan_speed",
    Family("gpuledger_gpu_fan_speed_ratio", "gauge", "ratio", "Fan speed (nvmlDeviceGetFanSpeed)."),
    Call("nvmlDeviceGetFanSpeed", scale=0.01),
    "fast",
    Const(0.3),
)
"""A new per-GPU gauge: one row."""


def series(g: GpuSnapshot, name: str) -> dict[tuple[str, ...], float | Histogram]:
    """One GPU's series of a metric of the table, by their labels after gpu and uuid."""
    return {labels[2:]: v for labels, v in samples(BY_NAME[name], dataclasses.replace(EMPTY, gpus=(g,)))}


# --- the table ------------------------------------------------------------------------------------------


def test_the_rows_keep_the_rules() -> None:
    assert check(FACTS) == FACTS
    for f in FACTS:
        if isinstance(f.nvml, Field):
            assert isinstance(getattr(pynvml, f.nvml.field), int), f.nvml.field  # a real NVML field
        assert re.search(r"nvmlDevice\w+", f.metric.help), f"{f.metric.name}: HELP names the NVML call"
        assert f.metric.unit in f.metric.name, f.metric.name
    assert {f.name for f in dataclasses.fields(slowlane.Cadence)} == set(LANES) - {"fast"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: dataclasses.replace(f, name="Pcie-TX"), "names are unique"),
        (lambda f: dataclasses.replace(f, labels=("tx", "extra")), "its own values"),
        (lambda f: dataclasses.replace(f, lane="weekly"), "lane"),
        (lambda f: dataclasses.replace(f, metric=dataclasses.replace(f.metric)), "two families"),
        (lambda f: dataclasses.replace(f, per_link=True), "all per link or none"),
        (lambda f: dataclasses.replace(f, history="pcie_rx_bytes"), "history column"),
    ],
)
def test_a_row_that_breaks_a_rule_is_refused(change: object, message: str) -> None:
    bad = change(pcie.TX)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        check((bad, pcie.RX))
    gauge = dataclasses.replace(FAN, history="fan_speed")
    with pytest.raises(ValueError, match="history column"):
        check((gauge,))


def test_the_history_columns_are_listed_and_each_one_has_its_migration() -> None:
    assert ROLLUP_FIELDS == COUNTER_COLUMNS + tuple(str(f.history) for f in HISTORY) + LATER_COLUMNS
    assert set(COUNTER_COLUMNS + LATER_COLUMNS) <= {f.name for f in dataclasses.fields(GpuCounters)}
    added = " ".join(s for statements in MIGRATIONS.values() for s in statements)
    for f in HISTORY:
        assert f"ALTER TABLE gpu_minutes ADD COLUMN {f.history} REAL" in added, f.history
    assert {f.name for f in HISTORY} == {
        "pcie_tx_bytes",
        "pcie_rx_bytes",
        "nvlink_tx_bytes",
        "nvlink_rx_bytes",
        *(f.name for f in throttle.FACTS),
    }


# --- through the fake reader and the sampler ------------------------------------------------------------


def test_counters_count_from_their_first_reading_and_pcie_throughput_is_their_rate() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    step(s, r, 1.0, ticks=5)  # five reads: the first the baseline, then four seconds at 1 and 2 MB/s
    g = s.snapshot.gpus[0]
    assert g.facts["pcie_tx_bytes"] == 4e6 and g.facts["pcie_rx_bytes"] == 8e6
    assert g.counters.facts["pcie_tx_bytes"] == 4e6
    assert g.health.pcie is not None and (g.health.pcie.tx_bytes_per_second, g.health.pcie.rx_bytes_per_second) == (
        1e6,
        2e6,
    )
    assert r.calls.get("pcie_throughput", 0) == 0, "the blocking call is not made where the counters answer"
    assert r.calls["read_facts"] == 5  # one call per slow round, all the due facts in it
    r.gpus[0].facts["pcie_tx_bytes"] = 100.0  # the driver reloaded: the counter starts again
    step(s, r, 1.0)
    assert s.snapshot.gpus[0].facts["pcie_tx_bytes"] == 4e6  # no increase counted, never backwards
    r.gpus[0].facts["pcie_tx_bytes"] = 600.0
    step(s, r, 1.0)
    assert s.snapshot.gpus[0].facts["pcie_tx_bytes"] == 4e6 + 500.0


def test_without_the_pcie_counters_the_throughput_comes_from_the_blocking_call() -> None:
    r = FakeReader(1)
    r.gpus[0].unsupported |= {"pcie_tx_bytes", "pcie_rx_bytes"}
    s = make_sampler(r)
    step(s, r, 1.0, ticks=2)
    g = s.snapshot.gpus[0]
    assert "pcie_tx_bytes" not in g.facts and r.calls["pcie_throughput"] == 2
    assert g.health.pcie == r.gpus[0].pcie


def test_no_nvlink_means_no_series_one_log_line_and_no_more_asking(caplog: pytest.LogCaptureFixture) -> None:
    r = FakeReader(2)
    r.gpus[1].nvlinks = 4
    asked: list[tuple[int, set[str]]] = []
    read = r.read_facts

    def spy(index: int, probes: Sequence[Probe]) -> Readout:
        asked.append((index, {p.name for p in probes}))
        return read(index, probes)

    r.read_facts = spy  # type: ignore[method-assign]
    s = make_sampler(r)
    with caplog.at_level(logging.INFO, logger="exporter.sampling.fact_reads"):
        step(s, r, 1.0, ticks=3)
    g0, g1 = s.snapshot.gpus
    assert not any(f.name in g0.facts for f in nvlink.FACTS)
    assert series(g0, "gpuledger_gpu_nvlink_bytes_total") == {}
    (line,) = [x.getMessage() for x in caplog.records]
    names = ", ".join(f.name for f in nvlink.FACTS)
    assert line == f"gpu 0: not supported here, not asking again: {names} (no NVLink)", line
    links = {f.name for f in nvlink.FACTS}
    assert [bool(names & links) for i, names in asked if i == 0] == [True, False, False]
    assert all(names >= links for i, names in asked if i == 1)
    assert s.snapshot.reader_errors == {}, "unsupported is no error"
    assert series(g1, "gpuledger_gpu_nvlink_bytes_total")[("3", "rx")] == 5e8 * 2  # 3 reads: 2 s after the first
    assert series(g1, "gpuledger_gpu_nvlink_state") == {(str(k),): 1.0 for k in range(4)}
    assert series(g1, "gpuledger_gpu_nvlink_errors_total")[("0", "crc")] == 0.0


def test_a_failed_fact_is_counted_under_its_name_and_keeps_its_value() -> None:
    r = FakeReader(1)
    r.gpus[0].facts["thermal_violation_seconds"] = Grows(0.5)
    s = make_sampler(r)
    step(s, r, 1.0, ticks=2)
    r.fail("thermal_violation_seconds", times=1)
    step(s, r, 1.0)
    snap = s.snapshot
    assert snap.reader_errors == {"thermal_violation_seconds": 1}
    assert snap.gpus[0].facts["thermal_violation_seconds"] == 0.5  # as of the read before
    step(s, r, 1.0)
    assert s.snapshot.gpus[0].facts["thermal_violation_seconds"] == 1.5
    r.fail("read_facts", times=1)  # the whole batch failed: each of its facts counts once
    step(s, r, 1.0)
    assert s.snapshot.reader_errors["pcie_tx_bytes"] == 1


def test_a_new_gauge_is_one_row_through_the_fast_lane() -> None:
    r = FakeReader(2)
    s = make_sampler(r, facts=(*FACTS, FAN))
    step(s, r, 1.0)
    assert r.calls["read_facts"] == 3 * 2  # per GPU: the fast lane's FAN in two rounds, the slow lane's batch
    r.gpus[1].facts["fan_speed"] = 0.55
    s.tick()
    (row,) = fact_metrics.rows((FAN,))
    assert row.labels == ("gpu", "uuid") and row.kind == "gauge" and row.unit == "ratio"
    assert dict(samples(row, s.snapshot)) == {("0", r.gpus[0].uuid): 0.3, ("1", r.gpus[1].uuid): 0.55}
    assert "nvmlDeviceGetFanSpeed (fast lane)" in row.source


def test_the_history_minutes_carry_the_counters_links_summed() -> None:
    base = GpuCounters(facts={"pcie_tx_bytes": 100.0, "nvlink_tx_bytes": {0: 1.0, 1: 2.0}})
    now = GpuCounters(
        sampled_seconds=60.0, facts={"pcie_tx_bytes": 250.0, "nvlink_tx_bytes": {0: 11.0, 1: 22.0, 2: 5.0}}
    )
    row = minute_row(60, FakeReader(1).devices()[0], now, base)
    assert row.values["pcie_tx_bytes"] == 150.0 and row.values["nvlink_tx_bytes"] == 35.0
    assert row.values["pcie_rx_bytes"] is None and row.values["power_violation_seconds"] is None  # not measured
    assert list(row.values) == list(ROLLUP_FIELDS)


def test_the_sampler_hands_the_history_its_fact_counters() -> None:
    r = FakeReader(1)
    r.gpus[0].nvlinks = 2
    s = make_sampler(r)
    rows: list[object] = []
    s._minute_sink = rows.extend
    clock = [600.0]
    s._wall = lambda: clock[0]  # minutes by a clock of the test's
    step(s, r, 1.0, ticks=3)
    clock[0] = 660.0
    step(s, r, 1.0, ticks=2)
    (first,) = [x for x in rows if isinstance(x, MinuteRow)]
    assert first.values["nvlink_tx_bytes"] == 2 * 5e8 * 2  # two links, 2 s each after the baseline read
    assert first.values["pcie_rx_bytes"] == 2e6 * 2 and first.values["power_violation_seconds"] == 0.0


def test_the_exposition_shows_a_fact_only_where_it_was_read() -> None:
    r = FakeReader(1)
    r.gpus[0].unsupported.add("pcie_replays")
    s = make_sampler(r)
    step(s, r, 1.0)
    text = render.render(s.snapshot).decode()
    assert "gpuledger_gpu_pcie_bytes_total{direction=" in text
    assert "gpuledger_gpu_pcie_replays_total" not in text  # absent, not zero
    assert "gpuledger_gpu_nvlink" not in text


def test_the_fake_answers_a_per_link_fact_per_link_and_refuses_it_without_nvlink() -> None:
    r = FakeReader(1, start=0.0)
    r.open()
    probes = [f for f in FACTS if f.name in ("nvlink_rx_bytes", "pcie_replays")]
    got = r.read_facts(0, probes)
    assert isinstance(got["nvlink_rx_bytes"], NotSupported) and got["pcie_replays"] == 0.0
    r.gpus[0].nvlinks = 2
    r.advance(2.0)
    assert r.read_facts(0, probes)["nvlink_rx_bytes"] == {0: 1e9, 1: 1e9}
    bad = r.read_facts(9, probes)
    assert all(isinstance(v, ReaderError) for v in bad.values())
