"""A Prometheus holding a synthetic fleet's raw series and their 5-minute (and hourly) rollups,
backfilled as docs/alerts.md says (``promtool tsdb create-blocks-from rules`` against the running
Prometheus, the blocks moved into its data folder, Prometheus restarted to load them; the hourly
rules in a second pass, since they read the 5-minute rules' series)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from analytics.synthetic import Fleet
from domain.week import Window
from tests.support.fleet import prometheus
from tests.support.http import free_port, http_get
from tests.support.paths import REPO
from tests.support.prometheus import PrometheusServer
from tests.support.tools import promtool, require_binary
from tests.support.victoria import VictoriaMetricsServer

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


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def replay(server: VictoriaMetricsServer, rules: Path, w: Window) -> None:
    """vmalert -replay of ``rules`` over the week (and one bucket past it), then a flush, so that
    what it wrote is read back."""
    res = subprocess.run(
        [
            require_binary("vmalert"),
            f"-rule={rules}",
            f"-datasource.url={server.url}",
            f"-remoteWrite.url={server.url}",
            f"-replay.timeFrom={_rfc3339(w.start)}",
            f"-replay.timeTo={_rfc3339(w.end + BUCKET)}",
            "-replay.disableProgressBar",
            "-replay.rulesDelay=0s",
            # one query per rule: vmalert writes the step at each chunk's edge twice, and a
            # VictoriaMetrics without -dedup.minScrapeInterval keeps both
            "-replay.maxDatapointsPerQuery=10000",
            # a replay's step is -datasource.queryStep (5 minutes unless set); 0: each group's interval
            "-datasource.queryStep=0s",
            f"-httpListenAddr=127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # What vmalert wrote last can reach the search after it exits: once in CI, on a loaded machine,
    # the hourly buckets of the week's end were not found right after the flush. Flush until the
    # count of the file's recorded samples over the week holds still between two reads.
    groups = yaml.safe_load(rules.read_text())["groups"]
    names = "|".join(r["record"] for g in groups for r in g["rules"] if "record" in r)
    count = urllib.parse.quote(f'sum(count_over_time({{__name__=~"{names}"}}[8d]))')
    seen: list[str] = []
    for _ in range(60):
        code, _, body = http_get(f"{server.url}/internal/force_flush", timeout=60)
        assert code == 200, body
        code, _, body = http_get(f"{server.url}/api/v1/query?query={count}&time={w.end + BUCKET}", timeout=60)
        assert code == 200, body
        seen.append(json.dumps(json.loads(body)["data"]["result"]))
        if len(seen) > 1 and seen[-1] == seen[-2] != "[]":
            return
        time.sleep(1.0)
    pytest.fail(f"the samples vmalert wrote never held still: {seen[-3:]}")
