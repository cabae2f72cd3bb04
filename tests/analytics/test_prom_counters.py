"""Counter totals per day from a real Prometheus (``analytics.sources.counters``): exact from the
values at the day boundaries, and right where that would be wrong (a reset, a GPU appearing or
leaving, a scrape gap over midnight, a GPU seen at no boundary at all)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.sources.counters import day_totals, hourly
from analytics.sources.promapi import PromAPI
from domain.week import Window
from tests.support.prometheus import PrometheusServer

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration

DAY0 = 1795219200  # Saturday 2026-11-21 00:00 UTC
STEP = 60
H = 3600
# uuid -> (first sample, last sample, reset at, gap (start, end)): times from DAY0
GPUS: dict[str, tuple[int, int, int | None, tuple[int, int] | None]] = {
    "GPU-steady": (-STEP, 2 * 86400 + STEP, None, None),
    "GPU-reset": (-STEP, 2 * 86400 + STEP, 12 * H, None),  # the exporter restarted at noon
    "GPU-born": (6 * H, 2 * 86400 + STEP, None, None),  # first scraped at 06:00 on day 1
    "GPU-gap": (-STEP, 2 * 86400 + STEP, None, (86400 - 8 * 60, 86400 + 8 * 60)),  # no scrape 23:52-00:08
    "GPU-gone": (-STEP, 86400 + 18 * H - STEP, None, None),  # last scraped 17:59 on day 2
    "GPU-brief": (2 * H, 4 * H, None, None),  # 02:00-04:00 on day 1: at no boundary
}


def _sampled(uuid: str, t: int) -> float:
    """The exporter's counter at t: one second per second since it started (or restarted)."""
    first, _, reset, _ = GPUS[uuid]
    return float(t - (reset if reset is not None and t >= reset else first))


def _write(path: Path) -> None:
    with path.open("w") as out:
        for uuid, (first, last, _, gap) in GPUS.items():
            times = [t for t in range(first, last + 1, STEP) if not (gap and gap[0] < t < gap[1])]
            for t in times:
                out.write(f'gpuledger_gpu_info{{uuid="{uuid}",model="NVIDIA H200",hostname="n1"}} 1 {DAY0 + t}\n')
            for t in times:
                out.write(f'gpuledger_gpu_sampled_seconds_total{{uuid="{uuid}"}} {_sampled(uuid, t)} {DAY0 + t}\n')
            for t in times:
                out.write(f'gpuledger_gpu_busy_seconds_total{{uuid="{uuid}"}} {_sampled(uuid, t) / 2} {DAY0 + t}\n')
        out.write("# EOF\n")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromAPI]:
    tmp = tmp_path_factory.mktemp("counters")
    _write(tmp / "series.om")
    server = PrometheusServer.backfilled(tmp, tmp / "series.om")
    api = PromAPI(PrometheusSettings(url=server.url))
    yield api
    api.close()
    server.stop()


def _truth(uuid: str, start: int, end: int) -> float:
    """Seconds the GPU's exporter counted inside [start, end)."""
    first, last, _, _ = GPUS[uuid]
    return float(max(0, min(end, last + STEP) - max(start, first)))


COUNTERS = {"sampled": "gpuledger_gpu_sampled_seconds_total", "busy": "gpuledger_gpu_busy_seconds_total"}


def test_day_totals_are_exact_or_within_the_data_prometheus_holds(api: PromAPI) -> None:
    w = Window(DAY0, DAY0 + 2 * 86400, "two days", "UTC")
    queries_before = api.queries
    totals = day_totals(api, w, COUNTERS, "sampled", "gpuledger_gpu_info")
    assert [d.day.date for d in totals.days] == ["2026-11-21", "2026-11-22"]
    got = {u: [day.get("sampled", u) for day in totals.days] for u in GPUS}
    truth = {u: [_truth(u, 0, 86400), _truth(u, 86400, 2 * 86400)] for u in GPUS}
    assert got["GPU-steady"] == truth["GPU-steady"] == [86400.0, 86400.0]  # boundary values: exact
    # the rest were redone with increase(): within one scrape interval of what was scraped
    for uuid in ("GPU-reset", "GPU-born", "GPU-gone", "GPU-brief"):
        for day in (0, 1):
            if truth[uuid][day]:
                assert got[uuid][day] == pytest.approx(truth[uuid][day], abs=STEP), (uuid, day)
            else:
                assert got[uuid][day] is None, (uuid, day)
    # 16 minutes around midnight were never scraped: they are missing, not invented
    for day in (0, 1):
        g = got["GPU-gap"][day]
        assert g is not None and truth["GPU-gap"][day] - 8 * 60 - STEP <= g <= truth["GPU-gap"][day]
    assert totals.days[0].get("busy", "GPU-reset") == pytest.approx(totals.days[0].growth["sampled"]["GPU-reset"] / 2)
    assert set(totals.labels) == set(GPUS) and totals.labels["GPU-brief"]["model"] == "NVIDIA H200"
    assert totals.total("sampled", "GPU-steady") == 2 * 86400.0 and totals.total("sampled", "GPU-none") is None
    # 3 boundaries x (2 counters + info) + 2 resets() + 2 days x 2 counters redone + 1 info lookup
    assert api.queries - queries_before == 9 + 2 + 4 + 1


def test_hourly_growth_from_one_range_query(api: PromAPI) -> None:
    w = Window(DAY0, DAY0 + 86400, "day", "UTC")
    hours = hourly(api, w, COUNTERS["sampled"])
    assert hours["GPU-steady"] == [3600.0] * 24
    # the hour that ends at the restart counts what came after the reset (nothing yet); callers
    # scale the hours to the exact day totals
    assert hours["GPU-reset"][11] == 0.0 and hours["GPU-reset"][12] == 3600.0
    assert hours["GPU-born"] == [0.0] * 6 + [3600.0] * 18
