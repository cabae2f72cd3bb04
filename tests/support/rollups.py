"""A Prometheus holding a synthetic fleet's raw series and their 5-minute rollups, backfilled as
docs/alerts.md says (``promtool tsdb create-blocks-from rules`` against the running Prometheus,
the blocks moved into its data folder, Prometheus restarted to load them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from analytics.synthetic import Fleet
from domain.week import Window
from tests.support.fleet import prometheus
from tests.support.paths import REPO
from tests.support.prometheus import PrometheusServer
from tests.support.tools import require_binary

RULES = REPO / "deploy" / "prometheus" / "rules" / "gpuledger-rollups.yml"
BUCKET = 300  # the rollup groups' interval, seconds


def backfill_rollups(url: str, w: Window, folder: Path) -> Path:
    """``promtool tsdb create-blocks-from rules`` over the window (and one bucket past its end, the
    bucket stamped at the end); the folder of the blocks written."""
    out = folder / "rollup-blocks"
    # promtool (as Prometheus) evaluates a group at a phase derived from its name and the file's
    # path as given: a path relative to the folder gives the same phase wherever the clone is
    shutil.copy(RULES, folder / RULES.name)
    res = subprocess.run(
        [
            require_binary("promtool"),
            *("tsdb", "create-blocks-from", "rules"),
            f"--start={int(w.start)}",
            f"--end={int(w.end) + BUCKET}",
            f"--url={url}",
            f"--eval-interval={BUCKET}s",
            f"--output-dir={out}",
            RULES.name,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def prometheus_with_rollups(fleet: Fleet, w: Window, folder: Path) -> PrometheusServer:
    """The fleet's raw series and their rollups over ``w`` in a Prometheus (stop it when done)."""
    server = prometheus(fleet, folder)
    try:
        blocks = backfill_rollups(server.url, w, folder)
    finally:
        server.stop()
    moved = 0
    for block in blocks.iterdir():
        if block.is_dir():
            shutil.move(str(block), folder / "data" / block.name)
            moved += 1
    assert moved, "promtool wrote no blocks"
    return PrometheusServer(folder, retention="10y")
