"""Report build time with the groupings on and off, on a synthetic week of 1,024 GPUs and ~5,000 jobs.

The week is made in memory (no source, no I/O): 1,024 GPUs on 128 hosts in two clusters; 5,000
jobs of 1, 2, 4 or 8 GPUs (each job one JobWeek per GPU it held, two jobs on some GPUs) with
accounts (40), partitions (4), QOS (3), namespaces (pods: a third of the jobs) and a team label.
Each configuration is built ``--repeat`` times (median); the report is also rendered (JSON, CSV,
HTML, Markdown), as the daemon writes it. Target (issue 14): three groupings on within +25 % of
today's groupings (user and namespace).

    python bench/groupings_build.py [--gpus 1024] [--jobs 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.csvio import to_csv
from analytics.report.html import to_html
from analytics.report.jsonio import to_json
from analytics.report.markdown import to_markdown
from bench.common import table, write_result
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, iso_week

WEEK = iso_week("2026-W47")
WEEK_S = WEEK.seconds
CONFIGS: dict[str, tuple[str, ...]] = {
    "today (user, namespace)": ("user", "namespace"),
    "+ account, partition, cluster": ("user", "namespace", "account", "partition", "cluster"),
    "+ account, partition, qos, cluster, label:label_team": (
        "user",
        "namespace",
        "account",
        "partition",
        "qos",
        "cluster",
        "label:label_team",
    ),
}


def week(gpus: int, jobs: int, seed: int = 14, users: int = 300) -> WeekData:
    rng = random.Random(seed)
    gs = tuple(
        GpuWeek(
            f"GPU-{i:05d}",
            f"node{i // 8:03d}",
            "NVIDIA H200",
            str(i % 8),
            WEEK_S * rng.uniform(0.97, 1.0),
            WEEK_S * rng.uniform(0.2, 0.9),
            WEEK_S * rng.uniform(0.1, 0.6),
            WEEK_S * 0.9,
            WEEK_S * 0.1,
            WEEK_S * 450.0,
            cluster="east" if i < gpus // 2 else "west",
        )
        for i in range(gpus)
    )
    rows = []
    for k in range(jobs):
        size = rng.choice((1, 1, 1, 2, 4, 8))
        first = rng.randrange(0, gpus - size + 1)
        held = WEEK_S * rng.uniform(0.01, 0.3)
        pod = k % 3 == 0
        key = JobKey(
            "" if pod else str(100000 + k),
            "" if pod else f"user{k % users}",
            f"train-{k}" if pod else "",
            f"ns{k % 12}" if pod else "",
        )
        for g in gs[first : first + size]:
            rows.append(
                JobWeek(
                    g.uuid,
                    g.host,
                    key,
                    held,
                    held * rng.uniform(0.3, 0.9),
                    held * 400.0,
                    sm_active_s=held * 0.3,
                    partition="" if pod else rng.choice(("gpu", "long", "debug", "interactive")),
                    charged_s=held * 0.9,
                    account="" if pod else f"acct{k % 40}",
                    qos="" if pod else rng.choice(("normal", "high", "low")),
                    labels=(("label_team", f"team{k % 8}"),) if pod else (),
                )
            )
    return WeekData(WEEK, "synthetic", gs, tuple(rows))


def _times(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and best of ``repeat`` runs (the best is the least disturbed by other load); the
    garbage collector off while one runs, as timeit does, so a collection does not land at random."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        finally:
            gc.enable()
    return statistics.median(times), min(times)


def _render(data: WeekData, cost: CostModel, group_by: Sequence[str]) -> None:
    r = build(data, cost, now=WEEK.end, group_by=group_by)
    to_json(r)
    to_csv(r)
    to_html(r)
    to_markdown(r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    data, cost = week(a.gpus, a.jobs), CostModel()
    out: list[dict[str, Any]] = []
    for name, group_by in CONFIGS.items():
        report = build(data, cost, now=WEEK.end, group_by=group_by)
        b, b_min = _times(lambda g=group_by: build(data, cost, now=WEEK.end, group_by=g), a.repeat)  # type: ignore[misc]
        w, w_min = _times(lambda g=group_by: _render(data, cost, g), a.repeat)  # type: ignore[misc]
        out.append(
            {
                "groupings": name,
                "group_by": list(group_by),
                "rows": len(report.rows),
                "build_s": b,
                "build_best_s": b_min,
                "render_s": w,
                "render_best_s": w_min,
            }
        )
    for x in out:
        for k in ("build_s", "build_best_s", "render_s", "render_best_s"):
            x[k.removesuffix("_s") + "_vs_today"] = x[k] / out[0][k] - 1
    print(f"{a.gpus} GPUs, {a.jobs} jobs ({len(data.jobs)} job rows); median and best of {a.repeat}")
    print(
        table(
            ["groupings", "rows", "build s (best)", "vs today", "build+render s (best)", "vs today"],
            [
                [
                    x["groupings"],
                    x["rows"],
                    f"{x['build_s']:.3f} ({x['build_best_s']:.3f})",
                    f"{100 * x['build_vs_today']:+.1f} % ({100 * x['build_best_vs_today']:+.1f} %)",
                    f"{x['render_s']:.3f} ({x['render_best_s']:.3f})",
                    f"{100 * x['render_vs_today']:+.1f} % ({100 * x['render_best_vs_today']:+.1f} %)",
                ]
                for x in out
            ],
        )
    )
    path = write_result(
        "groupings_build",
        {"gpus": a.gpus, "jobs": a.jobs, "job_rows": len(data.jobs), "repeat": a.repeat, "configs": out},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
