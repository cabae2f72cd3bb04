"""Aliasing: mean utilisation of the H200 capture as a gauge scraped every 15 s or 60 s sees it,
against gpuledger's counters scraped at the same moments.

Truth: the mean of the capture's sub-second samples buffer (each sample is one sampling period).
The replay runs on a simulated clock, sampled at 1 s. A scrape at time t sees the gauge
``gpuledger_gpu_utilization_ratio`` (NVML's utilizationRates, as nvidia-smi shows) and the two
counters; the counter estimate over a span of scrapes is increase(busy) / increase(sampled).
Every phase of the scrape schedule (0.1 s steps) is tried, over one pass of the 77 s capture and
over an hour of the capture looping.

    python bench/aliasing.py
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import table, write_result
from exporter.readers.capture import bundled_path, load
from exporter.readers.replay import ReplayReader
from exporter.sampling import slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions

STEP = 0.1  # resolution of the simulated clock and of the phases tried


def simulate(seconds: float) -> tuple[list[float], list[float], list[float]]:
    """Per 0.1 s step: gauge, busy counter, sampled counter (the sampler ticks every 1 s)."""
    clock = [0.0]
    reader = ReplayReader(bundled_path(), clock=lambda: clock[0])
    s = Sampler(reader, SamplerOptions(interval=1.0, cadence=slowlane.Cadence(energy=-1, health=-1, pcie=0)))
    s.tick()
    gauge, busy, sampled = [], [], []
    n = round(seconds / STEP)
    for k in range(n + 1):
        clock[0] = k * STEP
        if k % 10 == 0 and k:
            s.tick()
        g = s.snapshot.gpus[0]
        gauge.append(reader.utilization(0).gpu)
        busy.append(g.counters.busy_seconds)
        sampled.append(g.counters.sampled_seconds)
    return gauge, busy, sampled


def window_truth(offsets: list[float], values: list[float], duration: float, a: float, b: float) -> float:
    """Mean of the capture's samples at positions (a, b], the capture looping."""
    picked = []
    k = math.floor(a / duration)
    while k * duration < b:
        picked += [v for o, v in zip(offsets, values, strict=True) if a < k * duration + o <= b]
        k += 1
    return statistics.mean(picked)


def spread(
    period: float,
    seconds: float,
    gauge: list[float],
    busy: list[float],
    sampled: list[float],
    truth: float,
    samples: tuple[list[float], list[float], float],
) -> dict[str, float]:
    """Errors (percentage points) over every phase of a scrape schedule with this period. The
    gauge's average over the horizon is held against the horizon's truth; the counters'
    increase between the first and last scrape against the truth of exactly that span."""
    per = round(period / STEP)
    g_means, c_err = [], []
    for phase in range(per):
        idx = list(range(phase, round(seconds / STEP) + 1, per))
        g_means.append(statistics.mean(gauge[i] for i in idx))
        if len(idx) >= 2:
            a, b = idx[0], idx[-1]
            est = (busy[b] - busy[a]) / (sampled[b] - sampled[a])
            # the sampler ticks on whole seconds: the span its counters cover at scrape i
            span_truth = window_truth(*samples, math.floor(a * STEP), math.floor(b * STEP))
            c_err.append(100 * (est - span_truth))
    g_err = [100 * (m - truth) for m in g_means]
    return {
        "gauge_min_pct": 100 * min(g_means),
        "gauge_max_pct": 100 * max(g_means),
        "gauge_worst_abs_error_pp": max(abs(e) for e in g_err),
        "gauge_mean_abs_error_pp": statistics.mean(abs(e) for e in g_err),
        "counters_worst_abs_error_pp": max(abs(e) for e in c_err) if c_err else float("nan"),
        "counters_mean_abs_error_pp": statistics.mean(abs(e) for e in c_err) if c_err else float("nan"),
    }


def main() -> None:
    cap = load(bundled_path())
    truth = statistics.mean(v for _, v in cap.samples)
    samples = (list(cap.sample_offsets), [v for _, v in cap.samples], cap.duration)
    gauge_readme = statistics.mean(r.util_gpu for r in cap.records)
    results: dict[str, object] = {
        "truth_samples_mean_pct": 100 * truth,
        "gauge_mean_of_78_readings_pct": 100 * gauge_readme,
    }
    rows = []
    for horizon, label in ((cap.duration, "one pass (77 s)"), (3600.0, "1 h, capture looping")):
        gauge, busy, sampled = simulate(horizon)
        whole = 100 * busy[-1] / sampled[-1]
        results[f"counters_whole_{int(horizon)}s_pct"] = whole
        for period in (15.0, 60.0):
            r = spread(period, horizon, gauge, busy, sampled, truth, samples)
            results[f"{int(horizon)}s_every_{int(period)}s"] = r
            rows.append(
                [
                    label,
                    f"{period:.0f} s",
                    f"{r['gauge_min_pct']:.1f}-{r['gauge_max_pct']:.1f}",
                    r["gauge_worst_abs_error_pp"],
                    r["gauge_mean_abs_error_pp"],
                    r["counters_worst_abs_error_pp"],
                ]
            )
    print(
        f"truth (sub-second samples): {100 * truth:.2f} %   "
        f"(gauge mean of the 78 readings: {100 * gauge_readme:.2f} %)\n"
    )
    print(
        table(
            [
                "horizon",
                "scrape every",
                "gauge mean, %",
                "gauge worst |err| pp",
                "gauge mean |err| pp",
                "counters worst |err| pp",
            ],
            rows,
        )
    )
    print(f"wrote {write_result('aliasing', results)}")


if __name__ == "__main__":
    main()
