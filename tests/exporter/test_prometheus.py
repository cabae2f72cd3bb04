"""A real Prometheus scrapes the exporter replaying the H200 capture; utilisation from
rate(busy)/rate(sampled) matches the capture's truth over the very window it covers."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.paths import CAPTURE
from tests.support.processes import ExporterProcess
from tests.support.prometheus import PrometheusServer

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration

SPEED = 4.0  # capture seconds per wall second: a 20 s window spans 80 s of capture
WINDOW = "20s"

LINES = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
RECS = LINES[1:]
T0, DURATION = RECS[0]["t"], RECS[-1]["t"] - RECS[0]["t"]
SAMPLES = sorted(
    {(ts / 1e6 - T0, v / 100) for r in RECS for ts, v in r["util_samples"] if 0 < ts / 1e6 - T0 <= DURATION}
)


def truth(p1: float, p2: float) -> float:
    """Mean busy share of the capture's sub-second samples at positions (p1, p2], looping."""
    values = []
    k = math.floor(p1 / DURATION)
    while k * DURATION < p2:
        values += [v for off, v in SAMPLES if p1 < k * DURATION + off <= p2]
        k += 1
    return float(sum(values) / len(values))


@pytest.fixture
def stack(
    tmp_path: Path, exporter_process: Callable[..., ExporterProcess]
) -> Iterator[tuple[ExporterProcess, PrometheusServer]]:
    exp = exporter_process("--reader", "replay", "--replay-speed", str(SPEED), "--sample-interval", "0.5")
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{exp.port}"], scrape_interval="1s")
    yield exp, prom
    prom.stop()


def test_rate_ratio_matches_the_replay_truth(
    stack: tuple[ExporterProcess, PrometheusServer],
) -> None:
    _, prom = stack
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        got = prom.query("count_over_time(gpuledger_gpu_sampled_seconds_total[1m])")
        if got and float(got[0]["value"][1]) >= 32:
            break
        time.sleep(1)
    else:
        pytest.fail("prometheus did not collect 32 scrapes in 90 s")

    now = time.time()
    checked = 0
    for at in (now - 10, now - 5, now):
        ratio = prom.query(
            f"rate(gpuledger_gpu_busy_seconds_total[{WINDOW}]) / rate(gpuledger_gpu_sampled_seconds_total[{WINDOW}])",
            at,
        )
        raw = prom.query(f"gpuledger_gpu_sampled_seconds_total[{WINDOW}]", at)
        assert len(ratio) == 1 and len(raw) == 1
        values = [float(v) for _, v in raw[0]["values"]]
        # sampled seconds = capture time covered since the first (baseline) tick at position ~0
        p1, p2 = values[0], values[-1]
        assert p2 - p1 > 50  # the window spans most of a loop of the capture
        expected = truth(p1, p2)
        got_ratio = float(ratio[0]["value"][1])
        assert abs(got_ratio - expected) * 100 < 0.5, (at, p1, p2, got_ratio, expected)
        print(
            f"window ({p1:.1f}, {p2:.1f}] capture s: rate ratio {100 * got_ratio:.3f} %, truth {100 * expected:.3f} %"
        )
        checked += 1
    assert checked == 3
