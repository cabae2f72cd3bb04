"""A synthetic fleet with known truth, in each form the analytics read: the embedded history and
a real Prometheus backfilled with gpuledger's or dcgm-exporter's series."""

from __future__ import annotations

import statistics
from pathlib import Path

from analytics import synthetic, synthetic_om
from analytics.synthetic import Fleet
from domain.week import iso_week
from tests.support.prometheus import PrometheusServer

WEEK = "2026-W47"


def small_fleet() -> Fleet:
    """2 hosts x 2 GPUs, a week at one-minute resolution (about 1 M samples in Prometheus)."""
    return synthetic.generate(iso_week(WEEK), hosts=2, gpus_per_host=2, seed=11)


def history(fleet: Fleet, folder: Path) -> Path:
    path = folder / "history.db"
    synthetic.write_history(fleet, path)
    return path


def prometheus(fleet: Fleet, folder: Path, naming: str = "gpuledger", records: bool = False) -> PrometheusServer:
    om = folder / "fleet.om"
    synthetic_om.write(fleet, om, naming, records=records)
    server = PrometheusServer.backfilled(folder, om)
    om.unlink()
    return server


def truth_quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]
