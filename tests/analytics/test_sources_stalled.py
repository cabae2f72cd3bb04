"""The sources read stalled and charged seconds: GpuWeek.stalled_s, JobWeek.charged_s and
stalled_s from the embedded history and from a real Prometheus, None where not measured (no GPM,
or an exporter from before these counters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.prometheus import PrometheusSource
from domain.jobs import JobKey
from domain.week import iso_week
from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow
from tests.support.prometheus import PrometheusServer

WEEK = iso_week("2026-W47")
H200 = DeviceInfo(0, "GPU-aaaaaaaa-0000-4000-8000-000000000000", "NVIDIA H200", "00000000:19:00.0")
A100 = DeviceInfo(1, "GPU-bbbbbbbb-0000-4000-8000-000000000001", "NVIDIA A100-SXM4-80GB", "00000000:C1:00.0")
ADA, BOB, OLD = JobKey("1", "ada"), JobKey("2", "bob"), JobKey("3", "old")


def test_the_embedded_history_carries_stalled_and_charged(tmp_path: Path) -> None:
    rows: list[MinuteRow | JobMinuteRow] = []
    for k in range(10):
        m = int(WEEK.start) + 60 * k
        gpm = dict.fromkeys(ROLLUP_FIELDS, 0.0) | {"sampled_seconds": 60.0, "busy_seconds": 54.0}
        rows.append(MinuteRow(m, H200, gpm | {"stalled_seconds": 30.0 if k < 5 else 0.0}))
        rows.append(MinuteRow(m, A100, gpm | {"sm_active_seconds": None, "stalled_seconds": None}))
        rows.append(JobMinuteRow(m, H200.uuid, ADA, 60.0, 36.0, 100.0, 40.0, 20.0 if k < 5 else 0.0))
        rows.append(JobMinuteRow(m, H200.uuid, BOB, 60.0, 18.0, 50.0, 20.0, 10.0 if k < 5 else 0.0))
        rows.append(JobMinuteRow(m, A100.uuid, OLD, 60.0, 54.0, 0.0))  # as a writer before v4
    w = history.HistoryWriter(tmp_path / "h.db", hostname="node-a")
    w.submit(rows)
    w.stop()
    data = EmbeddedSource(tmp_path / "h.db").week(WEEK)
    gpus = {g.uuid: g for g in data.gpus}
    assert gpus[H200.uuid].stalled_s == 150.0 and gpus[A100.uuid].stalled_s is None
    jobs = {j.job: j for j in data.jobs}
    assert (jobs[ADA].charged_s, jobs[ADA].stalled_s) == (400.0, 100.0)
    assert (jobs[BOB].charged_s, jobs[BOB].stalled_s) == (200.0, 50.0)
    assert gpus[H200.uuid].sampled_s == 600.0  # the two jobs' charged seconds: the GPU's time, once
    assert (jobs[OLD].charged_s, jobs[OLD].stalled_s) == (None, None)


STEP = 300
STALL_STEPS = 3 * 86400 // STEP  # the H200 stalls half of each step for the week's first three days


def _om(path: Path) -> None:
    """A week of one H200 with GPM (two jobs sharing it, 2:1) and an A100 from an exporter before
    the charged and stalled counters (one job), scraped every 5 minutes."""
    times = [WEEK.start + k * STEP for k in range(-1, round(WEEK.seconds) // STEP + 2)]
    lines: list[str] = []

    def series(name: str, labels: dict[str, str], per_step: float, stalled: bool = False, start: float = 0.0) -> None:
        """A counter growing ``per_step`` each step (only the first STALL_STEPS when ``stalled``)."""
        lab = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        total = start
        for k, t in enumerate(times):
            lines.append(f"{name}{lab} {total:.12g} {t:.0f}")
            if not stalled or 1 <= k <= STALL_STEPS:  # k = 1 is the first step inside the week
                total += per_step

    for dev, host in ((H200, "node-a"), (A100, "node-b")):
        base = {"instance": f"{host}:10044", "job": "gpuledger", "gpu": str(dev.index), "uuid": dev.uuid}
        info = base | {"model": dev.model, "pci_bus_id": dev.pci_bus_id, "driver_version": "580", "hostname": host}
        series("gpuledger_gpu_info", info, 0.0, start=1.0)
        series("gpuledger_gpu_sampled_seconds_total", base, STEP)
        series("gpuledger_gpu_busy_seconds_total", base, 0.9 * STEP)
        if dev is H200:
            series("gpuledger_gpu_stalled_seconds_total", base, 0.5 * STEP, stalled=True)
    h200 = {"instance": "node-a:10044", "job": "gpuledger", "gpu": "0", "uuid": H200.uuid}
    for key, share in ((ADA, 2 / 3), (BOB, 1 / 3)):
        labels = h200 | dict(zip(("job_id", "user", "pod", "namespace", "container"), key.labels(), strict=True))
        series("gpuledger_job_gpu_sampled_seconds_total", labels, STEP)
        series("gpuledger_job_gpu_busy_seconds_total", labels, 0.9 * STEP * share)
        series("gpuledger_job_gpu_energy_joules_total", labels, 1000.0 * share)
        series("gpuledger_job_gpu_charged_seconds_total", labels, STEP * share)
        series("gpuledger_job_gpu_stalled_seconds_total", labels, 0.5 * STEP * share, stalled=True)
    a100 = {"instance": "node-b:10044", "job": "gpuledger", "gpu": "1", "uuid": A100.uuid}
    old = a100 | dict(zip(("job_id", "user", "pod", "namespace", "container"), OLD.labels(), strict=True))
    series("gpuledger_job_gpu_sampled_seconds_total", old, STEP)
    series("gpuledger_job_gpu_busy_seconds_total", old, 0.9 * STEP)
    series("gpuledger_job_gpu_energy_joules_total", old, 1000.0)
    path.write_text("\n".join(lines) + "\n# EOF\n")


@pytest.mark.integration
def test_prometheus_carries_stalled_and_charged(tmp_path: Path) -> None:
    om = tmp_path / "week.om"
    _om(om)
    server = PrometheusServer.backfilled(tmp_path, om)
    try:
        source = PrometheusSource(PrometheusSettings(url=server.url))
        try:
            data = source.week(WEEK)
        finally:
            source.api.close()
    finally:
        server.stop()
    assert data.problems == ()
    gpus = {g.uuid: g for g in data.gpus}
    assert gpus[H200.uuid].stalled_s == pytest.approx(0.5 * STEP * STALL_STEPS)  # GPU counters: exact
    assert gpus[A100.uuid].stalled_s is None
    jobs = {j.job: j for j in data.jobs}
    week_s = WEEK.seconds
    # per-job figures come from increase() per day: off by at most a step's growth each day
    for key, share in ((ADA, 2 / 3), (BOB, 1 / 3)):
        j = jobs[key]
        assert j.charged_s is not None and j.stalled_s is not None
        assert abs(j.charged_s - week_s * share) <= 7 * STEP * share
        assert abs(j.stalled_s - 0.5 * STEP * STALL_STEPS * share) <= 7 * STEP * share
    assert (jobs[ADA].charged_s or 0.0) + (jobs[BOB].charged_s or 0.0) <= gpus[H200.uuid].sampled_s * (1 + 1e-9)
    assert (jobs[OLD].charged_s, jobs[OLD].stalled_s) == (None, None)
    assert jobs[OLD].sampled_s == pytest.approx(week_s, abs=7 * STEP)
