"""Weekly report time and peak memory against a real Prometheus holding N GPUs x 7 days at 15 s.

For each fleet size the week is written as OpenMetrics text (one file per day, written while
promtool reads the day before), backfilled with ``promtool tsdb create-blocks-from openmetrics``,
served by a real Prometheus, and reported by ``gpuledger report --source prometheus`` in a child
process, three times (the first right after Prometheus started). Wall time and the child's peak
RSS (wait4) are recorded; so are the queries the source sends.

Series per GPU, as gpuledger's exporter exposes them: gpuledger_gpu_info and six counters, plus
three per-job counters for the job on it (4-hour slots, 80 % of them taken, 10 minutes of grace
after each) and the job's ``gpuledger_job_info{job_id, user, account, partition, qos} 1`` (40 users
in 10 accounts, 2 partitions by host, 3 QOS); per cluster and partition (2 x 2): the queue-wait
histogram, pending GPUs, finished and requeued jobs. Every series carries ``cluster`` (the first
half of the GPUs cluster-a, the rest cluster-b), as external or target labels set it when one
Prometheus-compatible store holds several clusters. A day-long diurnal load; a twentieth of the
GPUs held idle.

    python bench/report_scale.py [--gpus 64,256,1024] [--days 7] [--step 15] [--cache DIR]
        [--repeats 3] [--group-by user --group-by user,account,partition,cluster --group-by default]

Each ``--group-by`` is one configuration of ``[analytics] group_by`` (comma-separated; ``default``:
no config file, the settings' default); several are timed in the same run, alternating (ABC CBA
ABC ...) so the machine's load falls on each alike, after one untimed warm-up report.

Backfilling took about 1.5, 4.5 and 17 minutes on 2 cores before job_info and clusters; 1,024 GPUs
now: 431 M samples, 29 minutes on a loaded machine, promtool holding about 11.5 GB while it reads a
day. ``--cache`` keeps the TSDBs for the next run.

Target (docs/performance.md): 1,024 GPUs in <= 10 s and <= 1 GB.
"""

from __future__ import annotations

import argparse
import json
import math
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

DAY = 86400
SLOT = 4 * 3600  # one job per GPU per 4-hour slot
GRACE = 600
BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 604800)
WEEK_START = 1794787200  # Monday 2026-11-16 00:00 UTC (2026-W47)
DATA = "jobinfo-2clusters"  # in the cache folder's name: change it whenever the data changes
CLUSTERS = ("cluster-a", "cluster-b")
PLAIN_ROWS = ("host", "model", "gpu", "job")  # the report's rows whatever group_by says
QOS = ("normal", "normal", "normal", "high", "low")


def cluster_of(g: int, gpus: int) -> str:
    """GPU g's cluster: the first half of the fleet (whole hosts) is the first cluster."""
    return CLUSTERS[0] if g < gpus // 2 else CLUSTERS[1]


def job_attrs(g: int, sl: int) -> tuple[str, str, str, str]:
    """(user, account, partition, qos) of GPU g's job in slot sl: each user in one account; a
    fifth of the hosts in the gpu-large partition."""
    user = (g + sl) % 40
    return f"user{user}", f"account{user % 10}", "gpu-large" if (g // 8) % 5 == 0 else "gpu", QOS[(g + 3 * sl) % 5]


def _rand(g: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, g]).random(n)


