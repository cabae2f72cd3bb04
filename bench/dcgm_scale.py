"""The dcgm source's week against a real Prometheus and a real VictoriaMetrics holding N copies of the
Kubernetes shapes of ``analytics.synthetic_dcgm`` (7 GPUs each: the Helm chart's upgrade, the GPU
Operator's time-sliced GPU, a MIG node, an old manifest; 30 s scrapes), each copy a cluster of its
own. Wall time of ``DcgmSource.week`` (one week, every figure and job row), queries sent, and the
time with the stall search off (``stalled_sm_below = 0``: what a fleet on dcgm-exporter's default
counters, which leave SM activity out, pays).

    python bench/dcgm_scale.py [--clusters 1,4,8] [--repeats 3]

The generated data is heavy in stalls (an eighth of the pods stall an hour or more) and in the
shapes that need the second round (a time-sliced GPU, two counter resets and two MIG GPUs in each
7): a fleet of whole GPUs without sharing costs less per GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.config import PrometheusSettings
from analytics.sources.dcgm import DcgmSource
from analytics.synthetic_dcgm import kubernetes_fleet
from bench.common import require_prometheus, table, write_result
from domain.week import Window
from exporter.sampling.stalls import StallRule
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer

START = 1_795_219_200.0 - 7 * 86400  # a week before the test suite's anchor
INTERVAL = 30.0


def write(clusters: int, folder: Path) -> tuple[Path, Path, int]:
    """The fleets' OpenMetrics and VictoriaMetrics import files; the samples written."""
    om, vm = folder / "all.om", folder / "all.txt"
    samples = 0
    with om.open("w") as out_om, vm.open("w") as out_vm:
        for k in range(clusters):
            f = kubernetes_fleet(START - 600, 7.02, INTERVAL, seed=k, cluster=f"c{k}")
            samples += f.write_openmetrics(folder / "p.om")
            out_om.writelines(x for x in (folder / "p.om").read_text().splitlines(keepends=True) if x != "# EOF\n")
            f.write_import(folder / "p.txt")
            out_vm.write((folder / "p.txt").read_text())
        out_om.write("# EOF\n")
    return om, vm, samples


def week(url: str, stalls: bool) -> tuple[float, int, int]:
    rule = StallRule() if stalls else StallRule(sm_below=0.0)
    source = DcgmSource(
        PrometheusSettings(url=url, dcgm_scrape_interval=INTERVAL, kube_state_metrics=False), stall=rule
    )
    try:
        t0 = time.perf_counter()
        with source.api.report():
            data = source.week(Window(START, START + 7 * 86400, "week"))
        return time.perf_counter() - t0, source.api.queries, len(data.gpus)
    finally:
        source.api.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", default="1,4,8")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    require_prometheus()
    rows: list[dict[str, Any]] = []
    for n in (int(x) for x in a.clusters.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            om, vm, samples = write(n, folder)
            for store in ("prometheus", "victoriametrics"):
                (folder / store).mkdir()
                server = (
                    PrometheusServer.backfilled(folder / store, om)
                    if store == "prometheus"
                    else VictoriaMetricsServer.imported(folder / store, vm)
                )
                try:
                    for stalls in (True, False):
                        runs = [week(server.url, stalls) for _ in range(a.repeats)]
                        wall = statistics.median(r[0] for r in runs)
                        gpus = runs[0][2]
                        rows.append(
                            {
                                "store": store,
                                "gpus": gpus,
                                "samples": samples,
                                "stall_search": stalls,
                                "queries": runs[0][1],
                                "wall_s_median": round(wall, 2),
                                "wall_s_runs": [round(r[0], 2) for r in runs],
                                "s_per_gpu_week": round(wall / gpus, 3),
                            }
                        )
                finally:
                    server.stop()
    print(
        table(
            ["store", "GPUs", "samples", "stall search", "queries", "wall s (median)", "s per GPU-week"],
            [
                [
                    r["store"],
                    r["gpus"],
                    r["samples"],
                    r["stall_search"],
                    r["queries"],
                    r["wall_s_median"],
                    r["s_per_gpu_week"],
                ]
                for r in rows
            ],
        )
    )
    print("wrote", write_result("dcgm_scale", {"interval_s": INTERVAL, "repeats": a.repeats, "rows": rows}))


if __name__ == "__main__":
    main()
