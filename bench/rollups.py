"""The weekly report from raw series against the report from the 5-minute rollups, and the time
to backfill a week of rollups.

For each fleet size the week of ``bench/report_scale.py`` (N GPUs x 7 days at 15 s: six GPU
counters, three per-job counters, job info, queue series, two clusters) is backfilled into a real
Prometheus and reported by ``gpuledger report --source prometheus`` in a child process (one
warm-up, then ``--repeats`` timed). Then the rollups are backfilled as docs/alerts.md says:
``promtool tsdb create-blocks-from rules`` with ``deploy/prometheus/rules/gpuledger-rollups.yml``
against that Prometheus (timed), the blocks moved into its TSDB, Prometheus restarted, and the same
report timed again: it now reads the rollups (checked: the report's JSON names them). The rollup
blocks are taken out again afterwards, so a ``--cache``d TSDB stays raw.

    python bench/rollups.py [--gpus 64,1024] [--days 7] [--step 15] [--repeats 3] [--cache DIR]

Prints a table and writes bench/results/rollups.json (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import require_prometheus, start_prometheus, table, write_result
from bench.report_scale import DATA, DAY, WEEK_START, backfill, queries, report_once

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "rules" / "gpuledger-rollups.yml"
BUCKET = 300
NOTE = "5-minute rollups"


def timed_reports(url: str, out: Path, repeats: int) -> tuple[list[tuple[float, float, int]], tuple[float, float, int]]:
    first = report_once(url, out / "warmup", None, "--no-day-cache")
    runs = [report_once(url, out / f"run{i}", None, "--no-day-cache") for i in range(repeats)]
    if any(code != 0 for _, _, code in [first, *runs]):
        raise RuntimeError(f"report failed: {first} {runs}")
    return runs, first


def read_rollups(out: Path) -> bool:
    """Whether the report written to ``out`` says it read the rollups (its JSON's approximations)."""
    return any(NOTE in p.read_text() for p in out.rglob("*.json"))


def run_size(gpus: int, days: int, step: int, repeats: int, cache: Path | None) -> dict[str, Any]:
    name = f"{gpus}-gpus-{days}d-{step}s-{DATA}"
    work = cache / name if cache else Path(tempfile.mkdtemp(prefix="gpuledger-rollups-"))
    meta = work / "backfill.json"
    port = 19190 + gpus % 1000
    try:
        if meta.exists():
            raw_meta = json.loads(meta.read_text())
            samples, fill_s = raw_meta["samples"], raw_meta["seconds"]
            print(f"{gpus} GPUs: reusing {work} ({samples / 1e6:.1f} M samples)", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            print(f"{gpus} GPUs: backfilling {days} days at {step} s", flush=True)
            samples, fill_s = backfill(gpus, days, step, work)
            meta.write_text(json.dumps({"samples": samples, "seconds": fill_s}))
        (work / "prometheus.yml").write_text("global: {}\n")
        blocks = work / "rollup-blocks"
        shutil.rmtree(blocks, ignore_errors=True)

        prom, url = start_prometheus(work, port)
        try:
            raw_runs, raw_first = timed_reports(url, work / "reports-raw", repeats)
            assert not read_rollups(work / "reports-raw" / "run0"), "the raw TSDB has rollups"
            raw_queries, _ = queries(url)
            t0 = time.monotonic()
            subprocess.run(
                [
                    "promtool",
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--start={WEEK_START}",
                    f"--end={WEEK_START + days * DAY + BUCKET}",
                    f"--url={url}",
                    f"--eval-interval={BUCKET}s",
                    f"--output-dir={blocks}",
                    str(RULES),
                ],
                check=True,
                capture_output=True,
                cwd=work,
            )
            rollup_s = time.monotonic() - t0
        finally:
            prom.terminate()
            prom.wait(timeout=60)
        moved = []
        for b in blocks.iterdir():
            if b.is_dir():
                shutil.move(str(b), work / "data" / b.name)
                moved.append(b.name)
        rollup_mib = sum(f.stat().st_size for m in moved for f in (work / "data" / m).rglob("*") if f.is_file()) / 2**20
        print(f"  rollups backfilled in {rollup_s:.1f} s ({len(moved)} blocks, {rollup_mib:.1f} MiB)", flush=True)
        prom, url = start_prometheus(work, port)
        try:
            rolled_runs, rolled_first = timed_reports(url, work / "reports-rollups", repeats)
            assert read_rollups(work / "reports-rollups" / "run0"), "the report did not read the rollups"
            rolled_queries, _ = queries(url)
        finally:
            prom.terminate()
            prom.wait(timeout=60)
            for m in moved:  # the cached TSDB stays raw
                shutil.rmtree(work / "data" / m, ignore_errors=True)

        def summary(runs: list[tuple[float, float, int]]) -> dict[str, Any]:
            times = sorted(s for s, _, _ in runs)
            return {
                "median_s": times[len(times) // 2],
                "min_s": times[0],
                "max_s": times[-1],
                "seconds": [s for s, _, _ in runs],
                "peak_rss_mib": max(r for _, r, _ in runs),
            }

        return {
            "gpus": gpus,
            "days": days,
            "step_s": step,
            "samples_millions": samples / 1e6,
            "raw_backfill_s": fill_s,
            "rollup_backfill_s": rollup_s,
            "rollup_blocks_mib": rollup_mib,
            "raw": {**summary(raw_runs), "first_s": raw_first[0], "queries": raw_queries},
            "rollups": {**summary(rolled_runs), "first_s": rolled_first[0], "queries": rolled_queries},
        }
    finally:
        if cache is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="64,1024", help="fleet sizes, comma-separated")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=15, help="scrape interval of the backfilled series (s)")
    ap.add_argument("--repeats", type=int, default=3, help="timed reports per store")
    ap.add_argument("--cache", type=Path, help="keep the raw TSDBs here and reuse them next time")
    args = ap.parse_args()
    require_prometheus()
    rows = [run_size(int(g), args.days, args.step, args.repeats, args.cache) for g in args.gpus.split(",")]
    print(
        table(
            [
                "GPUs",
                "samples (M)",
                "raw report (median s)",
                "rollup report (median s)",
                "speed-up",
                "rollup backfill (s)",
            ],
            [
                [
                    r["gpus"],
                    r["samples_millions"],
                    r["raw"]["median_s"],
                    r["rollups"]["median_s"],
                    r["raw"]["median_s"] / r["rollups"]["median_s"],
                    r["rollup_backfill_s"],
                ]
                for r in rows
            ],
        )
    )
    print(write_result("rollups", {"rows": rows}))


if __name__ == "__main__":
    main()