def _increments(g: int, n: int, step: int, gpus: int, start: int = WEEK_START) -> dict[str, np.ndarray]:
    """Per-step increments of GPU g's six counters for the first n steps from ``start``."""
    t = start + step * np.arange(n)
    slot = ((t - start) // SLOT).astype(np.int64)
    slots = int(slot[-1]) + 1 if n else 0
    taken = _rand(g, slots, 1) < 0.8
    running = taken[slot]
    holder = g % 20 == 0  # holds its GPU and idles
    phase = (g % 97) / 97 * 0.2
    load = 0.5 + 0.4 * np.sin(2 * np.pi * ((t % DAY) / DAY - 0.25 + phase)) + 0.1 * (_rand(g, n, 2) - 0.5)
    util = np.where(running, 0.0 if holder else np.clip(load, 0.0, 1.0), 0.0)
    s = float(step)
    return {
        "sampled_seconds": np.full(n, s),
        "busy_seconds": util * s,
        "sm_active_seconds": util * 0.8 * s,
        "allocated_seconds": np.where(running, s, 0.0),
        "allocated_idle_seconds": np.where(running & (util < 0.05), s, 0.0),
        "energy_joules": (75.5 + 620.0 * util) * s,
    }


def _lines(prefix: str, ts: np.ndarray, values: np.ndarray) -> str:
    return "".join(f"{prefix}{v:.10g} {t}\n" for v, t in zip(values.tolist(), ts.tolist(), strict=True))


def write_day(args: tuple[int, int, int, str, int]) -> int:
    """Day ``day`` (counted from ``start``) of the fleet into ``path``; returns the samples written."""
    gpus, day, step, path, start = args
    per_day = DAY // step
    return write_steps(gpus, day * per_day, (day + 1) * per_day, step, path, start)


def write_steps(gpus: int, k0: int, k1: int, step: int, path: str, start: int = WEEK_START) -> int:
    """Steps ``k0`` to ``k1`` (exclusive, counted from ``start``) of the fleet into ``path`` as
    OpenMetrics without the final ``# EOF``; returns the samples written."""
    ts = start + step * np.arange(k0, k1)
    count = 0
    with open(path, "w") as out:
        for g in range(gpus):
            host, index, cluster = f"gpu-node-{g // 8 + 1:04d}", g % 8, cluster_of(g, gpus)
            uuid = f"GPU-{g:08x}-0000-4000-8000-000000000000"
            target = f'cluster="{cluster}",instance="{host}:10044",job="gpuledger"'
            base = f'{target},gpu="{index}",uuid="{uuid}"'
            info = f'gpuledger_gpu_info{{{base},model="NVIDIA H200",hostname="{host}",driver_version="580.159.04"}} '
            out.write(_lines(info, ts, np.ones(len(ts))))
            inc = _increments(g, k1, step, gpus, start)
            cum = {name: np.cumsum(v) for name, v in inc.items()}
            for name, c in cum.items():
                out.write(_lines(f"gpuledger_gpu_{name}_total{{{base}}} ", ts, c[k0:k1]))
            count += 7 * len(ts)
            taken = _rand(g, math.ceil((k1 * step) / SLOT) + 1, 1) < 0.8
            first_slot, last_slot = max(0, (k0 * step - GRACE) // SLOT), (k1 * step) // SLOT
            for sl in range(first_slot, last_slot + 1):
                if sl >= len(taken) or not taken[sl]:
                    continue
                a, b = sl * SLOT // step, min(k1, (sl * SLOT + SLOT) // step)  # the job's steps
                lo, hi = max(k0, a), min(k1, (sl * SLOT + SLOT + GRACE) // step)
                if lo >= hi or a >= len(cum["sampled_seconds"]):
                    continue
                user, account, partition, qos = job_attrs(g, sl)
                labels = f'{base},job_id="{g}-{sl}",user="{user}"'
                info = f'{target},job_id="{g}-{sl}",user="{user}",account="{account}",partition="{partition}"'
                out.write(_lines(f'gpuledger_job_info{{{info},qos="{qos}"}} ', ts[lo - k0 : hi - k0], np.ones(hi - lo)))
                count += hi - lo
                idx = np.minimum(np.arange(lo, hi), b - 1)
                for name in ("sampled_seconds", "busy_seconds", "energy_joules"):
                    c = cum[name]
                    before = c[a - 1] if a else 0.0
                    out.write(
                        _lines(f"gpuledger_job_gpu_{name}_total{{{labels}}} ", ts[lo - k0 : hi - k0], c[idx] - before)
                    )
                    count += hi - lo
        count += _scheduler(out, ts, gpus, k0, step)
    return count


def _scheduler(out: object, ts: np.ndarray, gpus: int, k0: int, step: int) -> int:
    """Per-cluster and partition queue and job-outcome series: counters growing with the fleet."""
    assert hasattr(out, "write")
    count = 0
    steps = np.arange(k0, k0 + len(ts))
    for cluster, p, share in (
        (c, p, s / len(CLUSTERS)) for c in CLUSTERS for p, s in (("gpu", 0.8), ("gpu-large", 0.2))
    ):
        started = np.floor(steps * step / SLOT * gpus * 0.8 * share)  # jobs started so far
        base = f'cluster="{cluster}",instance="slurm-{cluster}:10044",job="gpuledger",partition="{p}"'
        for le in (*BUCKETS, math.inf):
            frac = min(1.0, math.log1p(le) / math.log1p(3600)) if math.isfinite(le) else 1.0
            lab = "+Inf" if not math.isfinite(le) else f"{le:g}"
            out.write(
                _lines(f'gpuledger_queue_wait_seconds_bucket{{{base},le="{lab}"}} ', ts, np.floor(started * frac))
            )
        out.write(_lines(f"gpuledger_queue_wait_seconds_count{{{base}}} ", ts, started))
        out.write(_lines(f"gpuledger_queue_wait_seconds_sum{{{base}}} ", ts, started * 240.0))
        out.write(_lines(f"gpuledger_queue_pending_gpus{{{base}}} ", ts, (steps % 40).astype(float)))
        out.write(_lines(f"gpuledger_jobs_requeued_total{{{base}}} ", ts, np.floor(started * 0.03)))
        for state, r in (("COMPLETED", 0.88), ("FAILED", 0.09), ("TIMEOUT", 0.03)):
            lab = f'{base},state="{state}"'
            out.write(_lines(f"gpuledger_jobs_finished_total{{{lab}}} ", ts, np.floor(started * r)))
            out.write(_lines(f"gpuledger_jobs_gpu_seconds_total{{{lab}}} ", ts, np.floor(started * r) * SLOT))
        count += (len(BUCKETS) + 11) * len(ts)
    return count


def backfill(gpus: int, days: int, step: int, work: Path, start: int = WEEK_START) -> tuple[int, float]:
    data = work / "data"
    data.mkdir()
    t0 = time.monotonic()
    jobs = [(gpus, d, step, str(work / f"day{d}.om"), start) for d in range(days)]
    samples = 0
    # one day is written while promtool reads the one before: two files on disk at most
    # (1,024 GPUs write about 10 GB of text a day)
    with multiprocessing.Pool(1) as pool:
        pending = pool.apply_async(write_day, (jobs[0],))
        for d, job in enumerate(jobs):
            n = pending.get()
            if d + 1 < len(jobs):
                pending = pool.apply_async(write_day, (jobs[d + 1],))
            path = job[3]
            with open(path, "a") as f:
                f.write("# EOF\n")
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", path, str(data)],
                check=True,
                capture_output=True,
            )
            os.unlink(path)
            samples += n
            print(f"  day {d + 1}/{days}: {n / 1e6:.1f} M samples, {time.monotonic() - t0:.0f} s", flush=True)
    return samples, time.monotonic() - t0


def schedule(configs: int, repeats: int) -> list[int]:
    """The order the configurations run in: ABC CBA ABC ..., each ``repeats`` times."""
    return [c for r in range(repeats) for c in (range(configs) if r % 2 == 0 else reversed(range(configs)))]


def parse_group_by(spec: str) -> list[str] | None:
    """One ``--group-by``: the groupings, comma-separated; ``default``: None (no config file)."""
    return None if spec.strip() == "default" else [g.strip() for g in spec.split(",") if g.strip()]


def write_config(work: Path, i: int, group_by: list[str] | None) -> Path | None:
    if group_by is None:
        return None
    path = work / f"config-{i}.toml"
    path.write_text("[analytics]\ngroup_by = [" + ", ".join(json.dumps(g) for g in group_by) + "]\n")
    return path


def report_once(url: str, out: Path, config: Path | None = None, *flags: str) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of one ``gpuledger report`` child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    argv = [sys.executable, "-m", "gpuledger", "report", "--source", "prometheus", "--prometheus-url", url]
    argv += ["--week", "2026-W47", "--out", str(out), *(["--config", str(config)] if config else []), *flags]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.monotonic() - t0
    if status and p.stderr:
        print(p.stderr.read().decode()[-2000:], file=sys.stderr)
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def queries(url: str, group_by: list[str] | None = None) -> tuple[int, dict[str, int]]:
    """PromQL queries one report sends (the week, and the previous week for the comparison), and
    the report's rows by group (host, gpu, job, user, account, ...)."""
    from analytics.config import FullSettings
    from analytics.pipeline import make_report
    from analytics.sources.prometheus import PrometheusSource
    from domain.week import iso_week

    analytics: dict[str, object] = {"source": "prometheus", **({"group_by": group_by} if group_by else {})}
    s = FullSettings(analytics=analytics, prometheus={"url": url})
    src = PrometheusSource(s.prometheus)
    report = make_report(src, iso_week("2026-W47"), s)
    return src.api.queries, dict(sorted(Counter(r.group for r in report.rows).items()))


def run_size(
    gpus: int, days: int, step: int, repeats: int, cache: Path | None, configs: list[list[str] | None]
) -> list[dict[str, Any]]:
    """One row per configuration. ``cache``: keep the backfilled TSDB there (with what the
    backfill measured) and reuse it on the next run; without one, a temporary folder that is
    deleted afterwards."""
    name = f"{gpus}-gpus-{days}d-{step}s-{DATA}"
    work = cache / name if cache else Path(tempfile.mkdtemp(prefix="gpuledger-scale-"))
    meta = work / "backfill.json"
    try:
        if meta.exists():
            samples, fill_s = json.loads(meta.read_text())["samples"], json.loads(meta.read_text())["seconds"]
            print(f"{gpus} GPUs: reusing {work} ({samples / 1e6:.1f} M samples)", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            print(f"{gpus} GPUs: backfilling {days} days at {step} s", flush=True)
            samples, fill_s = backfill(gpus, days, step, work)
            meta.write_text(json.dumps({"samples": samples, "seconds": fill_s}))
        tsdb = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
        (work / "prometheus.yml").write_text("global: {}\n")
        files = [write_config(work, i, c) for i, c in enumerate(configs)]
        prom, url = start_prometheus(work, 19090 + gpus % 1000)
        try:
            first = report_once(url, work / "reports-warmup", files[0], "--no-day-cache")
            runs: list[list[tuple[float, float, int]]] = [[] for _ in configs]
            for i in schedule(len(configs), repeats):
                runs[i].append(report_once(url, work / f"reports-{i}", files[i], "--no-day-cache"))
                print(f"  {' '.join(configs[i] or ['default'])}: {runs[i][-1][0]:.2f} s", flush=True)
            counted = [queries(url, c) for c in configs]
        finally:
            prom.terminate()
            prom.wait(timeout=30)
        if any(code != 0 for r in [first, *(x for rs in runs for x in rs)] for code in r[2:]):
            raise RuntimeError(f"report failed: {first} {runs}")
        out = []
        for c, rs, (n_queries, n_rows) in zip(configs, runs, counted, strict=True):
            times = sorted(s for s, _, _ in rs)
            out.append(
                {
                    "gpus": gpus,
                    "group_by": c if c is not None else "default",
                    "samples_millions": samples / 1e6,
                    "backfill_seconds": fill_s,
                    "tsdb_mib": tsdb / 2**20,
                    "report_seconds_first": first[0],
                    "report_seconds_median": times[len(times) // 2],
                    "report_seconds_min": times[0],
                    "report_seconds_max": times[-1],
                    "report_seconds": [s for s, _, _ in rs],
                    "peak_rss_mib": max(r for _, r, _ in rs),
                    "queries": n_queries,
                    "rows_by_group": n_rows,
                }
            )
        return out
    finally:
        if cache is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="64,256,1024", help="fleet sizes, comma-separated")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=15, help="scrape interval of the backfilled series (s)")
    ap.add_argument("--repeats", type=int, default=3, help="timed reports per configuration")
    ap.add_argument("--cache", type=Path, help="keep the backfilled TSDBs here and reuse them next time")
    ap.add_argument(
        "--group-by",
        action="append",
        metavar="LIST",
        help="[analytics] group_by of one configuration, comma-separated, or default (repeatable; default: default)",
    )
    ap.add_argument("--name", default="report_scale", help="results file: bench/results/NAME.json")
    a = ap.parse_args()
    configs = [parse_group_by(g) for g in a.group_by or ["default"]]
    require_prometheus()
    rows = [r for n in a.gpus.split(",") for r in run_size(int(n), a.days, a.step, a.repeats, a.cache, configs)]
    base = {r["gpus"]: r["report_seconds_median"] for r in rows if r["group_by"] == rows[0]["group_by"]}
    head = ["GPUs", "group_by", "samples (M)", "backfill s", "TSDB MiB", "1st s", "median s", "min s", "max s"]
    print(
        table(
            [*head, "vs first", "peak RSS MiB", "queries", "group rows"],
            [
                [
                    r["gpus"],
                    ",".join(r["group_by"]) if isinstance(r["group_by"], list) else r["group_by"],
                    *(r[k] for k in ("samples_millions", "backfill_seconds", "tsdb_mib", "report_seconds_first")),
                    *(r[k] for k in ("report_seconds_median", "report_seconds_min", "report_seconds_max")),
                    r["report_seconds_median"] / base[r["gpus"]],
                    r["peak_rss_mib"],
                    r["queries"],
                    sum(n for g, n in r["rows_by_group"].items() if g not in PLAIN_ROWS),
                ]
                for r in rows
            ],
        )
    )
    path = write_result(
        a.name,
        {
            "days": a.days,
            "step_seconds": a.step,
            "repeats": a.repeats,
            "data": DATA,
            "rows": rows,
            "target": {"gpus": 1024, "seconds": 10, "rss_mib": 1024},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
