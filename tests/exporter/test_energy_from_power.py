"""A GPU without NVML's energy counter (before Volta: nvmlDeviceGetTotalEnergyConsumption answers
NotSupported) gets its energy integrated from power samples, and says so at every step: the
``gpuledger_gpu_energy_integrated_seconds_total`` counter, the history's
``energy_integrated_seconds`` minutes, the report's GPU row ("Energy from") and its notes. A GPU
with the counter says nothing of the kind: the series is absent, the column NULL."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.report.build import build
from analytics.report.markdown import to_markdown
from analytics.sources.embedded import EmbeddedSource
from domain.week import Window
from exporter import history
from exporter.readers import Process
from exporter.readers.fake import FakeReader
from exporter.scrape import render
from exporter.snapshot import JobMinuteRow, MinuteRow
from tests.support.metrics import parse_metrics
from tests.support.sampling import make_sampler
from tests.support.settings import H200_COST, analytics_settings

START = 1_800_000_000  # a minute boundary (2027-01-15 08:00 UTC)
MINUTES = 3
POWER = (150.0, 250.0)  # GPU 0's power alternates between these each second: the mean is 200 W


Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Metrics]:
    """Three minutes of one-second rounds: GPU 0 has no energy counter (a P100), GPU 1 has one."""
    tmp = tmp_path_factory.mktemp("energy-from-power")
    r = FakeReader(2)
    old, new = r.gpus
    old.model, old.unsupported, old.power_watts = "Tesla P100-PCIE-16GB", {"energy_joules"}, POWER[1]
    new.model, new.power_watts = "NVIDIA H200", 400.0
    for i, g in enumerate(r.gpus):
        g.util, g.processes = 0.5, [Process(100 + i, 1 << 30)]
    rows: list[MinuteRow | JobMinuteRow] = []
    wall = [float(START - 1)]
    s = make_sampler(r)
    s._minute_sink = rows.extend
    s._wall = lambda: wall[0]
    s.tick()
    s.slow_tick()
    for k in range(60 * MINUTES):
        old.power_watts = POWER[k % 2]
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
        s.slow_tick()
    metrics = parse_metrics(render.render(s.snapshot).decode())
    s.stop()
    w = history.HistoryWriter(tmp / "history.db", hostname="old-node")
    w.submit(rows)
    w.stop()
    return tmp / "history.db", metrics


def _by_uuid(series: dict[tuple[tuple[str, str], ...], float]) -> dict[str, float]:
    return {dict(k)["uuid"]: v for k, v in series.items()}


def test_the_exporter_says_which_gpu_integrates_power(run: tuple[Path, Metrics]) -> None:
    _, m = run
    old, new = FakeReader(2).gpus
    integrated = _by_uuid(m["gpuledger_gpu_energy_integrated_seconds_total"])
    sampled = _by_uuid(m["gpuledger_gpu_sampled_seconds_total"])
    energy = _by_uuid(m["gpuledger_gpu_energy_joules_total"])
    assert integrated.keys() == {old.uuid}  # absent, not 0, where the counter answers
    assert integrated[old.uuid] == pytest.approx(sampled[old.uuid]) == pytest.approx(60.0 * MINUTES, abs=1.0)
    # the trapezoid over 150/250 W alternating (the baseline at 250 W): 200 W x the covered seconds
    assert energy[old.uuid] == pytest.approx(200.0 * sampled[old.uuid], rel=1e-9)
    assert energy[new.uuid] == pytest.approx(400.0 * sampled[new.uuid], rel=0.05)  # the fake's counter


def test_the_history_and_the_report_say_so(run: tuple[Path, Metrics]) -> None:
    path, _ = run
    old, new = FakeReader(2).gpus
    db = history.connect(path, readonly=True)
    hours = {h.uuid: h.values for h in history.gpu_hours(db, START - 60, START + 3600)}
    db.close()
    assert hours[old.uuid]["energy_integrated_seconds"] == pytest.approx(hours[old.uuid]["sampled_seconds"])
    assert hours[new.uuid]["energy_integrated_seconds"] is None

    span = Window(START, START + 60 * MINUTES, "span")
    week = EmbeddedSource(path).week(span)
    assert {g.uuid: g.energy_measure for g in week.gpus} == {old.uuid: "power", new.uuid: ""}
    report = build(week, analytics_settings(cost=H200_COST).cost, now=START + 7200)
    rows = {r.key.split(" ")[-1]: r for r in report.group("gpu")}
    assert (rows[old.uuid].energy_measure, rows[new.uuid].energy_measure) == ("power", "counter")
    kwh = rows[old.uuid].energy_kwh
    assert kwh is not None and kwh > 0  # never 0 kWh for want of a counter
    (host,) = report.group("host")
    assert host.energy_measure == "mixed" and report.fleet.energy_measure == "mixed"
    (note,) = [a for a in report.approximations if "integrated from power" in a]
    assert "1 GPU(s)" in note and "old-node/0" in note
    md = to_markdown(report)
    assert "power samples (no counter)" in md and "energy counter" in md
