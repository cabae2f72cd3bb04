"""The monthly statements at scale: one statement per user, account and namespace of a window of
~100,000 jobs, made one key at a time (``statement_of`` per key: a pass over every job per key, as
the daemon did before) and in one pass (``statements_of``, each written as it is made).

The window is bench/groupings_build.py's synthetic week (no source, no I/O before the report): jobs
of 1-8 GPUs, ``--users`` users, 40 accounts, 12 namespaces (a third of the jobs are pods). The
report is built once, outside the timing; each way then makes every statement and renders it in
``--formats`` into a temporary folder. The peak is the Python heap allocated during the phase
(tracemalloc, in a second run: it slows the code), above what the report already holds.

    python bench/statements_scale.py [--gpus 10000] [--jobs 100000] [--users 1000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.model import Report
from analytics.statements.render import write
from analytics.statements.statement import Statement, keys, statement_of, statements_of
from bench.common import table, write_result
from bench.groupings_build import WEEK, week
from domain.week import JobWeek

GROUPINGS = ("user", "account", "namespace")


def per_key(jobs: Sequence[JobWeek], r: Report, grouping: str) -> Iterator[Statement]:
    for k in keys(jobs, grouping):
        yield statement_of(jobs, r, grouping, k, None)


def one_pass(jobs: Sequence[JobWeek], r: Report, grouping: str) -> Iterator[Statement]:
    return statements_of(jobs, r, grouping, None)


Way = Callable[[Sequence[JobWeek], Report, str], Iterator[Statement]]


def run(way: Way, jobs: Sequence[JobWeek], r: Report, formats: list[str], folder: Path) -> tuple[int, int]:
    made = files = 0
    for grouping in GROUPINGS:
        for st in way(jobs, r, grouping):
            made += 1
            files += len(write(st, formats, folder))
    return made, files


def timed(way: Way, jobs: Sequence[JobWeek], r: Report, formats: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        gc.collect()
        t = time.perf_counter()
        made, files = run(way, jobs, r, formats, Path(d))
        seconds = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        run(way, jobs, r, formats, Path(d))
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    return {"statements": made, "files": files, "seconds": seconds, "peak_mib": peak / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--formats", default="html,md,csv")
    ap.add_argument("--skip-per-key", action="store_true", help="only the one-pass way (per key is quadratic)")
    a = ap.parse_args()
    formats = a.formats.split(",")
    data = week(a.gpus, a.jobs, users=a.users)
    t = time.perf_counter()
    r = build(data, CostModel(), now=WEEK.end)
    built = time.perf_counter() - t
    ways: dict[str, Way] = {"one pass (statements_of)": one_pass}
    if not a.skip_per_key:
        ways = {"per key (statement_of each)": per_key, **ways}
    out = {name: timed(way, data.jobs, r, formats) for name, way in ways.items()}
    print(f"{a.gpus} GPUs, {a.jobs} jobs ({len(data.jobs)} job rows), {a.users} users; report built in {built:.1f} s")
    print(
        table(
            ["way", "statements", "files", "seconds", "peak MiB (heap)"],
            [[k, v["statements"], v["files"], v["seconds"], v["peak_mib"]] for k, v in out.items()],
        )
    )
    path = write_result(
        "statements_scale",
        {
            "gpus": a.gpus,
            "jobs": a.jobs,
            "job_rows": len(data.jobs),
            "users": a.users,
            "formats": formats,
            "report_build_s": built,
            "ways": out,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
