"""MIG at scale: 8 GPUs x 7 MIG instances (all-1g.10gb) with 56 jobs, one per instance, through the
FakeReader, the real sampler (with attribution from a fabricated /proc) and the real scrape site.

Compared in the same run with the same 56 jobs on the same 8 GPUs without MIG (7 processes on each
whole GPU), alternating the two (ABAB...), each ``--repeats`` times:

- ``/metrics`` latency with today's method (``bench/scrape_latency.py``): Prometheus' headers
  (OpenMetrics, gzip), a kept-alive connection, back-to-back and spaced 0.1-0.4 s (a new snapshot
  before most scrapes, as deployed); the ratio MIG / no MIG is taken within each pair.
- The same spaced scrapes from a client in a process of its own (``--client-apart``), as Prometheus
  scrapes: then only the exporter's threads share its interpreter, not the client's too.
- The sampler's fast round: the whole ``Sampler.tick`` (reads, folding, attribution, the snapshot and
  the render-ahead) against its 1 s interval.
- Calls per round: the FakeReader's ``calls`` (one ``mig_instances`` per GPU), and the NVML
  functions the real ``NvmlReader`` calls for the same layout over the fake pynvml
  (``tests/support/fake_pynvml.py``), per fast round and per slow-lane round with every cadence due.

The FakeReader's per-call latencies are the H200's (``H200_LATENCIES``); ``mig_instances`` has none
measured (no MIG hardware here) and is set to what its NVML calls would cost at the H200's figures:
per instance memory (13 us), processes (13 us) and a GPM sample (40 us), 7 x 66 us = 0.46 ms per GPU.

    python bench/mig_scale.py [--repeats 3] [--scrapes 1000] [--spaced-scrapes 120]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import percentile, table, write_result
from bench.scrape_latency import HEADERS, scrape, stats
from daemonkit.http import MetricsServer, WebOptions, serve
from exporter.attribution.attributor import Attribution
from exporter.readers import GpmActivity, Process, Reader
from exporter.readers.fake import H200_LATENCIES, FakeReader
from exporter.readers.nvml import NvmlReader
from exporter.sampling import slowlane
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite
from tests.support.fake_pynvml import CountingNvml, FakeNvml
from tests.support.procfs import make_proc

GPUS, PER_GPU = 8, 7
LAYOUT = ("1g.10gb",) * PER_GPU
MIG_LATENCY = PER_GPU * (13e-6 + 13e-6 + 40e-6)
INTERVAL = 1.0
UID = 1001


class TimedSampler(Sampler):
    """The real sampler; each whole fast round (``tick``, render-ahead included) is timed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[float] = []
        self.reads: list[float] = []  # the round's reads and folding alone (sample_duration_seconds)

    def tick(self) -> None:
        t0 = time.perf_counter()
        super().tick()
        self.rounds.append(time.perf_counter() - t0)
        self.reads.append(self.snapshot.sample_duration_seconds)


def jobs_proc(root: Path) -> Attribution:
    """A /proc with 56 processes, each in a Slurm job of its own (job id = pid), all of user alice."""
    root.mkdir(parents=True, exist_ok=True)
    proc, passwd = root / "proc", root / "passwd"
    passwd.write_text(f"root:x:0:0::/:/bin/sh\nalice:x:{UID}:{UID}::/:/bin/sh\n")
    for pid in pids():
        cgroup = f"0::/system.slice/slurmstepd.scope/job_{pid}/step_0/user/task_0\n"
        make_proc(proc, pid, uid=UID, cgroup=cgroup)
    return Attribution(proc, passwd)


def pids() -> list[int]:
    return [10_000 + k for k in range(GPUS * PER_GPU)]


def fake_reader(mig: bool, latencies: dict[str, float] | None) -> FakeReader:
    """8 fake GPUs with the 56 jobs: one per 1g.10gb instance, or 7 per whole GPU."""
    reader = FakeReader(GPUS, latencies=latencies, mig=dict.fromkeys(range(GPUS), LAYOUT) if mig else None)
    it = iter(pids())
    for i, g in enumerate(reader.gpus):
        if mig:
            for k, inst in enumerate(g.mig or []):
                inst.processes = [Process(next(it), 1 << 30)]
                inst.memory_used_bytes = 1 << 30
                inst.gpm = GpmActivity(sm=0.1 * (k + 1), tensor=0.05 * k, dram=0.2, sm_occupancy=0.3)
        else:
            g.processes = [Process(next(it), 1 << 30) for _ in range(PER_GPU)]
            g.util = 0.1 * i
            g.memory_used_bytes = PER_GPU << 30
    return reader


