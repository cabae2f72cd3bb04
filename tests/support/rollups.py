"""A Prometheus holding a synthetic fleet's raw series and their 5-minute (and hourly) rollups,
backfilled as docs/alerts.md says (``promtool tsdb create-blocks-from rules`` against the running
Prometheus, the blocks moved into its data folder, Prometheus restarted to load them; the hourly
rules in a second pass, since they read the 5-minute rules' series)."""

from __future__ import annotations

import shutil
from pathlib import Path

from analytics.synthetic import Fleet
from domain.week import Window
from tests.support.fleet import prometheus
from tests.support.paths import REPO
from tests.support.prometheus import PrometheusServer
from tests.support.tools import promtool

RULES = REPO / "deploy" / "prometheus" / "rules" / "gpuledger-rollups.yml"
HOURLY_RULES = REPO / "deploy" / "prometheus" / "rules" / "gpuledger-rollups-1h.yml"
BUCKET = 300  # the rollup groups' interval, seconds
HOUR = 3600  # the hourly groups'


def backfill_rollups(url: str, w: Window, folder: Path, rules: Path = RULES, interval: int = BUCKET) -> Path:
    """``promtool tsdb create-blocks-from rules`` over the window (and one interval past its end,
    the bucket stamped after its last minutes); the folder of the blocks written."""
    out = folder / f"{rules.stem}-blocks"
    # promtool (as Prometheus) evaluates a group at a phase derived from its name and the file's
    # path as given: a path relative to the folder gives the same phase wherever the clone is
    shutil.copy(rules, folder / rules.name)
    res = promtool(
        [
            *("tsdb", "create-blocks-from", "rules"),
            f"--start={int(w.start)}",
            f"--end={int(w.end) + interval}",
            f"--url={url}",
            f"--eval-interval={interval}s",
            f"--output-dir={out}",
            rules.name,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def prometheus_with_rollups(fleet: Fleet, w: Window, folder: Path) -> PrometheusServer:
    """The fleet's raw series (its jobs' Slurm records too) and their 5-minute rollups over ``w``
    in a Prometheus (stop it when done; ``add_hourly`` adds the hourly ones)."""
    server = prometheus(fleet, folder, records=True)
    try:
        blocks = backfill_rollups(server.url, w, folder)
    finally:
        server.stop()
    _load(blocks, folder)
    return PrometheusServer(folder, retention="10y")


def add_hourly(server: PrometheusServer, w: Window, folder: Path) -> PrometheusServer:
    """The same data with the hourly rollups over ``w`` backfilled too (a second pass: they read the
    5-minute rules' series); ``server`` is stopped, the returned one serves it all."""
    try:
        blocks = backfill_rollups(server.url, w, folder, HOURLY_RULES, HOUR)
    finally:
        server.stop()
    _load(blocks, folder)
    return PrometheusServer(folder, retention="10y")


def _load(blocks: Path, folder: Path) -> None:
    moved = 0
    for block in blocks.iterdir():
        if block.is_dir():
            shutil.move(str(block), folder / "data" / block.name)
            moved += 1
    assert moved, "promtool wrote no blocks"
