"""The weekly report of a large fleet read from its 5-minute rollups alone (issue 25's targets).

A week of N GPUs is written straight as the rollup rules' series (``gpuledger:*:increase5m``,
5-minute buckets stamped on the clock's 5 minutes, as vmalert writes them and as a backfill with
``promtool tsdb create-blocks-from rules`` leaves them): per GPU its ``gpuledger_gpu_info`` (and the
identity rule's 5-minute record of it) and
six counters' buckets; per job and GPU its four counters' buckets (sampled, busy, energy,
charged) and its ``gpuledger_job_info``; per cluster and partition the queue and job-outcome
series of ``bench/report_scale.py`` (raw, every 5 minutes). The raw week is not written: at
10,000 GPUs it would be 4 billion samples, and the report does not read it where the rollups
cover the window (what the issue's target asks: "from rollups (backfilled; the raw week need
not be)").

Jobs: each pair of GPUs (one host holds four pairs) runs one two-GPU job per ``--slot-hours``
slot, 80 % of the slots taken, two idle buckets of grace after each (the exporter keeps a
finished job's series 10 minutes); at 10,000 GPUs and 8-hour slots that is 84,000 jobs and
168,000 job-GPU series a week. 40 users in 10 accounts, 2 partitions, 3 QOS, two clusters; a
twentieth of the pairs hold their GPUs idle; a day-long diurnal load.

Each day is written as OpenMetrics while promtool backfills the day before; then a real
Prometheus serves the TSDB and ``gpuledger report --source prometheus`` runs in a child process,
each timed (wall from spawn to exit, the child's peak RSS from wait4): a warm-up and ``--repeats``
with ``--no-day-cache`` (the week read at once, as before the day cache); then the week's days are
kept as the daemon keeps them after a refresh (``analytics.daycache``, timed in this process), and
``--repeats`` reports take all seven from their files, and ``--repeats`` with the last day's file
deleted first (the daemon's Monday report: six days kept, Sunday read; then kept again, timed). The run fails
unless the report says it read the rollups, and unless the reports from the kept days have the
same rows and figures.

    python bench/rollup_scale.py [--gpus 1024,10000] [--slot-hours 8] [--repeats 3] [--cache DIR]

Prints a table and writes bench/results/rollup_scale.json (docs/performance.md). Targets: 10,000
GPUs in <= 10 s and <= 1 GB; 1,024 GPUs >= 3x faster than the raw report's 9.1 s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import require_prometheus, start_prometheus, table, write_result
from bench.report_scale import DAY, WEEK_START, _scheduler, cluster_of, job_attrs, queries, report_once
from bench.rollups import read_rollups

BUCKET = 300
PER_DAY = DAY // BUCKET
GRACE_BUCKETS = 2
HOUR = 3600
DATA = "rollups-5m-1h-pairs-v4"  # in the cache folder's name: change it whenever the data changes
GPU_COUNTERS = (
    *("sampled_seconds", "busy_seconds", "sm_active_seconds", "allocated_seconds"),
    *("allocated_idle_seconds", "energy_joules"),
)
JOB_COUNTERS = ("sampled_seconds", "busy_seconds", "energy_joules", "charged_seconds")


def _lines(prefix: str, ts: list[int], values: list[float]) -> str:
    return "".join(f"{prefix}{v:.10g} {t}\n" for v, t in zip(values, ts, strict=True))


def taken_slots(pair: int, slots: int) -> np.ndarray:
    return np.random.default_rng([1, pair]).random(slots) < 0.8


def buckets(
    g: int, k0: int, k1: int, slot: int, start: int = WEEK_START
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """GPU g's buckets k0..k1 (bucket k covers (start + 300 k, start + 300 (k + 1)]): each counter's
    growth, the slot each bucket is in, and whether a job ran in it."""
    k = np.arange(k0, k1)
    t = start + BUCKET * k
    sl = (k * BUCKET) // slot
    running = taken_slots(g // 2, int(sl[-1]) + 1)[sl]
    holder = (g // 2) % 20 == 0  # holds its GPUs and idles
    phase = (g % 97) / 97 * 0.2
    noise = (np.sin(k * 12.9898 + g * 78.233) * 43758.5453) % 1.0  # of the bucket alone, not of k0
    load = 0.5 + 0.4 * np.sin(2 * np.pi * ((t % DAY) / DAY - 0.25 + phase)) + 0.1 * (noise - 0.5)
    util = np.where(running, 0.0 if holder else np.clip(load, 0.0, 1.0), 0.0)
    s = float(BUCKET)
    inc = {
        "sampled_seconds": np.full(len(k), s),
        "busy_seconds": util * s,
        "sm_active_seconds": util * 0.8 * s,
        "allocated_seconds": np.where(running, s, 0.0),
        "allocated_idle_seconds": np.where(running & (util < 0.05), s, 0.0),
        "energy_joules": (75.5 + 620.0 * util) * s,
    }
    return inc, sl, running


def hourly(stamps: np.ndarray, values: np.ndarray, lo: int, hi: int) -> tuple[list[int], list[float]]:
    """The hourly rollup of 5-minute buckets, as deploy/prometheus/rules/gpuledger-rollups-1h.yml
    writes it at a phase of 5 minutes past the hour: the bucket stamped H + 5m holds those stamped
    in (H - 1h, H]. Those stamped in [lo, hi)."""
    hours = -(-stamps // HOUR) * HOUR + BUCKET
    at, which = np.unique(hours, return_inverse=True)
    sums = np.bincount(which, weights=values)
    keep = (at >= lo) & (at < hi)
    return at[keep].tolist(), sums[keep].tolist()


def write_day(args: tuple[int, int, int, int, str, int]) -> int:
    """Day ``day`` of the fleet's rollups into ``path`` (OpenMetrics with its ``# EOF``); the samples.
    The hourly buckets stamped in the day hold the previous day's last hour; the last day's file
    also holds the bucket of its own last hour (stamped 5 minutes after its end)."""
    gpus, day, days, slot, path, start = args
    k0, k1 = day * PER_DAY, (day + 1) * PER_DAY
    # the hour before the day, for its first hourly bucket, and the grace of a job that ended then
    pre = 0 if day == 0 else HOUR // BUCKET + GRACE_BUCKETS
    lo, hi = start + day * DAY, start + (day + 1) * DAY + (BUCKET + 1 if day == days - 1 else 0)
    stamps = [start + BUCKET * (k + 1) for k in range(k0, k1)]  # a bucket's stamp: its end
    all_stamps = np.array([start + BUCKET * (k + 1) for k in range(k0 - pre, k1)])
    info_ts = [start + BUCKET * k for k in range(k0, k1)]  # a gauge: from the day's start
    count = 0
    with open(path, "w") as out:
        for g in range(gpus):
            host, index, cluster = f"gpu-node-{g // 8 + 1:04d}", g % 8, cluster_of(g, gpus)  # as report_scale
            uuid = f"GPU-{g:08x}-0000-4000-8000-000000000000"
            target = f'cluster="{cluster}",instance="{host}:10044",job="gpuledger"'
            base = f'{target},gpu="{index}",uuid="{uuid}"'
            info = f'gpuledger_gpu_info{{{base},model="NVIDIA H200",hostname="{host}",driver_version="580.159.04"}} '
            out.write(_lines(info, info_ts, [1.0] * len(info_ts)))
            ident = f'gpuledger:gpu_info:last_over_time5m{{instance="{host}:10044",gpu="{index}",uuid="{uuid}",'
            out.write(_lines(f'{ident}hostname="{host}",model="NVIDIA H200"}} ', stamps, [1.0] * len(stamps)))
            inc, sl, running = buckets(g, k0 - pre, k1, slot, start)
            for name in GPU_COUNTERS:
                out.write(_lines(f"gpuledger:gpu_{name}:increase5m{{{base}}} ", stamps, inc[name][pre:].tolist()))
                hts, hvs = hourly(all_stamps, inc[name], lo, hi)
                out.write(_lines(f"gpuledger:gpu_{name}:increase1h{{{base}}} ", hts, hvs))
                count += len(hts)
            count += (2 + len(GPU_COUNTERS)) * len(stamps)
            # each job of the day: its buckets, then two of grace (flat counters: growth 0)
            for s in np.unique(sl).tolist():
                if not running[sl == s].any():
                    continue
                idx = np.flatnonzero(sl == s)
                first, end = int(idx[0]), min(len(all_stamps), int(idx[-1]) + 1 + GRACE_BUCKETS)
                user, account, partition, qos = job_attrs(g // 2 * 2, s)
                job = f"{g // 2}-{s}"
                labels = f'{base},job_id="{job}",user="{user}"'
                meta = f'{target},job_id="{job}",user="{user}",account="{account}",partition="{partition}"'
                mine = max(first, pre)  # this day's buckets of the job
                n = max(0, end - mine)
                if g % 2 == 0 and n:
                    info_at = info_ts[mine - pre : end - pre]
                    out.write(_lines(f'gpuledger_job_info{{{meta},qos="{qos}"}} ', info_at, [1.0] * n))
                    count += n
                for name in JOB_COUNTERS:
                    src = inc["sampled_seconds" if name == "charged_seconds" else name]
                    values = np.zeros(end - first)
                    values[: len(idx)] = src[idx]
                    if n:
                        out.write(
                            _lines(
                                f"gpuledger:job_gpu_{name}:increase5m{{{labels}}} ",
                                stamps[mine - pre : end - pre],
                                values[mine - first :].tolist(),
                            )
                        )
                    hts, hvs = hourly(all_stamps[first:end], values, lo, hi)
                    out.write(_lines(f"gpuledger:job_gpu_{name}:increase1h{{{labels}}} ", hts, hvs))
                    count += n + len(hts)
        count += _scheduler(out, np.array(info_ts), gpus, k0, BUCKET)
        out.write("# EOF\n")
    return count


def backfill(gpus: int, days: int, slot: int, work: Path, start: int = WEEK_START) -> tuple[int, float]:
    """``days`` days of the fleet's rollups from ``start`` into ``work``/data; (samples, seconds)."""
    data = work / "data"
    data.mkdir(exist_ok=True)
    t0 = time.monotonic()
    jobs = [(gpus, d, days, slot, str(work / f"day{d}.om"), start) for d in range(days)]
    samples = 0
    with multiprocessing.Pool(1) as pool:  # one day written while promtool reads the one before
        pending = pool.apply_async(write_day, (jobs[0],))
        for d, job in enumerate(jobs):
            n = pending.get()
            if d + 1 < len(jobs):
                pending = pool.apply_async(write_day, (jobs[d + 1],))
            path = job[4]
            cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", path, str(data)]
            subprocess.run(cmd, check=True, capture_output=True)
            os.unlink(path)
            samples += n
            print(f"  day {d + 1}/{days}: {n / 1e6:.1f} M samples, {time.monotonic() - t0:.0f} s", flush=True)
    return samples, time.monotonic() - t0