def serve_one(mig: bool, args: argparse.Namespace, rng: random.Random, root: Path) -> dict[str, Any]:
    latencies = {**H200_LATENCIES, "mig_instances": MIG_LATENCY}
    reader = fake_reader(mig, latencies)
    expo = RenderCache(lambda: sampler.snapshot)
    options = SamplerOptions(interval=INTERVAL, hostname="bench")
    sampler = TimedSampler(reader, options, on_snapshot=expo.prepare, attribution=jobs_proc(root))
    sampler.start()
    srv = MetricsServer(WebOptions(host="127.0.0.1", port=0), ExporterSite(lambda: sampler.snapshot, expo))
    serve(srv)
    time.sleep(2.5)  # a few rounds: every metric has a value, every job is known
    port = srv.server_address[1]
    scrape(port, 50)  # warm-up; marks OpenMetrics+gzip as a variant to render ahead
    snap = sampler.snapshot
    jobs = sum(len(g.jobs) for g in snap.gpus)
    body = expo.render(HEADERS["Accept"], False)[0]
    first = len(sampler.rounds)
    out: dict[str, Any] = {
        "back_to_back": stats(scrape(port, args.scrapes)),
        "spaced": stats(scrape(port, args.spaced_scrapes, between=lambda: time.sleep(rng.uniform(0.1, 0.4)))),
        "spaced_apart": stats(scrape_apart(port, args.spaced_scrapes, rng.randrange(2**31))),
    }
    rounds, reads = sampler.rounds[first:], sampler.reads[first:]
    srv.shutdown()
    sampler.stop()
    out["round"] = {
        "n": len(rounds),
        "p50_ms": percentile(rounds, 50) * 1e3,
        "p99_ms": percentile(rounds, 99) * 1e3,
        "max_ms": max(rounds) * 1e3,
        "interval_ms": INTERVAL * 1e3,
        "reads_p50_ms": percentile(reads, 50) * 1e3,
        "reads_p99_ms": percentile(reads, 99) * 1e3,
    }
    out["jobs"] = jobs
    out["exposition"] = {"lines": body.count(b"\n"), "bytes": len(body)}
    return out


APART = """
import json, random, sys, time
from bench.scrape_latency import scrape
port, n, seed = (int(a) for a in sys.argv[1:])
rng = random.Random(seed)
print(json.dumps(scrape(port, n, between=lambda: time.sleep(rng.uniform(0.1, 0.4)))))
"""


def scrape_apart(port: int, n: int, seed: int) -> list[float]:
    """``n`` spaced scrapes (0.1-0.4 s apart) from a client in its own process, as Prometheus scrapes."""
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-c", APART, str(port), str(n), str(seed)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=root, timeout=60 + n)
    times: list[float] = json.loads(done.stdout)
    return times


def reader_calls(mig: bool, rounds: int = 10) -> dict[str, dict[str, float]]:
    """Calls per fast round and per slow-lane round (every cadence due), FakeReader and NVML."""
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gpuledger-mig-") as tmp:
        attribution = jobs_proc(Path(tmp))
        fake = fake_reader(mig, None)
        nvml = CountingNvml(FakeNvml(GPUS, mig=dict.fromkeys(range(GPUS), LAYOUT) if mig else None))
        readers: list[tuple[str, Reader, Callable[[], Counter[str]]]] = [
            ("fake", fake, lambda: Counter(fake.calls)),
            ("nvml", NvmlReader(nvml), lambda: Counter(nvml.calls)),
        ]
        for name, reader, counts in readers:
            s = Sampler(reader, SamplerOptions(cadence=slowlane.Cadence(0.0, 0.0, 0.0)), attribution=attribution)
            for _ in range(3):  # open, baselines, GPM's first samples
                s.tick()
                s.slow_tick()
                if isinstance(reader, FakeReader):
                    reader.advance(1.0)
            before = counts()
            for _ in range(rounds):
                s.tick()
                if isinstance(reader, FakeReader):
                    reader.advance(1.0)
            fast = counts() - before
            before = counts()
            for _ in range(rounds):
                s.slow_tick()
            slow = counts() - before
            out[f"{name}_fast"] = {k: v / rounds for k, v in sorted(fast.items())}
            out[f"{name}_slow"] = {k: v / rounds for k, v in sorted(slow.items())}
    return out


