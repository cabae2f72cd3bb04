"""Rule evaluation cost: how long a real Prometheus takes to evaluate gpuledger's recording and
alert rules (deploy/prometheus/rules) for N GPUs with 7 days of history at 15 s.

For each fleet size the fleet of bench/report_scale.py (the same series: gpuledger_gpu_info, six
counters, per-job counters, queue histograms) is backfilled for the 7 days up to the start of the
run and then again up to a few seconds ago, with the analytics daemon's price gauges for every host,
so every window of every rule is full when Prometheus evaluates them at "now". Prometheus then runs
with the rule files, no scrape targets and a 15-minute lookback (the newest samples age while it
runs); after a warm-up evaluation, each group's ``evaluationTime`` is read from /api/v1/rules after
every new evaluation, ``--rounds`` times. Not in the data: gpuledger_gpu_job_info (so
GPUAllocatedButIdle joins nothing) and the benchmark gauges. Reported per group: the median and the largest
evaluation time against its interval, and the heaviest rule; and Prometheus' peak RSS.

    python bench/rules_scale.py [--gpus 64,256,1024] [--rounds 3] [--keep DIR] [--raw-hours H]

``--raw-hours H`` (for fleets whose raw week will not fit: 10,000 GPUs): the raw series for the last
H hours only, and the 7 days before them as the rollup rules' series (bench/rollup_scale.py's
5-minute and hourly buckets, with the GPUs' info and the identity rule's 5-minute record of it
every 5 minutes). The groups that read raw samples over an hour or less (the rollups, the 1-hour
group, the alerts) then see what they would see live; the 1-day, 7-day and identity groups read
the 5-minute buckets and records, of which the last H hours are missing (the running Prometheus
writes those itself from its start): their times are a little under what they would be live.

Backfilling takes about 1.5, 4.5 and 17 minutes on 2 cores (bench/report_scale.py); the TSDB is
only useful while its newest samples are fresh, so it is not reused (--keep keeps it to inspect).

What to look for (docs/performance.md): every group's evaluation well inside its interval (1 or 2
minutes), else Prometheus skips evaluations (prometheus_rule_group_iterations_missed_total).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import rollup_scale
from bench.common import require_prometheus, start_prometheus, table, write_result
from bench.report_scale import DAY, backfill, write_steps

REPO = Path(__file__).resolve().parents[1]
RULES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
STEP = 15
CHECKS = ("gpuledger:gpu_utilization:ratio_rate7d", "gpuledger:gpu_idle_cost:per_hour_rate1h")
LOOKBACK = "15m"  # the newest samples are as old as the run: instant selectors must still see them
PRICE_STEP = 60


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def write_prices(gpus: int, start: int, end: int, path: Path) -> None:
    """The analytics daemon's price gauges (job gpuledger-analytics) for the fleet's hosts."""
    hosts = sorted({f"gpu-node-{g // 8 + 1:04d}" for g in range(gpus)})
    ts = range(start, end + 1, PRICE_STEP)
    base = 'instance="analytics:10045",job="gpuledger-analytics"'
    with path.open("w") as out:
        for host in hosts:
            lab = f'{base},host="{host}",model="NVIDIA H200",kind="owned",currency="EUR"'
            out.writelines(f"gpuledger_price_gpu_hour{{{lab}}} 0.7112 {t}\n" for t in ts)
        out.writelines(f"gpuledger_price_pue{{{base}}} 1.3 {t}\n" for t in ts)
        out.writelines(f'gpuledger_price_energy_kwh{{{base},currency="EUR"}} 0.2 {t}\n' for t in ts)
        out.write("# EOF\n")


def _scalar(url: str, query: str) -> float:
    result = _get(url + "/api/v1/query?" + urllib.parse.urlencode({"query": query}))["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


SLOW = 300  # groups at this interval or longer: their first evaluation counts, and one is enough
QUERIED = 3600  # groups at this interval or longer: their rules timed as instant queries, not waited for


def query_times(url: str, group: dict[str, Any]) -> tuple[float, str, float]:
    """A group's rules run one after the other as instant queries (wall time each, as an evaluation
    would run them): the total, the heaviest rule and its time."""
    times = []
    for r in group["rules"]:
        t0 = time.monotonic()
        _get(url + "/api/v1/query?" + urllib.parse.urlencode({"query": r["query"]}))
        times.append((time.monotonic() - t0, r["name"]))
    top = max(times)
    return sum(t for t, _ in times), top[1], top[0]


def measure(url: str, rounds: int) -> dict[str, dict[str, Any]]:
    """Per group: interval, evaluation times of ``rounds`` evaluations after the first, heaviest rule.
    A group of 5 minutes or more: its first ``min(rounds, 1)`` evaluation(s), the first one counted;
    an hourly one: its rules timed as queries (``query_times``), since its evaluations are an hour
    apart."""
    seen: dict[str, str] = {}
    times: dict[str, list[float]] = {}
    heaviest: dict[str, tuple[float, str]] = {}
    interval: dict[str, float] = {}
    deadline = time.monotonic() + (rounds + 2) * 150
    while time.monotonic() < deadline:
        groups = _get(url + "/api/v1/rules")["data"]["groups"]
        for g in groups:
            name, last = g["name"], g.get("lastEvaluation", "")
            interval[name] = g["interval"]
            if not last or last.startswith("0001") or seen.get(name) == last:
                continue
            first = name not in seen
            seen[name] = last
            if first and g["interval"] < SLOW:  # the first evaluation fills the recorded series the others read
                continue
            times.setdefault(name, []).append(g["evaluationTime"])
            top = max(g["rules"], key=lambda r: r.get("evaluationTime", 0.0))
            if top.get("evaluationTime", 0.0) > heaviest.get(name, (0.0, ""))[0]:
                heaviest[name] = (top["evaluationTime"], top["name"])
            errors = [r["name"] for r in g["rules"] if r.get("health") == "err"]
            if errors:
                raise RuntimeError(f"{name}: rules failed: {errors}")
        waited = [n for n in interval if interval[n] < QUERIED]
        if waited and all(len(times.get(n, [])) >= (rounds if interval[n] < SLOW else 1) for n in waited):
            break
        time.sleep(2)
    for g in _get(url + "/api/v1/rules")["data"]["groups"]:
        if g["interval"] >= QUERIED:
            total, rule, rule_s = query_times(url, g)
            times[g["name"]] = [total]
            heaviest[g["name"]] = (rule_s, rule)
    missing = [n for n in interval if len(times.get(n, [])) < (rounds if interval[n] < SLOW else 1)]
    if missing:
        raise RuntimeError(f"groups without {rounds} evaluations: {missing}")
    return {
        n: {
            "interval_s": interval[n],
            "seconds": sorted(times[n]),
            "heaviest_rule": heaviest[n][1],
            "heaviest_rule_s": heaviest[n][0],
        }
        for n in interval
    }


def _load(om: Path, work: Path) -> None:
    cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(work / "data")]
    subprocess.run(cmd, check=True, capture_output=True)
    om.unlink()


def _raw_until_now(gpus: int, start: int, k0: int, work: Path) -> int:
    """The raw steps from step ``k0`` (counted from ``start``) up to a few seconds ago, an hour of
    steps per file (promtool holds a file's samples in memory), until caught up; the samples."""
    samples = 0
    while (now := int(time.time()) - STEP) >= start + k0 * STEP:
        k1 = min(k0 + 3600 // STEP, (now - start) // STEP + 1)
        om = work / "raw.om"
        samples += write_steps(gpus, k0, k1, STEP, str(om), start)
        with om.open("a") as f:
            f.write("# EOF\n")
        _load(om, work)
        until = time.strftime("%H:%M:%S", time.gmtime(start + k1 * STEP))
        print(f"  raw to {until}: {samples / 1e6:.1f} M samples", flush=True)
        k0 = k1
    return samples


def run_size(gpus: int, rounds: int, keep: Path | None, raw_hours: float = 0.0) -> dict[str, Any]:
    work = keep / f"rules-{gpus}" if keep else Path(tempfile.mkdtemp(prefix="gpuledger-rules-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        # 7 days up to now; then, since that takes minutes, the steps from there to now again,
        # so the rules see fresh samples (Prometheus accepts the recorded series only after the
        # newest backfilled sample: the data cannot reach into the future)
        end = int(time.time()) // 300 * 300
        if raw_hours:
            start = end - round(raw_hours * 3600) // 300 * 300
            print(f"{gpus} GPUs: backfilling 7 days of rollups, then {raw_hours:g} h at {STEP} s", flush=True)
            samples, fill_s = rollup_scale.backfill(gpus, 7, 7 * 3600, work, start - 7 * DAY)
            t0 = time.monotonic()
            samples += _raw_until_now(gpus, start, 0, work)
            fill_s += time.monotonic() - t0
        else:
            start = end - 7 * DAY
            print(f"{gpus} GPUs: backfilling 7 days at {STEP} s", flush=True)
            samples, fill_s = backfill(gpus, 7, STEP, work, start)
            samples += _raw_until_now(gpus, start, 7 * DAY // STEP, work)
        now = int(time.time()) - STEP
        prices = work / "prices.om"
        write_prices(gpus, start, now, prices)
        _load(prices, work)
        rule_files = "".join(f"  - {f}\n" for f in RULES)
        (work / "prometheus.yml").write_text(f"global:\n  evaluation_interval: 1m\nrule_files:\n{rule_files}")
        prom, url = start_prometheus(work, 19190 + gpus % 1000, f"--query.lookback-delta={LOOKBACK}")
        try:
            groups = measure(url, rounds)
            rss = peak_rss_mib(prom.pid)
            missed_n = _scalar(url, "sum(prometheus_rule_group_iterations_missed_total)")
            # the rules saw the data: a 7-day share and an idle cost for every GPU
            covered = {q: _scalar(url, f"count({q})") for q in CHECKS}
            if any(n != gpus for n in covered.values()):
                raise RuntimeError(f"the rules did not cover {gpus} GPUs: {covered}")
        finally:
            prom.terminate()
            prom.wait(timeout=60)
        return {
            "gpus": gpus,
            "raw_hours": raw_hours or 7 * 24,
            "samples_millions": samples / 1e6,
            "backfill_seconds": fill_s,
            "groups": groups,
            "prometheus_peak_rss_mib": rss,
            "iterations_missed": missed_n,
            "series_per_check": covered,
        }
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="64,256,1024", help="fleet sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="evaluations measured per group, after a warm-up one")
    ap.add_argument("--keep", type=Path, help="keep each TSDB and Prometheus log in this folder")
    ap.add_argument("--raw-hours", type=float, default=0.0, help="raw samples for the last H hours only (see above)")
    a = ap.parse_args()
    require_prometheus()
    os.environ.pop("GPULEDGER_CONFIG", None)
    sizes = [run_size(int(n), a.rounds, a.keep, a.raw_hours) for n in a.gpus.split(",")]
    rows = []
    for s in sizes:
        for name, g in s["groups"].items():
            secs = g["seconds"]
            share = f"{100 * secs[-1] / g['interval_s']:.1f} %"
            rows.append(
                [
                    s["gpus"],
                    name,
                    g["interval_s"],
                    secs[len(secs) // 2],
                    secs[-1],
                    share,
                    g["heaviest_rule"],
                    g["heaviest_rule_s"],
                ]
            )
    print(
        table(
            [
                "GPUs",
                "group",
                "interval s",
                "eval s (median)",
                "eval s (max)",
                "max / interval",
                "heaviest rule",
                "its s",
            ],
            rows,
        )
    )
    print(
        table(
            ["GPUs", "samples (M)", "backfill s", "Prometheus peak RSS MiB", "iterations missed"],
            [
                [
                    s["gpus"],
                    s["samples_millions"],
                    s["backfill_seconds"],
                    s["prometheus_peak_rss_mib"],
                    s["iterations_missed"],
                ]
                for s in sizes
            ],
        )
    )
    name = f"rules_scale_raw_{a.raw_hours:g}h" if a.raw_hours else "rules_scale"  # not the 7-day raw runs
    path = write_result(name, {"rounds": a.rounds, "rule_files": [f.name for f in RULES], "sizes": sizes})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