def run_size(gpus: int, days: int, slot_hours: int, repeats: int, cache: Path | None) -> dict[str, Any]:
    name = f"{gpus}-gpus-{days}d-{slot_hours}h-{DATA}"
    work = cache / name if cache else Path(tempfile.mkdtemp(prefix="gpuledger-rollup-scale-"))
    meta = work / "backfill.json"
    try:
        if meta.exists():
            m = json.loads(meta.read_text())
            samples, fill_s = m["samples"], m["seconds"]
            print(f"{gpus} GPUs: reusing {work} ({samples / 1e6:.1f} M samples)", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            print(f"{gpus} GPUs: writing {days} days of rollups", flush=True)
            samples, fill_s = backfill(gpus, days, slot_hours * 3600, work)
            meta.write_text(json.dumps({"samples": samples, "seconds": fill_s}))
        tsdb = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
        (work / "prometheus.yml").write_text("global: {}\n")
        prom, url = start_prometheus(work, 19290 + gpus % 1000)
        try:
            for old in work.glob("reports-*"):  # a run before: its kept days
                shutil.rmtree(old)
            kept_in = work / "reports-warmup"
            first = report_once(url, kept_in, None, "--no-day-cache")
            runs = []
            for i in range(repeats):  # the week read at once (no day kept: as before the day cache)
                runs.append(report_once(url, work / f"reports-{i}", None, "--no-day-cache"))
                print(f"  report {i + 1}: {runs[-1][0]:.2f} s, {runs[-1][1]:.0f} MiB", flush=True)
            # the week before, as a daemon that ran then kept it (the report reads it for the
            # week-over-week figures; here it holds only the GPUs' info at its closing instant: no data)
            keep_days(url, kept_in, ("2026-W46",))
            keep_s = keep_days(url, kept_in)  # what the daemon does after a refresh
            print(f"  keeping the {days} days: {keep_s:.2f} s", flush=True)
            warm = []
            for i in range(repeats):  # every day from its file
                warm.append(report_once(url, kept_in))
                print(f"  report {i + 1}, {days} days kept: {warm[-1][0]:.2f} s, {warm[-1][1]:.0f} MiB", flush=True)
            one_day, keep_one = [], []
            for i in range(repeats):  # the daemon's Monday report: Sunday not settled yet, read from the store
                max((kept_in / ".days").glob("*.json"), key=lambda p: p.name.rsplit("-", 1)[1]).unlink()
                one_day.append(report_once(url, kept_in))
                print(f"  report {i + 1}, {days - 1} days kept: {one_day[-1][0]:.2f} s", flush=True)
                keep_one.append(keep_days(url, kept_in))
            n_queries, _ = queries(url)
        finally:
            prom.terminate()
            prom.wait(timeout=60)
        if any(code != 0 for _, _, code in [first, *runs, *warm, *one_day]):
            raise RuntimeError(f"report failed: {first} {runs} {warm} {one_day}")
        kept = len(list((work / "reports-warmup" / ".days").glob("*.json")))
        if kept != 2 * days:  # the week's and the week before's
            raise RuntimeError(f"{kept} days kept, not {2 * days}")
        same_as_cold(work / "reports-0", work / "reports-warmup")
        if not read_rollups(work / "reports-0"):
            raise RuntimeError("the report did not read the rollups")
        report = json.loads(next((work / "reports-0").glob("*.json")).read_text())
        if report["incomplete_reasons"]:
            raise RuntimeError(f"the report is incomplete: {report['incomplete_reasons']}")
        rows = dict(sorted(Counter(r["group"] for r in report["rows"]).items()))
        hourly = any("hourly rollups" in a for a in report["approximations"])
        times = sorted(s for s, _, _ in runs)
        return {
            "gpus": gpus,
            "days": days,
            "slot_hours": slot_hours,
            "jobs": rows.get("job", 0),
            "samples_millions": samples / 1e6,
            "backfill_seconds": fill_s,
            "tsdb_mib": tsdb / 2**20,
            "report_seconds_first": first[0],
            "report_seconds_median": times[len(times) // 2],
            "report_seconds_min": times[0],
            "report_seconds_max": times[-1],
            "report_seconds": [s for s, _, _ in runs],
            "peak_rss_mib": max(r for _, r, _ in [first, *runs]),
            "keep_days_seconds": keep_s,
            "keep_one_day_seconds": sorted(keep_one)[len(keep_one) // 2],
            "kept_report_seconds": [x for x, _, _ in warm],
            "kept_report_seconds_median": sorted(x for x, _, _ in warm)[len(warm) // 2],
            "kept_peak_rss_mib": max(r for _, r, _ in warm),
            "six_kept_report_seconds": [x for x, _, _ in one_day],
            "six_kept_report_seconds_median": sorted(x for x, _, _ in one_day)[len(one_day) // 2],
            "six_kept_peak_rss_mib": max(r for _, r, _ in one_day),
            "queries": n_queries,
            "hourly": hourly,
            "rows_by_group": rows,
        }
    finally:
        if cache is None:
            shutil.rmtree(work, ignore_errors=True)


def keep_days(url: str, reports: Path, weeks: tuple[str, ...] = ("2026-W47",)) -> float:
    """Keep the days of ``weeks`` as the analytics daemon does after a refresh (``DayCached.keep_days``
    with the settings ``gpuledger report`` makes of its flags), in this process; its seconds."""
    from analytics.config import FullSettings
    from analytics.daycache import DayCached
    from analytics.pipeline import make_source
    from domain.week import iso_week

    s = FullSettings(analytics={"source": "prometheus", "reports_dir": str(reports)}, prometheus={"url": url})
    source = make_source(s)
    assert isinstance(source, DayCached)
    t0 = time.monotonic()
    try:
        for week in weeks:
            source.keep_days(iso_week(week))
    finally:
        source.close()
    return time.monotonic() - t0


def same_as_cold(cold: Path, kept: Path) -> None:
    """The report from the kept days has the cold report's rows and figures (to 1e-9)."""
    a, b = (json.loads(next(d.glob("*.json")).read_text()) for d in (cold, kept))
    rows_a = {(r["group"], r["key"]): r for r in [*a["rows"], {**a["fleet"], "group": "fleet", "key": ""}]}
    rows_b = {(r["group"], r["key"]): r for r in [*b["rows"], {**b["fleet"], "group": "fleet", "key": ""}]}
    if rows_a.keys() != rows_b.keys():
        raise RuntimeError(f"kept days: {len(rows_b)} rows, cold: {len(rows_a)}")
    for key, ra in rows_a.items():
        for f in ("total_cost", "busy_gpu_hours", "sampled_gpu_hours", "energy_kwh"):
            x, y = ra.get(f), rows_b[key].get(f)
            if (x is None) != (y is None) or (x is not None and abs(x - y) > 1e-9 * max(1.0, abs(x))):
                raise RuntimeError(f"kept days: {key} {f} {y} != {x}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1024,10000", help="fleet sizes, comma-separated")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--slot-hours", type=int, default=7, help="each GPU pair runs one job per slot")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", type=Path, help="keep the TSDBs here and reuse them next time")
    a = ap.parse_args()
    require_prometheus()
    rows = [run_size(int(n), a.days, a.slot_hours, a.repeats, a.cache) for n in a.gpus.split(",")]
    head = ["GPUs", "job rows", "samples (M)", "backfill s", "TSDB MiB", "1st s", "median s", "min s", "max s"]
    print(
        table(
            [
                *head,
                "peak RSS MiB",
                "queries",
                "keep 7 days s",
                "7 kept: median s",
                "7 kept: RSS MiB",
                "6 kept: median s",
            ],
            [
                [
                    r["gpus"],
                    r["jobs"],
                    *(r[k] for k in ("samples_millions", "backfill_seconds", "tsdb_mib", "report_seconds_first")),
                    *(r[k] for k in ("report_seconds_median", "report_seconds_min", "report_seconds_max")),
                    r["peak_rss_mib"],
                    r["queries"],
                    r["keep_days_seconds"],
                    r["kept_report_seconds_median"],
                    r["kept_peak_rss_mib"],
                    r["six_kept_report_seconds_median"],
                ]
                for r in rows
            ],
        )
    )
    target = {"gpus": 10000, "seconds": 10, "rss_mib": 1024, "gpus_1024_seconds": 9.13 / 3}
    print(f"wrote {write_result('rollup_scale', {'rows': rows, 'data': DATA, 'target': target})}")


if __name__ == "__main__":
    main()