def med(runs: list[dict[str, Any]], *path: str) -> float:
    vals = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v[p]
        vals.append(float(v))
    return statistics.median(vals)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--spaced-scrapes", type=int, default=120)
    args = ap.parse_args()
    rng = random.Random(1)
    runs: dict[str, list[dict[str, Any]]] = {"mig": [], "whole": []}
    ratios: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-mig-") as tmp:
        for rep in range(args.repeats):
            order = ("mig", "whole") if rep % 2 == 0 else ("whole", "mig")
            for kind in order:
                runs[kind].append(serve_one(kind == "mig", args, rng, Path(tmp) / f"{kind}{rep}"))
            m, w = runs["mig"][-1], runs["whole"][-1]
            ratios.append(
                {
                    f"{mode}_{q}": m[mode][f"{q}_ms"] / w[mode][f"{q}_ms"]
                    for mode in ("back_to_back", "spaced", "spaced_apart")
                    for q in ("p50", "p99")
                }
                | {"round_p50": m["round"]["p50_ms"] / w["round"]["p50_ms"]}
            )
    calls = {kind: reader_calls(kind == "mig") for kind in ("mig", "whole")}

    label = {"mig": "8 GPUs x 7 MIG 1g.10gb, 56 jobs", "whole": "8 whole GPUs, 56 jobs (7 per GPU)"}
    rows = []
    for kind in ("mig", "whole"):
        rs = runs[kind]
        rows.append(
            [
                label[kind],
                med(rs, "jobs"),
                med(rs, "exposition", "lines"),
                med(rs, "back_to_back", "p50_ms"),
                med(rs, "back_to_back", "p99_ms"),
                med(rs, "spaced", "p50_ms"),
                med(rs, "spaced", "p99_ms"),
                med(rs, "spaced_apart", "p50_ms"),
                med(rs, "spaced_apart", "p99_ms"),
                med(rs, "round", "reads_p50_ms"),
                med(rs, "round", "p50_ms"),
                med(rs, "round", "p99_ms"),
                med(rs, "round", "max_ms"),
            ]
        )
    heads = ["configuration", "jobs", "lines", "b2b p50 ms", "b2b p99 ms", "spaced p50 ms", "spaced p99 ms"]
    heads += ["apart p50 ms", "apart p99 ms"]
    heads += ["reads p50 ms", "round p50 ms", "round p99 ms", "round max ms"]
    print(f"/metrics latency and sampler round, medians of {args.repeats} runs each (interval {INTERVAL:.0f} s)\n")
    print(table(heads, rows))
    ratio_med = {k: statistics.median(r[k] for r in ratios) for k in ratios[0]}
    print("\nMIG / whole, median of the per-pair ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratio_med.items()))
    print("\ncalls per round (FakeReader's calls; NVML functions through NvmlReader on the fake pynvml):")
    crow = []
    for kind in ("mig", "whole"):
        for part in ("fake_fast", "fake_slow", "nvml_fast", "nvml_slow"):
            c = calls[kind][part]
            by = ", ".join(f"{k.removeprefix('nvmlDevice').removeprefix('nvml')} {v:g}" for k, v in c.items())
            crow.append([kind, part, sum(c.values()), by])
    print(table(["GPUs", "round", "calls", "by call"], crow))
    targets = {"spaced_p99_ms": 2.0, "round_within_interval_ms": INTERVAL * 1e3}
    met = {
        "spaced_p99": max(r["spaced"]["p99_ms"] for r in runs["mig"]) <= targets["spaced_p99_ms"],
        "spaced_apart_p99": max(r["spaced_apart"]["p99_ms"] for r in runs["mig"]) <= targets["spaced_p99_ms"],
        "round": max(r["round"]["max_ms"] for r in runs["mig"]) <= targets["round_within_interval_ms"],
    }
    print(
        f"\ntargets: /metrics p99 <= 2 ms (every MIG run, spaced): {met['spaced_p99']} (client apart: "
        f"{met['spaced_apart_p99']}); "
        f"round within 1 s: {met['round']}"
    )
    out = {
        "gpus": GPUS,
        "instances_per_gpu": PER_GPU,
        "layout": "all-1g.10gb",
        "mig_instances_latency_s": MIG_LATENCY,
        "repeats": args.repeats,
        "runs": runs,
        "mig_over_whole_per_pair": ratios,
        "mig_over_whole_median": ratio_med,
        "calls_per_round": calls,
        "targets": targets,
        "met": met,
    }
    print(f"wrote {write_result('mig_scale', out)}")


if __name__ == "__main__":
    main()
